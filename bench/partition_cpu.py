"""A whole partition on NumPy (synthesis + quotient + commitment) by stage, and what its GPU
phase holds against the transforms alone.

    .venv/bin/python bench/partition_cpu.py [--sizes 16 18 20 22] [--repeats 3]

For each size, after a warm-up proof of that size, it proves the partition ``--repeats`` times
with a ``gpu_phase`` that times how long the phase is held, and times the quotient's transforms
on their own (``ArrayTransforms.quotient`` on the same witness, tables built beforehand) as many
times; best of each. It prints the stages, the commitment's share of the partition, the held
phase next to the transforms' own time and their ratio: the phase must hold the transforms and
nothing else (within 10 %).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from collections.abc import Iterator

import numpy as np

from kuzk_prover.core import synthesis
from kuzk_prover.core.ntt import ArrayTransforms, host_tables
from kuzk_prover.core.prover import Result, prove
from kuzk_prover.core.quotient import vanishing_on_coset
from kuzk_prover.inputs import make_input

TOLERANCE = 0.10


@contextlib.contextmanager
def timed(held: list[float], _device_bytes: int) -> Iterator[None]:
    """A gpu_phase that appends how long it was held, in ms."""
    started = time.perf_counter()
    yield
    held.append((time.perf_counter() - started) * 1e3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[16, 18, 20, 22])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(
        f"{'size':>6} {'synth ms':>9} {'held ms':>9} {'commit ms':>10} {'total ms':>9}"
        f" {'commit':>7} {'transforms ms':>14} {'held/transforms':>16}"
    )
    worst = 0.0
    for log_n in args.sizes:
        inputs = make_input(
            proof_kind="snap-update",
            miner=1234,
            sector=5678,
            randomness="0x" + "5a" * 32,
            circuit_log2=log_n,
            partition=0,
            partitions=16,
        )
        held: list[float] = []
        prove(inputs, on_stage=lambda _s: None, xp=np)
        results: list[Result] = [
            prove(inputs, on_stage=lambda _s: None, xp=np, gpu_phase=functools.partial(timed, held))
            for _ in range(args.repeats)
        ]
        witness = synthesis.synthesize(inputs.seed(), log_n)
        alone = ArrayTransforms(np, host_tables(log_n))
        z = vanishing_on_coset(log_n)
        transforms_ms = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            alone.quotient(witness.a, witness.b, witness.c, z)
            transforms_ms.append((time.perf_counter() - started) * 1e3)
        best = min(results, key=lambda r: r.synth_ms + r.gpu_ms + r.commit_ms)
        total = best.synth_ms + best.gpu_ms + best.commit_ms
        ratio = min(held) / min(transforms_ms)
        worst = max(worst, abs(ratio - 1))
        print(
            f"  2^{log_n:<2} {best.synth_ms:9.1f} {min(held):9.1f} {best.commit_ms:10.1f}"
            f" {total:9.1f} {best.commit_ms / total:7.1%} {min(transforms_ms):14.1f}"
            f" {ratio:16.3f}"
        )
    verdict = "within" if worst <= TOLERANCE else "NOT within"
    print(f"held phase {verdict} {TOLERANCE:.0%} of the transforms' own time at every size")
    return 0


if __name__ == "__main__":
    sys.exit(main())
