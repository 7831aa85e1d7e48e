#!/bin/sh
# Prints the nvcc options for kuzk-fil-prover's CUDA build, for EC_GPU_CUDA_NVCC_ARGS (ec-gpu-gen
# compiles bellperson's and neptune's kernels with them at build time):
#
#   nvcc_args.sh [CAPABILITY...]     e.g. nvcc_args.sh 80 86 89 90 (the default)
#
# One fat binary holds machine code (SASS) for each GPU generation named (compute capability
# 8.0: A100; 8.6: RTX 30xx, A10, A40; 8.9: RTX 40xx, L4, L40; 9.0: H100, H200) and the PTX of the
# last one, which the driver compiles at first load on a newer GPU. ec-gpu-gen's own default
# stops at sm_86, so it is always replaced. The first options are ec-gpu-gen's.
set -eu
[ $# -gt 0 ] || set -- 80 86 89 90
args="--optimize=6 --threads=0 --fatbin"
last=
for cap in "$@"; do
  case $cap in
    "" | *[!0-9]*) echo "nvcc_args.sh: '$cap' is not a compute capability such as 90" >&2; exit 2 ;;
  esac
  args="$args --generate-code=arch=compute_$cap,code=sm_$cap"
  last=$cap
done
echo "$args --generate-code=arch=compute_$last,code=compute_$last"
