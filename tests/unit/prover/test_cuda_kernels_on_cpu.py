"""The CUDA kernels' source, compiled as C++ on CPU threads (tests/unit/prover/cuda_shim.h) and
driven by the real DevicePipeline, agrees with the NumPy path. This is what checks the kernels'
index arithmetic and the launch sequence on machines without a GPU; the ``xp`` tests check the
compiled kernels where a device exists."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kuzk_prover import ntt, quotient
from kuzk_prover.cuda import KERNELS, DevicePipeline
from kuzk_prover.cuda_source import kernel_source
from kuzk_prover.field import P

SHIM = Path(__file__).with_name("cuda_shim.h")
SMALL_TILE, SMALL_ROW = 5, 2
THREADS = 32

_WRAPPERS = r"""
extern "C" void run_ntt_group(unsigned grid, unsigned block, u32* x, const u32* tw,
    const u32* si, const u32* so, int hsi, int hso, int dif, int log_n, int s_lo, int k,
    int log_c) {
    shim_launch(grid, block, [&] {
        ntt_group(x, tw, si, so, hsi, hso, dif, log_n, s_lo, k, log_c);
    });
}
extern "C" void run_bitrev_scale(unsigned grid, unsigned block, const u32* src, u32* dst,
    const u32* table, int has_table, u32 scalar, int log_n) {
    shim_launch(grid, block, [&] { bitrev_scale(src, dst, table, has_table, scalar, log_n); });
}
extern "C" void run_quotient_pointwise(unsigned grid, unsigned block, const u32* a,
    const u32* b, const u32* c, u32* h, u32 n, u32 k_ab, u32 k_c) {
    shim_launch(grid, block, [&] { quotient_pointwise(a, b, c, h, n, k_ab, k_c); });
}
"""


def _compile(directory: Path, tile_log2: int) -> ctypes.CDLL:
    source = directory / f"kernels_{tile_log2}.cpp"
    source.write_text(f'#include "{SHIM}"\n{kernel_source(tile_log2)}\n{_WRAPPERS}')
    library = directory / f"kernels_{tile_log2}.so"
    command = [
        "g++",
        "-std=c++20",
        "-O2",
        "-shared",
        "-fPIC",
        "-pthread",
        "-o",
        str(library),
        str(source),
    ]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(library))


def _ctypes_arg(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ctypes.c_void_p(value.ctypes.data)
    if isinstance(value, np.uint32):
        return ctypes.c_uint(int(value))
    return ctypes.c_int(int(value))


def _pipeline(library: ctypes.CDLL, tile_log2: int, row_log2: int) -> DevicePipeline:
    functions = {name: getattr(library, f"run_{name}") for name in KERNELS}

    def launch(name: str, blocks: int, threads: int, args: tuple[Any, ...]) -> None:
        functions[name](ctypes.c_uint(blocks), ctypes.c_uint(threads), *map(_ctypes_arg, args))

    return DevicePipeline(np, launch, threads=THREADS, tile_log2=tile_log2, row_log2=row_log2)


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, DevicePipeline]:
    if shutil.which("g++") is None:
        pytest.skip("no g++ to compile the CUDA kernels as C++")
    directory = tmp_path_factory.mktemp("cuda-shim")
    return {
        "small-tiles": _pipeline(_compile(directory, SMALL_TILE), SMALL_TILE, SMALL_ROW),
        "real-tiles": _pipeline(_compile(directory, 12), 12, 5),
    }


CASES = [("small-tiles", log_n) for log_n in range(1, 12)] + [
    ("real-tiles", 12),
    ("real-tiles", 14),
]


@pytest.mark.parametrize(("tiles", "log_n"), CASES)
def test_kernel_transforms_match_numpy(
    pipelines: dict[str, DevicePipeline], tiles: str, log_n: int, rng: np.random.Generator
) -> None:
    device = pipelines[tiles]
    x = rng.integers(0, P, 1 << log_n, dtype=np.uint64)
    assert np.array_equal(device.ntt(x), ntt.ntt(x))
    assert np.array_equal(device.intt(x), ntt.intt(x))
    assert np.array_equal(device.coset_ntt(x), ntt.coset_ntt(x))
    assert np.array_equal(device.coset_intt(x), ntt.coset_intt(x))


@pytest.mark.parametrize(("tiles", "log_n"), [("small-tiles", 9), ("real-tiles", 13)])
def test_kernel_quotient_matches_numpy(
    pipelines: dict[str, DevicePipeline], tiles: str, log_n: int, rng: np.random.Generator
) -> None:
    a, b, c = (rng.integers(0, P, 1 << log_n, dtype=np.uint64) for _ in range(3))
    expected = quotient.quotient(a, b, c)
    got = pipelines[tiles].quotient(a, b, c, quotient.vanishing_on_coset(log_n))
    for mine, theirs in zip(got, (expected.h, expected.a, expected.b, expected.c), strict=True):
        assert np.array_equal(mine, theirs)
