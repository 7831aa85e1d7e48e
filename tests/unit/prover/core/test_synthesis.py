"""The witness is the hash chain x → (x + k_i)^7 in four rows per round, every row a·b = c."""

from __future__ import annotations

import numpy as np
import pytest

from kuzk_prover.core import field, synthesis
from kuzk_prover.core.field import P


@pytest.mark.parametrize("log_n", [4, 6, 8, 12, 16])
def test_every_row_is_satisfied_and_the_domain_is_filled(log_n: int) -> None:
    w = synthesis.synthesize(b"seed" * 8, log_n)
    n = 1 << log_n
    assert w.a.shape == w.b.shape == w.c.shape == (n,)
    assert np.array_equal(field.mul(w.a, w.b), w.c)
    assert synthesis.ROWS_PER_ROUND * w.lanes * w.rounds == n
    assert int(w.a.max()) < P


def test_rows_are_the_hash_chain_rounds() -> None:
    seed = b"\x07" * 32
    w = synthesis.synthesize(seed, 10)
    lanes, rounds = synthesis.shape(10)
    k = synthesis.round_constants(rounds).tolist()
    x = synthesis.lane_inputs(seed, lanes).tolist()
    a = w.a.reshape(rounds, 4, lanes)
    c = w.c.reshape(rounds, 4, lanes)
    for i in range(rounds):
        t = [(v + k[i]) % P for v in x]
        assert a[i, 0].tolist() == t
        x = [pow(v, 7, P) for v in t]
        assert c[i, 3].tolist() == x


def test_seed_depends_on_every_input() -> None:
    base = ("snap-update", 1234, 5678, None, 3)
    seeds = {synthesis.derive_seed(*base)}
    for i, other in enumerate(("window-post", 1235, 5679, b"\x00" * 32, 4)):
        changed: list[object] = list(base)
        changed[i] = other
        seeds.add(synthesis.derive_seed(*changed))  # type: ignore[arg-type]
    assert len(seeds) == 6
