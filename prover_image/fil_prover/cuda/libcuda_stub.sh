#!/bin/sh
# Makes a stand-in for the NVIDIA driver's libcuda.so.1, for linking kuzk-fil-prover's `cuda`
# build where no driver is installed (a build machine, an image build):
#
#   libcuda_stub.sh DIR [BINDINGS.rs]
#
# writes DIR/lib64/libcuda.so.1 (soname libcuda.so.1) and DIR/lib64/libcuda.so, the name the
# linker looks for. Pass DIR as CUDA_LIBRARY_PATH to the cargo build: cuda-driver-sys' build
# script adds DIR/lib64 to the link search path. The binary then needs libcuda.so.1 at run time,
# which the driver provides (on Kubernetes, the NVIDIA container toolkit mounts it).
#
# The stub defines every driver function that cuda-driver-sys binds (BINDINGS.rs, its
# src/cuda.rs; found through `cargo metadata` in the current directory's crate when not given).
# Each returns CUDA_ERROR_NO_DEVICE (100), as a driver on a machine without a GPU does, so a
# binary run against the stub (LD_LIBRARY_PATH=DIR/lib64) finds no GPU and proves on the CPU;
# cuGetErrorString and cuGetErrorName answer, so that the error can be printed. It is never
# installed where the driver's library would be looked for.
set -eu
out=${1:?usage: libcuda_stub.sh DIR [BINDINGS.rs]}
bindings=${2:-}
if [ -z "$bindings" ]; then
  manifest=$(cargo metadata --locked --format-version 1 --features cuda |
    grep -o '"manifest_path":"[^"]*/cuda-driver-sys-[0-9][^"]*/Cargo.toml"' | head -n 1 |
    sed 's/^"manifest_path":"//; s/"$//')
  [ -n "$manifest" ] || { echo "libcuda_stub.sh: cuda-driver-sys is not in the cuda build's graph" >&2; exit 1; }
  bindings=$(dirname "$manifest")/src/cuda.rs
fi
names=$(grep -o 'pub fn cu[A-Za-z0-9_]*' "$bindings" | cut -c8- | sort -u)
[ -n "$names" ] || { echo "libcuda_stub.sh: no driver function in $bindings" >&2; exit 1; }
mkdir -p "$out/lib64"
src="$out/lib64/libcuda_stub.c"
{
  echo '/* Made by libcuda_stub.sh: a link-time stand-in for the NVIDIA driver library. */'
  echo 'static const char why[] = "no NVIDIA driver: this libcuda.so.1 is a build stub";'
  echo 'int cuGetErrorString(int e, const char **s) { (void)e; *s = why; return 0; }'
  echo 'int cuGetErrorName(int e, const char **s) { (void)e; *s = "CUDA_ERROR_NO_DEVICE"; return 0; }'
  for name in $names; do
    case $name in
      cuGetErrorString|cuGetErrorName) ;;
      *) echo "int $name(void) { return 100; }" ;;
    esac
  done
} >"$src"
${CC:-cc} -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$out/lib64/libcuda.so.1.tmp" "$src"
mv "$out/lib64/libcuda.so.1.tmp" "$out/lib64/libcuda.so.1"
ln -sf libcuda.so.1 "$out/lib64/libcuda.so"
rm -f "$src"
echo "libcuda_stub.sh: $out/lib64/libcuda.so.1, $(echo "$names" | wc -l) driver functions" >&2
