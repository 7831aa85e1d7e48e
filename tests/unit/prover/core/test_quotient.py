"""For a satisfied witness the quotient is a polynomial of degree < n - 1 and the identity
a·b - c = h·Z_H holds at random points; one corrupted constraint makes the self-check fail and
the prover refuse to report."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from kuzk_prover.core import commitment, field, prover, synthesis
from kuzk_prover.core import quotient as quotient_module
from kuzk_prover.core.commitment import SelfCheckFailed
from kuzk_prover.core.field import P
from kuzk_prover.core.quotient import Quotient, evaluate_many, quotient, vanishing_at
from kuzk_prover.core.xp import to_host
from kuzk_prover.inputs import make_input


def _horner(coeffs: list[int], r: int) -> int:
    value = 0
    for c in reversed(coeffs):
        value = (value * r + c) % P
    return value


def _random_satisfied(rng: np.random.Generator, log_n: int) -> tuple[np.ndarray, ...]:
    a = rng.integers(0, P, 1 << log_n, dtype=np.uint64)
    b = rng.integers(0, P, 1 << log_n, dtype=np.uint64)
    return a, b, field.mul(a, b)


@pytest.mark.parametrize("log_n", [1, 2, 5, 10, 14])
def test_satisfied_witness_gives_low_degree_quotient(
    xp: ModuleType, rng: np.random.Generator, log_n: int
) -> None:
    a, b, c = _random_satisfied(rng, log_n)
    q = quotient(xp.asarray(a), xp.asarray(b), xp.asarray(c))
    h = to_host(q.h)
    assert int(h[-1]) == 0
    points = [int(v) for v in rng.integers(0, P, 3)]
    columns = evaluate_many((q.a, q.b, q.c), points, bit_reversed=q.bit_reversed)
    for r, (ea, eb, ec), (eh,) in zip(points, columns, evaluate_many((q.h,), points), strict=True):
        assert (ea * eb - ec) % P == eh * vanishing_at(r, log_n) % P
    commitment.check(q, [int(v) for v in rng.integers(0, P, 4)])


def test_quotient_matches_python_ints_at_small_size(rng: np.random.Generator) -> None:
    a, b, c = _random_satisfied(rng, 3)
    q = quotient(a, b, c)
    r = int(rng.integers(0, P))
    ha = _horner(q.a.tolist(), r) * _horner(q.b.tolist(), r) - _horner(q.c.tolist(), r)
    assert ha % P == _horner(q.h.tolist(), r) * vanishing_at(r, 3) % P
    omega = field.root_of_unity(3)
    assert [_horner(q.a.tolist(), pow(omega, k, P)) for k in range(8)] == a.tolist()


def _bit_reversed(values: list[int]) -> list[int]:
    bits = len(values).bit_length() - 1
    return [values[int(f"{j:0{bits}b}"[::-1], 2) if bits else 0] for j in range(len(values))]


@pytest.mark.parametrize("log_n", [0, 1, 3, 6, 7, 12])
@pytest.mark.parametrize("bit_reversed", [False, True])
def test_evaluation_matches_horner(
    rng: np.random.Generator, log_n: int, bit_reversed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The self-check's matrix evaluation agrees with Horner's rule in Python integers, in
    either coefficient order, across row chunks, and exactly at the largest coefficients."""
    monkeypatch.setattr(quotient_module, "EVAL_CHUNK_LOG2", 8)
    n = 1 << log_n
    polys = [rng.integers(0, P, n, dtype=np.uint64), np.full(n, P - 1, dtype=np.uint64)]
    points = [int(v) for v in rng.integers(0, P, 3)] + [P - 1, 65535]
    stored = [np.array(_bit_reversed(p.tolist()), dtype=np.uint32) if bit_reversed else p
              for p in polys]
    got = evaluate_many(stored, points, bit_reversed=bit_reversed)
    assert got == [tuple(_horner(p.tolist(), r) for p in polys) for r in points]


def test_bit_reversed_powers() -> None:
    base = 1234567
    table = quotient_module.bit_reversed_powers(base, 16)
    assert table.tolist() == _bit_reversed([pow(base, i, P) for i in range(16)])


def test_hash_chain_witness_passes_the_self_check() -> None:
    witness = synthesis.synthesize(b"\x01" * 32, 12)
    q = quotient(witness.a, witness.b, witness.c)
    root, points = commitment.commit(q)
    assert len(root) == 32 and len(points) == commitment.CHECK_POINTS


@pytest.mark.parametrize("row", [0, 1000, 4095])
def test_one_corrupted_constraint_fails_the_self_check(row: int) -> None:
    witness = synthesis.synthesize(b"\x02" * 32, 12)
    c = witness.c.copy()
    c[row] = (int(c[row]) + 1) % P
    q = quotient(witness.a, witness.b, c)
    with pytest.raises(SelfCheckFailed):
        commitment.commit(q)


def test_a_wrong_h_fails_the_identity_even_with_the_right_degree(
    rng: np.random.Generator,
) -> None:
    a, b, c = _random_satisfied(rng, 8)
    q = quotient(a, b, c)
    h = q.h.copy()
    h[0] = (int(h[0]) + 1) % P
    with pytest.raises(SelfCheckFailed, match="at r="):
        commitment.check(Quotient(h=h, a=q.a, b=q.b, c=q.c), [12345])


def test_prover_refuses_to_report_a_corrupted_witness(monkeypatch: pytest.MonkeyPatch) -> None:
    real = synthesis.synthesize

    def corrupted(seed: bytes, log_n: int) -> synthesis.Witness:
        w = real(seed, log_n)
        c = w.c.copy()
        c[7] = (int(c[7]) + 1) % P
        return synthesis.Witness(a=w.a, b=w.b, c=c, lanes=w.lanes, rounds=w.rounds)

    monkeypatch.setattr(synthesis, "synthesize", corrupted)
    inputs = make_input(
        proof_kind="porep-c2",
        miner=1,
        sector=2,
        randomness=None,
        circuit_log2=10,
        partition=0,
        partitions=10,
    )
    stages: list[str] = []
    with pytest.raises(SelfCheckFailed):
        prover.prove(inputs, on_stage=stages.append, xp=np)
    assert stages == ["synthesizing", "synth_done", "gpu", "committing"], "the stage names"


def test_mismatched_shapes_are_refused() -> None:
    x = np.zeros(8, dtype=np.uint64)
    with pytest.raises(ValueError, match=r"\(8,\), \(8,\), \(4,\)"):
        quotient(x, x, x[:4])
