"""NumPy NTT against galois.ntt over BabyBear, 2^12 … 2^20, side by side in one run.

    .venv/bin/python bench/ntt_cpu.py      (needs the bench extra: pip install -e '.[bench]')

Both transforms get the same random input, their outputs are compared, and each size is timed
as the best of several repetitions after a warm-up (galois compiles its kernels on first use).
Prints elements/s for both and the ratio; exits non-zero if any output differs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from kuzk_prover.core import ntt
from kuzk_prover.core.field import P

try:
    import galois
except ImportError:
    sys.exit("bench/ntt_cpu.py needs galois: pip install -e '.[bench]'")


def best_seconds(run: Callable[[], object], budget: float = 1.0) -> float:
    run()
    best, spent, count = float("inf"), 0.0, 0
    while count < 3 or (spent < budget and count < 50):
        started = time.perf_counter()
        run()
        elapsed = time.perf_counter() - started
        best, spent, count = min(best, elapsed), spent + elapsed, count + 1
    return best


def main() -> int:
    rng = np.random.default_rng()
    print(f"{'size':>6} {'kuzk elem/s':>14} {'galois elem/s':>14} {'ratio':>7}")
    worst = float("inf")
    for log_n in range(12, 21):
        n = 1 << log_n
        x = rng.integers(0, P, n, dtype=np.uint64)
        as_int = x.astype(np.int64)
        ours = ntt.ntt(x)
        theirs = np.asarray(galois.ntt(as_int, modulus=P)).astype(np.uint64)
        if not np.array_equal(ours, theirs):
            print(f"2^{log_n}: outputs differ", file=sys.stderr)
            return 1
        t_ours = best_seconds(partial(ntt.ntt, x))
        t_theirs = best_seconds(partial(galois.ntt, as_int, modulus=P))
        ratio = t_theirs / t_ours
        worst = min(worst, ratio)
        print(f"  2^{log_n:<2} {n / t_ours:14.3e} {n / t_theirs:14.3e} {ratio:6.2f}x")
    print(f"slowest ratio (galois time / kuzk time): {worst:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
