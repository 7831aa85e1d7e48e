"""The CUDA kernels' source, compiled as C++ on CPU threads (tests/unit/prover/core/cuda_shim.h) and
driven by the real DevicePipeline, agrees with the NumPy path: transforms, quotients, and whole
proofs commitment for commitment. This is what checks the kernels' index arithmetic, the launch
sequence and what the GPU phase moves on machines without a GPU; the ``xp`` tests check the
compiled kernels where a device exists."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kuzk_prover.core import commitment, cuda, domain, field, ntt, quotient, synthesis
from kuzk_prover.core.cuda import KERNELS, DevicePipeline
from kuzk_prover.core.cuda_source import kernel_source
from kuzk_prover.core.cuda_streams import HostStreams
from kuzk_prover.core.field import GENERATOR, P
from kuzk_prover.core.quotient import Quotient

SHIM = Path(__file__).with_name("cuda_shim.h")
SMALL_TILE, SMALL_ROW = 5, 2
THREADS = 32

_WRAPPERS = r"""
extern "C" void run_ntt_group(unsigned grid, unsigned block, const u32* src, u32* dst,
    const u32* tw, const u32* si, const u32* so, u32 factor, int flags, int dif, int log_n,
    int s_lo, int k, int log_c) {
    shim_launch(grid, block, [&] {
        ntt_group(src, dst, tw, si, so, factor, flags, dif, log_n, s_lo, k, log_c);
    });
}
extern "C" void run_powers(unsigned grid, unsigned block, u32* out, u32 count, u32 base,
    u32 factor, int reversed, int log_n) {
    shim_launch(grid, block, [&] { powers(out, count, base, factor, reversed, log_n); });
}
extern "C" void run_powers_from(unsigned grid, unsigned block, u32* out, u32 count,
    const u32* lo, const u32* hi, int lo_bits, int reversed, int log_n) {
    shim_launch(grid, block, [&] { powers_from(out, count, lo, hi, lo_bits, reversed, log_n); });
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

    return DevicePipeline(
        np, launch, HostStreams(), threads=THREADS, tile_log2=tile_log2, row_log2=row_log2
    )


class _CountingStreams(HostStreams):
    given_back = 0

    def give_back(self) -> None:
        self.given_back += 1


def _recording(real: DevicePipeline, streams: HostStreams) -> tuple[DevicePipeline, list[str]]:
    """A pipeline with ``real``'s kernels and tiles that records the name of every launch."""
    launched: list[str] = []

    def launch(name: str, blocks: int, threads: int, args: tuple[Any, ...]) -> None:
        launched.append(name)
        real.launch(name, blocks, threads, args)

    device = DevicePipeline(np, launch, streams, threads=real.threads,
                            tile_log2=real.tile_log2, row_log2=real.row_log2)
    return device, launched


def _bit_reversal(log_n: int) -> np.ndarray:
    indices = np.arange(1 << log_n)
    reversed_ = np.zeros_like(indices)
    for bit in range(log_n):
        reversed_ |= ((indices >> bit) & 1) << (log_n - 1 - bit)
    return reversed_


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
    h, ca, cb, cc = pipelines[tiles].quotient(a, b, c, quotient.vanishing_on_coset(log_n))
    assert np.array_equal(h, expected.h)
    order = _bit_reversal(log_n)
    for mine, theirs in zip((ca, cb, cc), (expected.a, expected.b, expected.c), strict=True):
        assert np.array_equal(mine, theirs[order]), "coefficients come in bit-reversed order"


HELD_CASES = [("small-tiles", log_n) for log_n in (4, 5, 8, 10)] + [
    ("real-tiles", log_n) for log_n in (8, 10, 12, 14)
]


@pytest.mark.parametrize(("tiles", "log_n"), HELD_CASES)
def test_the_held_run_commits_like_numpy(
    pipelines: dict[str, DevicePipeline], tiles: str, log_n: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the GPU phase brings back (uint32 words, a, b, c bit-reversed) gives the NumPy
    path's commitment and passes the self-check, the phase allocates the device memory its
    prepared run announced (what the lane's acquire write carries), and it leaves no table
    behind."""
    streams = _CountingStreams()
    device, launched = _recording(pipelines[tiles], streams)
    allocated: list[int] = []

    class Arena(cuda._Arena):
        def __init__(self, xp: Any, words: int) -> None:
            super().__init__(xp, words)
            allocated.append(self.buffer.nbytes)

    monkeypatch.setattr(cuda, "_Arena", Arena)
    witness = synthesis.synthesize(bytes([log_n]) * 32, log_n)
    expected = commitment.commit(quotient.quotient(witness.a, witness.b, witness.c))
    run = device.prepare(witness.a, witness.b, witness.c, quotient.vanishing_on_coset(log_n))
    assert launched == [] and allocated == [], "preparing launches and allocates nothing"
    h, ca, cb, cc = run()
    assert allocated == [run.device_bytes], "one allocation, the size announced"
    assert all(x.dtype == np.uint32 for x in (h, ca, cb, cc))
    assert commitment.commit(Quotient(h, ca, cb, cc, bit_reversed=True)) == expected
    assert streams.given_back == 1, "the phase gives the device memory back"
    launched.clear()
    device.table(log_n, "fwd")
    assert launched == ["powers", "powers", "powers_from"], "the phase dropped its tables"


@pytest.mark.parametrize("log_n", [1, 10, 15])
def test_device_tables_come_from_the_kernel(
    pipelines: dict[str, DevicePipeline], monkeypatch: pytest.MonkeyPatch, log_n: int
) -> None:
    """Every table the transforms read is made by the table kernels: no host table is built
    (the host builders fail if called), and only they run to make one (two small tables by
    square-and-multiply, then one product per entry)."""
    n = 1 << log_n
    omega = field.root_of_unity(log_n)
    mont = field.to_mont
    expected = {
        "fwd": mont(field.powers(omega, n // 2)),
        "inv": mont(field.powers(field.inverse_int(omega), n // 2)),
        "shift": mont(field.powers(GENERATOR, n)),
        "shift_rev": mont(field.powers(GENERATOR, n))[_bit_reversal(log_n)],
        "unshift": mont(domain.coset_tables(log_n)[1]),
    }

    def no_host_tables(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a device table was built on the host")

    for module, name in ((field, "powers"), (field, "to_mont"), (domain, "coset_tables"),
                         (ntt, "host_tables")):
        monkeypatch.setattr(module, name, no_host_tables)
    device, launched = _recording(pipelines["small-tiles"], HostStreams())
    for name, table in expected.items():
        launched.clear()
        made = device.table(log_n, name)
        assert launched == ["powers", "powers", "powers_from"], name
        assert made.dtype == np.uint32 and np.array_equal(made, table), name
