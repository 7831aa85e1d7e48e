"""The same partition always gives the same commitment; a different partition or randomness
gives a different one; verify() recomputes and compares."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np

from kuzk_prover.core.commitment import merkle_root
from kuzk_prover.core.prover import prove
from kuzk_prover.inputs import ProofInput, make_input
from kuzk_prover.verify import verify

RANDOMNESS = "0x" + "ab" * 32


def _input(**changes: object) -> ProofInput:
    base = make_input(
        proof_kind="snap-update",
        miner=1234,
        sector=5678,
        randomness=RANDOMNESS,
        circuit_log2=12,
        partition=3,
        partitions=16,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _commitment(inputs: ProofInput) -> str:
    return prove(inputs, on_stage=lambda _s: None, xp=np).commitment


def test_same_input_same_commitment() -> None:
    assert _commitment(_input()) == _commitment(_input())


def test_partition_randomness_and_sector_change_the_commitment() -> None:
    commitments = {
        _commitment(_input()),
        _commitment(_input(partition=4)),
        _commitment(_input(randomness=bytes(32))),
        _commitment(_input(randomness=None)),
        _commitment(_input(sector=5679)),
        _commitment(_input(proof_kind="porep-c2")),
    }
    assert len(commitments) == 6


def test_verify_accepts_the_prover_commitment_and_rejects_others() -> None:
    inputs = _input()
    commitment = _commitment(inputs)
    assert verify(inputs, commitment)
    assert verify(inputs, commitment.upper().replace("0X", "0x"))
    assert not verify(inputs, _commitment(_input(partition=4)))
    assert not verify(_input(partition=4), commitment)


def test_verify_command_line() -> None:
    commitment = _commitment(_input())
    flags = [
        "--proof-kind=snap-update",
        "--partition=3",
        "--partitions=16",
        "--circuit-log2=12",
        "--miner=1234",
        "--sector=5678",
        f"--randomness={RANDOMNESS}",
    ]
    command = [sys.executable, "-m", "kuzk_prover.verify", *flags]
    ok = subprocess.run([*command, f"--commitment={commitment}"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("ok ")
    bad = subprocess.run([*command, "--commitment=0x" + "0" * 64], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "mismatch" in bad.stdout


def test_merkle_root_changes_with_any_coefficient() -> None:
    h = np.arange(1024, dtype=np.uint64)
    roots = {merkle_root(h)}
    for position in (0, 255, 256, 1023):
        changed = h.copy()
        changed[position] += 1
        roots.add(merkle_root(changed))
    assert len(roots) == 5
