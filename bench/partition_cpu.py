"""A whole partition on NumPy (synthesis + quotient + commitment), 2^16 … 2^20, by stage.

    .venv/bin/python bench/partition_cpu.py [max_log2]

Each size runs prove() once after a warm-up of the same size (twiddle tables are then cached, as
in a prover that proves more than one partition) and prints the time of each stage and the
share of the quotient, the part a GPU takes over.
"""

from __future__ import annotations

import sys

import numpy as np

from kuzk_prover.inputs import make_input
from kuzk_prover.prover import prove


def main(argv: list[str]) -> int:
    top = int(argv[1]) if len(argv) > 1 else 20
    print(f"{'size':>6} {'synth ms':>9} {'quotient ms':>12} {'commit ms':>10} {'total ms':>9}")
    for log_n in range(16, top + 1):
        inputs = make_input(
            proof_kind="snap-update",
            miner=1234,
            sector=5678,
            randomness="0x" + "5a" * 32,
            circuit_log2=log_n,
            partition=0,
            partitions=16,
        )
        prove(inputs, on_stage=lambda _s: None, xp=np)
        result = prove(inputs, on_stage=lambda _s: None, xp=np)
        total = result.synth_ms + result.gpu_ms + result.commit_ms
        print(
            f"  2^{log_n:<2} {result.synth_ms:9.1f} {result.gpu_ms:12.1f} "
            f"{result.commit_ms:10.1f} {total:9.1f}   quotient {result.gpu_ms / total:.0%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
