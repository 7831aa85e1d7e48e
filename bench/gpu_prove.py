"""A whole partition on CuPy against NumPy, with the GPU phase as lanes hold it.

    python bench/gpu_prove.py [--sizes 20 22 24]

Run on a machine with an NVIDIA GPU and CuPy. For every circuit size it proves the same
snap-update partition with ``prove(xp=numpy)`` and ``prove(xp=cupy)`` inside a ``gpu_phase``
that records what the device holds when the phase ends: the commitments must be equal (exit 1
otherwise), and CuPy's memory pool must hold nothing once the phase is over (the next lane gets
the whole GPU; exit 1 otherwise). It prints synthesis, GPU phase and commitment times of both,
the GPU phase's speed-up and the share of the partition the GPU phase is on each.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from kuzk_prover.inputs import make_input
from kuzk_prover.prover import Result, prove

try:
    import cupy
except ImportError:
    sys.exit("bench/gpu_prove.py needs CuPy: pip install -e '.[gpu]'")


def run(size: int, xp: ModuleType, held_after: list[int]) -> Result:
    @contextlib.contextmanager
    def phase() -> Iterator[None]:
        yield
        held_after.append(cupy.get_default_memory_pool().used_bytes())

    proof = make_input(proof_kind="snap-update", miner=1234, sector=5678, randomness=None,
                       circuit_log2=size, partition=3, partitions=16)
    return prove(proof, xp=xp, gpu_phase=phase)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 22, 24])
    args = parser.parse_args()
    print(f"{'log2':>4} {'backend':>7} {'synth ms':>9} {'gpu ms':>9} {'commit ms':>9}"
          f" {'gpu share':>9}  commitment")
    failures = 0
    run(12, cupy, [])  # compile and load the kernels once
    for size in args.sizes:
        held: list[int] = []
        results = {name: run(size, xp, held) for name, xp in (("numpy", np), ("cupy", cupy))}
        for name, r in results.items():
            total = r.synth_ms + r.gpu_ms + r.commit_ms
            print(f"{size:>4} {name:>7} {r.synth_ms:9.1f} {r.gpu_ms:9.1f} {r.commit_ms:9.1f}"
                  f" {r.gpu_ms / total:9.1%}  {r.commitment[:18]}")
        same = results["numpy"].commitment == results["cupy"].commitment
        print(f"     GPU phase {results['numpy'].gpu_ms / results['cupy'].gpu_ms:.1f}x faster"
              f" on CuPy; commitments {'equal' if same else 'DIFFER'}; device memory held"
              f" after the phase: {held[-1]} bytes")
        failures += (not same) + (held[-1] != 0)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
