"""BabyBear arithmetic, p = 15·2^27 + 1, on uint64 arrays of any array namespace.

Elements are kept reduced in [0, p). Since p < 2^31, the product of two elements is below 2^62
and fits a uint64 exactly, so a modular product is one multiplication and one division by the
constant p. NumPy divides a uint64 array by a scalar with a multiply-high (libdivide), which is
as fast as a multiplication and faster than any hand-written reduction in array code; sums and
differences are reduced with a wrap-around trick instead of a branch.

The Montgomery helpers (R = 2^32) are the same arithmetic the CUDA kernels use on uint32
words; they are here so the kernels' constants and their reduction are tested against Python
integers on every machine.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from kuzk_prover.core.xp import array_namespace

P = 15 * 2**27 + 1
"""The BabyBear prime, 2013265921."""
TWO_ADICITY = 27
"""The largest k with 2^k dividing p - 1: NTT sizes go up to 2^27."""
GENERATOR = 31
"""A generator of the multiplicative group; also the shift of the coset g·H."""

MONT_BITS = 32
MONT_R = 1 << MONT_BITS
MONT_MASK = MONT_R - 1
MONT_R_MOD_P = MONT_R % P
MONT_R2 = MONT_R * MONT_R % P
MONT_NEG_PINV = (-pow(P, -1, MONT_R)) % MONT_R
"""-p⁻¹ mod 2^32: the factor that makes t + m·p divisible by 2^32."""

_P = np.uint64(P)
_SHIFT = np.uint64(MONT_BITS)
_MASK = np.uint64(MONT_MASK)
_NEG_PINV = np.uint64(MONT_NEG_PINV)
U64 = np.uint64


def root_of_unity(log_n: int) -> int:
    """A primitive 2^log_n-th root of unity, as a Python int."""
    if not 0 <= log_n <= TWO_ADICITY:
        msg = f"log_n={log_n} is outside [0, {TWO_ADICITY}] for BabyBear"
        raise ValueError(msg)
    return pow(GENERATOR, (P - 1) >> log_n, P)


def inverse_int(x: int) -> int:
    """x⁻¹ mod p for a Python int; zero has no inverse."""
    if x % P == 0:
        msg = f"{x} is zero mod p and has no inverse"
        raise ZeroDivisionError(msg)
    return pow(x, P - 2, P)


def add(a: Any, b: Any) -> Any:
    """a + b mod p."""
    xp = array_namespace(a, b)
    s = a + b
    return xp.minimum(s, s - _P)


def sub(a: Any, b: Any) -> Any:
    """a - b mod p. The uint64 difference wraps when a < b; adding p then wraps it back."""
    xp = array_namespace(a, b)
    d = a - b
    return xp.minimum(d, d + _P)


def mul(a: Any, b: Any) -> Any:
    """a · b mod p: the exact 62-bit product, reduced by integer division by p."""
    t = a * b
    return t - (t // _P) * _P


def power(a: Any, exponent: int) -> Any:
    """a^exponent mod p by square-and-multiply over the bits of the exponent."""
    xp = array_namespace(a)
    if exponent < 0:
        return power(inverse(a), -exponent)
    result = xp.ones_like(xp.asarray(a, dtype=xp.uint64))
    base = a
    while exponent:
        if exponent & 1:
            result = mul(result, base)
        exponent >>= 1
        if exponent:
            base = mul(base, base)
    return result


def inverse(a: Any) -> Any:
    """a⁻¹ mod p by Fermat's little theorem; zero maps to zero."""
    return power(a, P - 2)


def powers(base: int, count: int, *, xp: ModuleType = np) -> Any:
    """[1, base, base², …] of length ``count``, built by doubling (log2(count) array steps)."""
    out = xp.empty(count, dtype=xp.uint64)
    if count == 0:
        return out
    out[0] = 1
    filled, step = 1, base % P
    while filled < count:
        take = min(filled, count - filled)
        out[filled : filled + take] = mul(out[:take], U64(step))
        filled += take
        step = step * step % P
    return out


def mont_reduce(t: Any) -> Any:
    """t · 2^-32 mod p for t < p · 2^32 (Montgomery reduction), result in [0, p)."""
    xp = array_namespace(t)
    m = (t * _NEG_PINV) & _MASK
    u = (t + m * _P) >> _SHIFT
    return xp.minimum(u, u - _P)


def mont_mul(a: Any, b: Any) -> Any:
    """a · b · 2^-32 mod p: the CUDA kernels' multiplication."""
    return mont_reduce(a * b)


def to_mont(a: Any) -> Any:
    """a · 2^32 mod p: a value in Montgomery form."""
    return mont_mul(a, U64(MONT_R2))
