"""The pieces of kuzk-fil-prover's CUDA build that need no nvcc and no GPU.

The build itself (``testenv/build_filecoin --cuda``, ``testenv/images --cuda``: nvcc compiling
bellperson's and neptune's kernels, 15 to 45 minutes on two cores) is not part of the suite.
Checked here: the GPU targets nvcc is asked for (``cuda/nvcc_args.sh``), the stub of the
driver's ``libcuda.so.1`` the binary links against (``cuda/libcuda_stub.sh``: every function
answers "no device", as a driver on a machine without a GPU does, so a binary run against it
proves on the CPU), and where ``testenv/build_filecoin --cuda`` keeps its build: apart from the
CPU build's, keyed by the GPU targets too.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CUDA = ROOT / "prover_image" / "fil_prover" / "cuda"
BUILD = ROOT / "testenv" / "build_filecoin"


def _nvcc_args(*caps: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(CUDA / "nvcc_args.sh"), *caps], capture_output=True,
                          text=True, check=False)


def test_nvcc_is_asked_for_each_gpu_generation_and_the_newest_ones_ptx() -> None:
    default = _nvcc_args()
    assert default.returncode == 0, default.stderr
    words = default.stdout.split()
    assert words[:3] == ["--optimize=6", "--threads=0", "--fatbin"]  # ec-gpu-gen's own
    assert words[3:] == [f"--generate-code=arch=compute_{c},code=sm_{c}"
                         for c in ("80", "86", "89", "90")] + [
        "--generate-code=arch=compute_90,code=compute_90"]
    more = _nvcc_args("75", "120").stdout.split()
    assert "--generate-code=arch=compute_75,code=sm_75" in more
    assert more[-1] == "--generate-code=arch=compute_120,code=compute_120"
    for bad in ("sm_90", "9.0", "90a", ""):
        refused = _nvcc_args(bad)
        assert refused.returncode == 2 and "not a compute capability" in refused.stderr, bad


BINDINGS = """
extern "C" {
    pub fn cuGetErrorString(error: CUresult, pStr: *mut *const ::std::os::raw::c_char) -> CUresult;
}
extern "C" {
    pub fn cuGetErrorName(error: CUresult, pStr: *mut *const ::std::os::raw::c_char) -> CUresult;
}
extern "C" {
    pub fn cuInit(Flags: ::std::os::raw::c_uint) -> CUresult;
}
extern "C" {
    pub fn cuDeviceGetCount(count: *mut ::std::os::raw::c_int) -> CUresult;
}
extern "C" {
    pub fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CUresult;
}
"""


def test_the_libcuda_stub_links_as_the_driver_and_answers_no_device(tmp_path: Path) -> None:
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler")
    bindings = tmp_path / "cuda.rs"
    bindings.write_text(BINDINGS)
    made = subprocess.run(["sh", str(CUDA / "libcuda_stub.sh"), str(tmp_path / "stub"),
                           str(bindings)], capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    assert "5 driver functions" in made.stderr
    lib = tmp_path / "stub" / "lib64"
    assert sorted(p.name for p in lib.iterdir()) == ["libcuda.so", "libcuda.so.1"]
    assert os.readlink(lib / "libcuda.so") == "libcuda.so.1"  # what -lcuda finds
    if shutil.which("readelf"):
        dynamic = subprocess.run(["readelf", "-d", str(lib / "libcuda.so.1")],
                                 capture_output=True, text=True, check=True).stdout
        assert "Library soname: [libcuda.so.1]" in dynamic  # what the binary will need
    driver = ctypes.CDLL(str(lib / "libcuda.so.1"))
    assert driver.cuInit(0) == 100  # CUDA_ERROR_NO_DEVICE
    count = ctypes.c_int(-1)
    assert driver.cuDeviceGetCount(ctypes.byref(count)) == 100
    assert driver.cuCtxCreate_v2(None, 0, 0) == 100
    message = ctypes.c_char_p()
    assert driver.cuGetErrorString(100, ctypes.byref(message)) == 0
    assert message.value is not None and message.value.startswith(b"no NVIDIA driver")
    assert driver.cuGetErrorName(100, ctypes.byref(message)) == 0
    assert message.value == b"CUDA_ERROR_NO_DEVICE"


def _print(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD), *args, "--print"],
        env={**os.environ, "KUZK_TESTENV_CACHE": str(tmp_path), **env},
        capture_output=True, text=True, check=False)


def test_build_filecoin_keeps_the_cuda_build_apart_keyed_by_its_gpu_targets(
        tmp_path: Path) -> None:
    cpu = _print(tmp_path)
    cuda = _print(tmp_path, "--cuda")
    assert cpu.returncode == 0 and cuda.returncode == 0, cpu.stderr + cuda.stderr
    bin_dir, stub = cuda.stdout.splitlines()
    assert Path(bin_dir).parent.name.startswith("filecoin-cuda-")
    assert Path(bin_dir).parent.parent == tmp_path
    assert bin_dir != cpu.stdout.splitlines()[0]
    assert stub == str(Path(bin_dir).parent / "libcuda-stub" / "lib64")
    assert _print(tmp_path, "--cuda", KUZK_CUDA_ARCHS="80 86 89 90").stdout == cuda.stdout
    only_h100 = _print(tmp_path, "--cuda", KUZK_CUDA_ARCHS="90")
    assert only_h100.returncode == 0 and only_h100.stdout != cuda.stdout
    bad = _print(tmp_path, "--cuda", KUZK_CUDA_ARCHS="sm_90")
    assert bad.returncode == 2 and "not a compute capability" in bad.stderr
    assert not list(tmp_path.iterdir())  # --print builds nothing
    params = subprocess.run(["bash", str(BUILD), "--cuda", "--params", "porep-c2"],
                            env={**os.environ, "KUZK_TESTENV_CACHE": str(tmp_path)},
                            capture_output=True, text=True, check=False)
    assert params.returncode == 2 and "--cuda takes only --print" in params.stderr
