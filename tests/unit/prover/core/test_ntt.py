"""The NTTs agree with their definitions: a naive O(n²) DFT, round trips, direct evaluation on
the coset, on fresh random inputs and on every backend."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from kuzk_prover.core import domain, field, ntt
from kuzk_prover.core.field import GENERATOR, P


def _naive_dft(x: list[int], omega: int) -> list[int]:
    """X[k] = Σ x[i]·ω^(ik) with the power table from Python's pow, summed exactly."""
    n = len(x)
    table = np.array([pow(omega, j, P) for j in range(n)], dtype=np.uint64)
    exponents = np.outer(np.arange(n), np.arange(n)) % n
    terms = field.mul(np.array(x, dtype=np.uint64)[:, None], table[exponents])
    return [int(v) % P for v in terms.sum(axis=0)]


def _host(values: object) -> list[int]:
    return [int(v) for v in values.tolist()]  # type: ignore[attr-defined]


@pytest.mark.parametrize("log_n", range(1, 11))
def test_ntt_equals_naive_dft(xp: ModuleType, rng: np.random.Generator, log_n: int) -> None:
    x = rng.integers(0, P, 1 << log_n, dtype=np.uint64)
    expected = _naive_dft(x.tolist(), field.root_of_unity(log_n))
    assert _host(ntt.ntt(xp.asarray(x))) == expected


@pytest.mark.parametrize("log_n", range(1, 11))
def test_intt_equals_naive_inverse_dft(
    xp: ModuleType, rng: np.random.Generator, log_n: int
) -> None:
    y = rng.integers(0, P, 1 << log_n, dtype=np.uint64)
    n_inv = field.inverse_int(1 << log_n)
    unscaled = _naive_dft(y.tolist(), field.inverse_int(field.root_of_unity(log_n)))
    assert _host(ntt.intt(xp.asarray(y))) == [v * n_inv % P for v in unscaled]


@pytest.mark.parametrize("log_n", range(0, 21))
def test_inverse_undoes_forward(xp: ModuleType, rng: np.random.Generator, log_n: int) -> None:
    x = xp.asarray(rng.integers(0, P, 1 << log_n, dtype=np.uint64))
    assert bool((ntt.intt(ntt.ntt(x)) == x).all())
    assert bool((ntt.coset_intt(ntt.coset_ntt(x)) == x).all())


@pytest.mark.parametrize("log_n", range(1, 9))
def test_coset_ntt_is_evaluation_on_the_coset(
    xp: ModuleType, rng: np.random.Generator, log_n: int
) -> None:
    n = 1 << log_n
    coeffs = rng.integers(0, P, n, dtype=np.uint64).tolist()
    omega = field.root_of_unity(log_n)
    points = [GENERATOR * pow(omega, k, P) % P for k in range(n)]
    expected = [sum(c * pow(r, i, P) for i, c in enumerate(coeffs)) % P for r in points]
    assert _host(ntt.coset_ntt(xp.asarray(np.array(coeffs, dtype=np.uint64)))) == expected


def test_ntt_leaves_its_input_alone(rng: np.random.Generator) -> None:
    x = rng.integers(0, P, 256, dtype=np.uint64)
    before = x.copy()
    ntt.ntt(x)
    ntt.coset_intt(x)
    assert np.array_equal(x, before)


@pytest.mark.parametrize("n", [0, 3, 12, 2**28])
def test_unsupported_sizes_are_refused(n: int) -> None:
    with pytest.raises(ValueError, match=f"NTT size {n} "):
        domain.log2_size(n)


def test_two_dimensional_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shape \(4, 4\)"):
        ntt.ntt(np.zeros((4, 4), dtype=np.uint64))
