"""The quotient h = (a·b - c) / Z_H, the GPU phase of a Groth16 prover.

a, b, c arrive as evaluations over H (|H| = n). Their product a·b has degree up to 2n - 2, so
it cannot be divided on H itself, where Z_H = X^n - 1 vanishes. Instead the three are
interpolated (inverse NTT), evaluated on the coset g·H (coset NTT), where Z_H is the single
non-zero constant g^n - 1, divided pointwise, and h is interpolated back from the coset
(inverse coset NTT). Seven transforms and one pointwise pass: the work a GPU prover does.

For a satisfied witness Z_H divides a·b - c and h has degree at most n - 2. The coefficient
forms of a, b, c are kept too, so that the commitment step can check the identity at random
points; ``evaluate_many`` evaluates them, in either coefficient order, with one matrix product
per polynomial.

A prover splits the work at its GPU phase: ``prepare`` does the host work first (tables, words in
pinned memory), and the run it returns is the phase itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from kuzk_prover.core import field
from kuzk_prover.core.cuda import HeldRun
from kuzk_prover.core.domain import log2_size
from kuzk_prover.core.field import GENERATOR, U64, P
from kuzk_prover.core.ntt import transforms
from kuzk_prover.core.xp import array_namespace, to_host

EVAL_BLOCK_LOG2 = 6
"""Coefficients per row in ``evaluate_many``: 64 products of a coefficient (< 2^31) and a 16-bit
half of a power sum below 2^53, so a float64 matrix product computes them exactly."""
EVAL_CHUNK_LOG2 = 14
"""Coefficients converted to float64 at a time (128 KiB), so the product reads them from cache."""
_P = U64(P)


@dataclass(frozen=True)
class Quotient:
    """Coefficients (lowest degree first) where they were computed or brought back: h in
    natural order, a, b and c in bit-reversed order when ``bit_reversed``."""

    h: Any
    a: Any
    b: Any
    c: Any
    bit_reversed: bool = False


def vanishing_on_coset(log_n: int) -> int:
    """Z_H(g·x) = g^n - 1 for every x in H."""
    return (pow(GENERATOR, 1 << log_n, P) - 1) % P


def vanishing_at(point: int, log_n: int) -> int:
    """Z_H(r) = r^n - 1."""
    return (pow(point, 1 << log_n, P) - 1) % P


def _size(a: Any, b: Any, c: Any) -> int:
    if not a.shape == b.shape == c.shape:
        msg = f"a, b, c must have one shape, got {a.shape}, {b.shape}, {c.shape}"
        raise ValueError(msg)
    return log2_size(a.shape[0])


def quotient(a: Any, b: Any, c: Any, *, xp: ModuleType | None = None) -> Quotient:
    """h = (a·b - c)/Z_H from the evaluations of a, b, c over H, in their namespace."""
    xp = array_namespace(a, b, c) if xp is None else xp
    log_n = _size(a, b, c)
    chosen = transforms(xp)
    h, ca, cb, cc = chosen.quotient(a, b, c, vanishing_on_coset(log_n))
    return Quotient(h=h, a=ca, b=cb, c=cc, bit_reversed=chosen.coefficients_bit_reversed)


@dataclass(frozen=True)
class Held:
    """A quotient prepared for the GPU phase: calling it is the phase (device work only),
    which allocates ``device_bytes`` of device memory and gives the coefficients back on the
    host."""

    run: HeldRun
    bit_reversed: bool

    @property
    def device_bytes(self) -> int:
        return self.run.device_bytes

    def __call__(self) -> Quotient:
        h, ca, cb, cc = self.run()
        return Quotient(h=h, a=ca, b=cb, c=cc, bit_reversed=self.bit_reversed)


def prepare(a: Any, b: Any, c: Any, *, xp: ModuleType) -> Held:
    """The host work of the quotient of the host columns ``a, b, c`` on ``xp``, done now,
    before the GPU phase."""
    log_n = _size(a, b, c)
    chosen = transforms(xp)
    return Held(chosen.prepare(a, b, c, vanishing_on_coset(log_n)),
                chosen.coefficients_bit_reversed)


def _bit_reverse(value: int, bits: int) -> int:
    return int(f"{value:0{bits}b}"[::-1], 2) if bits else 0


def bit_reversed_powers(base: int, count: int) -> np.ndarray:
    """[base^bitreverse(j)] for j < count (a power of two), by doubling: with m entries the table
    holds base^((count/m)·bitreverse_m(j)), and the next m are those times base^(count/2m)."""
    out = np.empty(count, dtype=np.uint64)
    out[0] = 1
    filled = 1
    while filled < count:
        step = pow(base, count // (2 * filled), P)
        out[filled : 2 * filled] = field.mul(out[:filled], U64(step))
        filled *= 2
    return out


def evaluate_many(
    polys: Sequence[Any], points: Sequence[int], *, bit_reversed: bool = False
) -> list[tuple[int, ...]]:
    """For each point, the values there of polynomials given by coefficients of one length
    (in bit-reversed order when ``bit_reversed``).

    Coefficient i = q·m + s (m = 64) contributes c_i · (r^m)^q · r^s: a float64 matrix product
    of the coefficients as a (n/m, m) matrix with the 16-bit halves of r^s for every point gives
    each row's inner sum exactly, and the n/m row sums are weighted by (r^m)^q modulo p. In
    bit-reversed order the index is bitreverse(s)·n/m + bitreverse(q), so the same product
    works with r^(bitreverse(s)·n/m) inside and r^bitreverse(q) outside.
    """
    xp = array_namespace(*polys)
    n = polys[0].shape[0]
    log_n = log2_size(n)
    log_m = min(EVAL_BLOCK_LOG2, log_n)
    m, rows = 1 << log_m, n >> log_m
    inner = np.empty((m, 2 * len(points)), dtype=np.float64)
    outer = []
    for k, r in enumerate(points):
        if bit_reversed:
            exponents = [rows * _bit_reverse(s, log_m) for s in range(m)]
            outer.append(bit_reversed_powers(r, rows))
        else:
            exponents = list(range(m))
            outer.append(field.powers(pow(r, m, P), rows))
        powers = np.array([pow(r, e, P) for e in exponents], dtype=np.uint64)
        inner[:, 2 * k] = powers & U64(0xFFFF)
        inner[:, 2 * k + 1] = powers >> U64(16)
    inner_on = xp.asarray(inner)
    chunk_rows = max(1, (1 << EVAL_CHUNK_LOG2) >> log_m)
    values = []
    for poly in polys:
        matrix = poly.reshape(rows, m)
        sums = np.empty((rows, 2 * len(points)), dtype=np.float64)
        for start in range(0, rows, chunk_rows):
            block = xp.asarray(matrix[start : start + chunk_rows], dtype=xp.float64)
            sums[start : start + chunk_rows] = to_host(block @ inner_on)
        exact = sums.astype(np.uint64) % _P
        row_values = (exact[:, 0::2] + exact[:, 1::2] * U64(1 << 16)) % _P
        # n/m values below p sum to under 2^52 in a uint64 for every n ≤ 2^27.
        values.append(
            [int(field.mul(row_values[:, k], outer[k]).sum()) % P for k in range(len(points))]
        )
    return [tuple(per_poly[k] for per_poly in values) for k in range(len(points))]
