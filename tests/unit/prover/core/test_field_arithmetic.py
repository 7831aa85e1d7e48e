"""BabyBear arithmetic on arrays agrees with Python integers mod p, including the Montgomery
helpers whose constants the CUDA kernels use."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuzk_prover.core import field
from kuzk_prover.core.field import P

elements = st.integers(min_value=0, max_value=P - 1)
vectors = st.lists(elements, min_size=1, max_size=64)
pairs = st.lists(st.tuples(elements, elements), min_size=1, max_size=64)


def _arr(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


@given(pairs)
def test_add_sub_mul_match_python_ints(values: list[tuple[int, int]]) -> None:
    a, b = _arr([x for x, _ in values]), _arr([y for _, y in values])
    assert field.add(a, b).tolist() == [(x + y) % P for x, y in values]
    assert field.sub(a, b).tolist() == [(x - y) % P for x, y in values]
    assert field.mul(a, b).tolist() == [x * y % P for x, y in values]


@given(vectors, st.integers(min_value=-(2**40), max_value=2**64))
def test_power_matches_python_pow(values: list[int], exponent: int) -> None:
    nonzero = [v or 1 for v in values]
    assert field.power(_arr(nonzero), exponent).tolist() == [pow(v, exponent, P) for v in nonzero]


@given(vectors)
def test_inverse_matches_python_and_maps_zero_to_zero(values: list[int]) -> None:
    got = field.inverse(_arr(values)).tolist()
    assert got == [pow(v, -1, P) if v else 0 for v in values]
    assert all(v * g % P == 1 for v, g in zip(values, got, strict=True) if v)


@given(elements)
def test_inverse_int(value: int) -> None:
    if value == 0:
        with pytest.raises(ZeroDivisionError, match="zero mod p"):
            field.inverse_int(value)
    else:
        assert value * field.inverse_int(value) % P == 1


@given(pairs)
def test_montgomery_mul_is_product_times_r_inverse(values: list[tuple[int, int]]) -> None:
    a, b = _arr([x for x, _ in values]), _arr([y for _, y in values])
    r_inv = pow(2**32, -1, P)
    assert field.mont_mul(a, b).tolist() == [x * y * r_inv % P for x, y in values]
    assert field.mont_reduce(field.to_mont(a)).tolist() == a.tolist()
    assert field.to_mont(a).tolist() == [x * 2**32 % P for x, _ in values]


@given(st.integers(min_value=0, max_value=P * 2**32 - 1))
def test_montgomery_reduce_covers_its_whole_input_range(t: int) -> None:
    assert field.mont_reduce(_arr([t])).tolist() == [t * pow(2**32, -1, P) % P]


def test_constants() -> None:
    assert P == 2013265921
    assert (P - 1) % 2**27 == 0
    assert (P - 1) % 3 == 0 and (P - 1) % 7 != 0
    assert field.MONT_NEG_PINV * P % 2**32 == 2**32 - 1
    for log_n in range(28):
        w = field.root_of_unity(log_n)
        assert pow(w, 2**log_n, P) == 1
        assert log_n == 0 or pow(w, 2 ** (log_n - 1), P) != 1
    with pytest.raises(ValueError, match="log_n=28"):
        field.root_of_unity(28)


def test_powers_on_every_backend(xp: ModuleType) -> None:
    got = field.powers(5, 1000, xp=xp)
    assert [int(v) for v in got.tolist()] == [pow(5, i, P) for i in range(1000)]
    a = xp.asarray(np.arange(P - 50, P, dtype=np.uint64))
    assert field.mul(a, a).tolist() == [i * i % P for i in range(P - 50, P)]
