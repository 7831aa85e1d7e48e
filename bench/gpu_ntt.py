"""CuPy NTT and quotient against the NumPy path and against the memory-bandwidth floor.

    python bench/gpu_ntt.py [--min-log2 20] [--max-log2 26]

Run on a machine with an NVIDIA GPU and the gpu extra installed. For every size it checks that
the CuPy kernels give exactly the NumPy path's results on the same random input (exit 1 on any
mismatch; the quotient's coefficients of a, b, c come back in bit-reversed order), then prints
kernel time and achieved bandwidth next to the device's measured copy bandwidth. At 2^24 it
compares the quotient's kernels (on uint32 words already on the device, transformed in place)
with their floor: the bytes of 7 NTT passes (one read and one write of n uint32 words each) plus
the pointwise pass (three reads, one write), moved at copy bandwidth. The goal is to stay within
3x of that floor.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from kuzk_prover.core import ntt, quotient
from kuzk_prover.core.field import P

try:
    import cupy
except ImportError:
    sys.exit("bench/gpu_ntt.py needs CuPy: pip install -e '.[gpu]'")

from kuzk_prover.core.cuda import pipeline
from kuzk_prover.core.cuda_source import transform_launches

WORD = 4
FLOOR_LOG2 = 24


def device_seconds(run: Callable[[], object], repeats: int = 5) -> float:
    """Best wall time of ``run`` on the device, measured with CUDA events after a warm-up."""
    run()
    cupy.cuda.Stream.null.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return best


def copy_bandwidth() -> float:
    """Bytes per second read plus written by a device-to-device copy of 1 GiB."""
    src = cupy.ones(2**28, dtype=cupy.uint32)
    dst = cupy.empty_like(src)
    seconds = device_seconds(lambda: dst.__setitem__(slice(None), src))
    return 2 * src.nbytes / seconds


def floor_bytes(n: int) -> int:
    """7 NTT passes (read + write) and the pointwise pass (3 reads + 1 write), uint32 words."""
    ntt_passes = 7
    return (ntt_passes * 2 + 4) * n * WORD


def bit_reversal(log_n: int) -> np.ndarray:
    indices = np.arange(1 << log_n)
    reversed_ = np.zeros_like(indices)
    for bit in range(log_n):
        reversed_ |= ((indices >> bit) & 1) << (log_n - 1 - bit)
    return reversed_


def check(label: str, got: object, expected: np.ndarray) -> bool:
    same = np.array_equal(cupy.asnumpy(got), expected)
    if not same:
        print(f"MISMATCH {label}", flush=True)
    return same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--min-log2", type=int, default=20)
    parser.add_argument("--max-log2", type=int, default=26)
    args = parser.parse_args(argv)
    if not cupy.is_available():
        print("no usable CUDA device", file=sys.stderr)
        return 2
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    bandwidth = copy_bandwidth()
    print(f"device: {props['name'].decode()}  copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    device = pipeline()
    rng = np.random.default_rng()
    ok = True
    for log_n in range(args.min_log2, args.max_log2 + 1):
        n = 1 << log_n
        x = rng.integers(0, P, n, dtype=np.uint64)
        x_dev = cupy.asarray(x)
        started = time.perf_counter()
        expected = ntt.ntt(x)
        cpu_ntt = time.perf_counter() - started
        ok &= check(f"ntt 2^{log_n}", ntt.ntt(x_dev), expected)
        ok &= check(f"intt 2^{log_n}", ntt.intt(x_dev), ntt.intt(x))
        words = x_dev.astype(cupy.uint32)
        passes = len(transform_launches(log_n, dif=True))
        kernel = device_seconds(partial(device.transform, words, log_n, dif=True, inverse=False))
        api = device_seconds(partial(ntt.ntt, x_dev))
        moved = passes * 2 * n * WORD
        print(
            f"2^{log_n} NTT: kernels {kernel * 1e3:8.3f} ms ({passes} passes, "
            f"{moved / kernel / 1e9:6.0f} GB/s = {moved / kernel / bandwidth:4.0%} of copy), "
            f"uint64 API {api * 1e3:8.3f} ms, NumPy {cpu_ntt * 1e3:9.1f} ms"
        )

        a = rng.integers(0, P, n, dtype=np.uint64)
        b = rng.integers(0, P, n, dtype=np.uint64)
        c = rng.integers(0, P, n, dtype=np.uint64)
        a_dev, b_dev, c_dev = cupy.asarray(a), cupy.asarray(b), cupy.asarray(c)
        z = quotient.vanishing_on_coset(log_n)
        started = time.perf_counter()
        reference = quotient.quotient(a, b, c)
        cpu_quotient = time.perf_counter() - started
        got = device.quotient(a_dev, b_dev, c_dev, z)
        order = bit_reversal(log_n)
        expected_habc = (reference.h, reference.a[order], reference.b[order], reference.c[order])
        for name, mine, theirs in zip("habc", got, expected_habc, strict=True):
            ok &= check(f"quotient {name} 2^{log_n}", mine, theirs)
        words = [v.astype(cupy.uint32) for v in (a_dev, b_dev, c_dev)]
        seconds = device_seconds(partial(device.quotient, *words, z, overwrite=True))
        floor = floor_bytes(n) / bandwidth
        print(
            f"2^{log_n} quotient: {seconds * 1e3:8.3f} ms, floor {floor * 1e3:7.3f} ms "
            f"({seconds / floor:4.1f}x floor), NumPy {cpu_quotient * 1e3:9.1f} ms "
            f"({cpu_quotient / seconds:6.0f}x slower)"
        )
        if log_n == FLOOR_LOG2:
            verdict = "within" if seconds <= 3 * floor else "NOT within"
            print(f"2^{FLOOR_LOG2} quotient is {verdict} 3x of the memory-bandwidth floor")
        del x_dev, words, a_dev, b_dev, c_dev, got
        device.release()
    print("all results match NumPy" if ok else "RESULTS DIFFER FROM NUMPY")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
