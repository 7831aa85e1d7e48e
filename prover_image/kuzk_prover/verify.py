"""Recompute a partition on NumPy and compare its commitment with a reported one.

The recomputation shares no device code with a CuPy prover: it runs the array path on the host,
so a GPU kernel bug shows up as a mismatch.

    python -m kuzk_prover.verify --proof-kind snap-update --partition 3 --circuit-log2 16 \\
        --miner 1234 --sector 5678 --commitment 0x…

exits 0 when the commitments match, 1 when they differ, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from kuzk_prover.core.prover import prove
from kuzk_prover.inputs import InputError, ProofInput, add_arguments, from_arguments


def recompute(inputs: ProofInput) -> str:
    """The commitment of ``inputs``, proven on NumPy."""
    return prove(inputs, on_stage=lambda _stage: None, xp=np).commitment


def verify(inputs: ProofInput, commitment: str) -> bool:
    """Whether ``commitment`` (0x and 64 hex digits, any case) is that of ``inputs``."""
    return recompute(inputs) == commitment.strip().lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kuzk_prover.verify", description=__doc__)
    add_arguments(parser)
    parser.add_argument("--commitment", required=True, help="the reported commitment")
    args = parser.parse_args(argv)
    try:
        proof = from_arguments(args)
    except InputError as exc:
        print(f"kuzk-verify: invalid input: {exc}", file=sys.stderr)
        return 2
    expected = recompute(proof)
    if expected == args.commitment.strip().lower():
        print(f"ok {expected}")
        return 0
    print(f"mismatch: reported {args.commitment}, recomputed {expected}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
