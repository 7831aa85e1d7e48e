"""Number-theoretic transforms over BabyBear: forward, inverse and coset, sizes 2^0 … 2^27.

The array path is a four-step transform. A length-n vector is viewed as an n1 x n2 matrix;
size-n1 transforms run down its columns, a twiddle matrix is applied, the matrix is transposed
once, and size-n2 transforms run down the columns again. Each batch of column transforms is a
radix-2 Stockham (autosort) transform along axis 0: every butterfly stage reads two contiguous
halves and writes rows of the other buffer, the innermost dimension is always a whole batch of
columns (at least √n elements long), and the output comes out in natural order with no bit
reversal. So each stage is nine whole-array operations with long inner loops, and the only
Python loops are over the log2(n) stages.

The inverse transform is the forward one read backwards (x ↦ X[-k mod n] / n), so only forward
twiddles are ever built. Twiddles are cached per size; the n-element tables (the four-step
twiddle matrix and the coset powers, ``HostTables``) are cached only up to 2^22 elements, where
more would pin gigabytes. A prover builds them before its GPU phase (``prepare``), so that the
phase holds the transforms and nothing else.

CuPy arrays go to the hand-written kernels in ``kuzk_prover.core.cuda`` instead: ``transforms(xp)``
is the one place that chooses between the two.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from kuzk_prover.core import cuda, field
from kuzk_prover.core.cuda import HeldRun
from kuzk_prover.core.domain import CACHE_TABLES_UP_TO_LOG2, coset_tables, log2_size
from kuzk_prover.core.field import U64, P
from kuzk_prover.core.xp import array_namespace, is_cupy

_P = np.uint64(P)


@functools.lru_cache(maxsize=64)
def _stage_twiddles(log_len: int) -> tuple[np.ndarray, ...]:
    """Twiddles of each Stockham stage of a size-2^log_len transform, shaped for broadcasting.

    The stage on sub-length m·2 multiplies the difference at position p by ω_{2m}^p.
    """
    length = 1 << log_len
    table = field.powers(field.root_of_unity(log_len), max(length // 2, 1))
    stages = []
    stride = 1
    while length // stride > 1:
        half = length // stride // 2
        stages.append(np.ascontiguousarray(table[: half * stride : stride]).reshape(half, 1))
        stride *= 2
    return tuple(stages)


def _build_twiddle_matrix(log_n1: int, log_n2: int) -> np.ndarray:
    """T[k1, i2] = ω_n^(k1·i2) for the four-step transform, built by row doubling."""
    n1, n2 = 1 << log_n1, 1 << log_n2
    omega = field.root_of_unity(log_n1 + log_n2)
    table = np.empty((n1, n2), dtype=np.uint64)
    table[0] = 1
    filled, row_step = 1, omega
    while filled < n1:
        table[filled : 2 * filled] = field.mul(table[:filled], field.powers(row_step, n2))
        filled *= 2
        row_step = row_step * row_step % P
    return table


_cached_twiddle_matrix = functools.lru_cache(maxsize=8)(_build_twiddle_matrix)


def _split(log_n: int) -> tuple[int, int]:
    """(log n1, log n2) of the four-step transform's n1 x n2 matrix."""
    return log_n // 2, log_n - log_n // 2


@dataclass(frozen=True)
class HostTables:
    """The tables of one size: the Stockham stage twiddles of both column transforms, the
    four-step twiddle matrix (flat), the coset shift g^i and the inverse coset's unshift
    g^-i / n."""

    log_n: int
    first_stages: tuple[np.ndarray, ...]
    second_stages: tuple[np.ndarray, ...]
    twiddle_matrix: np.ndarray
    shift: np.ndarray
    unshift: np.ndarray


def host_tables(log_n: int) -> HostTables:
    """The tables of a size-2^log_n transform, cached up to the table size limit."""
    log_n1, log_n2 = _split(log_n)
    if log_n <= CACHE_TABLES_UP_TO_LOG2:
        matrix = _cached_twiddle_matrix(log_n1, log_n2)
    else:
        matrix = _build_twiddle_matrix(log_n1, log_n2)
    shift, unshift = coset_tables(log_n)
    return HostTables(
        log_n,
        _stage_twiddles(log_n1),
        _stage_twiddles(log_n2),
        matrix.reshape(1 << log_n),
        shift,
        unshift,
    )


def _on(xp: ModuleType, table: np.ndarray) -> Any:
    return table if xp is np else xp.asarray(table)


def _stockham_columns(
    src: Any,
    dst: Any,
    scratch: tuple[Any, Any],
    stages: tuple[np.ndarray, ...],
    batch: int,
    xp: ModuleType,
) -> Any:
    """Size-2^k NTTs down the columns of the (2^k, batch) matrix in ``src``, k = len(stages)
    (``_stage_twiddles(k)``).

    ``src`` and ``dst`` are flat buffers of the same size used in turn; returns the one holding
    the result. ``scratch`` is two flat buffers of half that size.
    """
    size = (1 << len(stages)) * batch
    sum_buf, diff_buf = scratch[0][: size // 2], scratch[1][: size // 2]
    span = batch
    for tw in stages:
        half = tw.shape[0]
        upper = src[: size // 2].reshape(half, span)
        lower = src[size // 2 :].reshape(half, span)
        out = dst.reshape(half, 2, span)
        total, diff = sum_buf.reshape(half, span), diff_buf.reshape(half, span)
        xp.add(upper, lower, out=total)
        xp.subtract(total, _P, out=diff)
        xp.minimum(total, diff, out=out[:, 0, :])
        xp.add(upper, _P, out=diff)
        xp.subtract(diff, lower, out=diff)
        xp.multiply(diff, _on(xp, tw), out=diff)
        xp.floor_divide(diff, _P, out=total)
        xp.multiply(total, _P, out=total)
        xp.subtract(diff, total, out=out[:, 1, :])
        src, dst = dst, src
        span *= 2
    return src


def _forward(x: Any, xp: ModuleType, tables: HostTables) -> Any:
    """Natural-order forward NTT of the flat uint64 vector ``x`` (not modified)."""
    n = x.shape[0]
    if n == 1:
        return x.copy()
    log_n1, log_n2 = _split(tables.log_n)
    n1, n2 = 1 << log_n1, 1 << log_n2
    first = xp.array(x, dtype=xp.uint64, copy=True)
    second = xp.empty_like(first)
    scratch = (xp.empty(n // 2, dtype=xp.uint64), xp.empty(n // 2, dtype=xp.uint64))
    columns = _stockham_columns(first, second, scratch, tables.first_stages, n2, xp)
    other = second if columns is first else first
    # The twiddle product is reduced in place: other = columns·T, columns = ⌊·/p⌋·p.
    xp.multiply(columns, _on(xp, tables.twiddle_matrix), out=other)
    xp.floor_divide(other, _P, out=columns)
    xp.multiply(columns, _P, out=columns)
    xp.subtract(other, columns, out=columns)
    xp.copyto(other.reshape(n2, n1), columns.reshape(n1, n2).T)
    return _stockham_columns(other, columns, scratch, tables.second_stages, n1, xp)


def _reverse_tail(y: Any, xp: ModuleType) -> Any:
    """y[-k mod n]: turns a forward transform into an unscaled inverse one."""
    return xp.concatenate((y[:1], y[:0:-1]))


class Transforms(Protocol):
    """The transforms of one namespace, on flat uint64 vectors whose size was checked."""

    coefficients_bit_reversed: bool
    """Whether ``quotient`` gives the coefficients of a, b, c in bit-reversed order."""

    def ntt(self, x: Any) -> Any: ...
    def intt(self, y: Any) -> Any: ...
    def coset_ntt(self, x: Any) -> Any: ...
    def coset_intt(self, y: Any) -> Any: ...
    def quotient(self, a: Any, b: Any, c: Any, vanishing: int) -> tuple[Any, Any, Any, Any]: ...
    def prepare(self, a: Any, b: Any, c: Any, vanishing: int) -> HeldRun: ...


class ArrayTransforms:
    """The transforms as whole-array operations of ``xp`` (the four-step Stockham code),
    with the tables of one size given (``tables``) or looked up per call."""

    coefficients_bit_reversed = False

    def __init__(self, xp: ModuleType, tables: HostTables | None = None) -> None:
        self.xp = xp
        self.tables = tables

    def _tables(self, x: Any) -> HostTables:
        log_n = log2_size(x.shape[0])
        if self.tables is not None and self.tables.log_n == log_n:
            return self.tables
        return host_tables(log_n)

    def _forward(self, x: Any) -> Any:
        return _forward(x, self.xp, self._tables(x))

    def ntt(self, x: Any) -> Any:
        return self._forward(x)

    def intt(self, y: Any) -> Any:
        forward = _reverse_tail(self._forward(y), self.xp)
        return field.mul(forward, U64(field.inverse_int(y.shape[0])))

    def coset_ntt(self, x: Any) -> Any:
        shift = _on(self.xp, self._tables(x).shift)
        return self._forward(field.mul(x, shift))

    def coset_intt(self, y: Any) -> Any:
        unshift = _on(self.xp, self._tables(y).unshift)
        return field.mul(_reverse_tail(self._forward(y), self.xp), unshift)

    def quotient(self, a: Any, b: Any, c: Any, vanishing: int) -> tuple[Any, Any, Any, Any]:
        """(h, a, b, c) coefficients from evaluations over H: seven transforms in sequence."""
        ca, cb, cc = (self.intt(v) for v in (a, b, c))
        on_coset = field.mul(self.coset_ntt(ca), self.coset_ntt(cb))
        on_coset = field.sub(on_coset, self.coset_ntt(cc))
        on_coset = field.mul(on_coset, U64(field.inverse_int(vanishing)))
        return self.coset_intt(on_coset), ca, cb, cc

    def prepare(self, a: Any, b: Any, c: Any, vanishing: int) -> HeldRun:
        """The tables built now, before the GPU phase; the returned run is the transforms."""
        prepared = ArrayTransforms(self.xp, host_tables(log2_size(a.shape[0])))
        return HeldRun(functools.partial(prepared.quotient, a, b, c, vanishing), 0)


def transforms(xp: ModuleType) -> Transforms:
    """The one dispatch on the namespace: CuPy arrays go to the device kernels of
    ``kuzk_prover.core.cuda``, other arrays to the array code here."""
    return cuda.pipeline() if is_cupy(xp) else ArrayTransforms(xp)


def _check(x: Any, xp: ModuleType | None) -> tuple[Any, ModuleType]:
    xp = array_namespace(x) if xp is None else xp
    if x.ndim != 1:
        msg = f"NTT input must be one-dimensional, got shape {tuple(x.shape)}"
        raise ValueError(msg)
    log2_size(x.shape[0])
    return x, xp


def ntt(x: Any, /, *, xp: ModuleType | None = None) -> Any:
    """Evaluations X[k] = Σ x[i]·ω^(ik) of the coefficients ``x`` over H = ⟨ω⟩, |H| = len(x)."""
    x, xp = _check(x, xp)
    return transforms(xp).ntt(x)


def intt(y: Any, /, *, xp: ModuleType | None = None) -> Any:
    """Coefficients of the polynomial whose evaluations over H are ``y``."""
    y, xp = _check(y, xp)
    return transforms(xp).intt(y)


def coset_ntt(x: Any, /, *, xp: ModuleType | None = None) -> Any:
    """Evaluations of the coefficients ``x`` over the coset g·H (g = 31)."""
    x, xp = _check(x, xp)
    return transforms(xp).coset_ntt(x)


def coset_intt(y: Any, /, *, xp: ModuleType | None = None) -> Any:
    """Coefficients of the polynomial whose evaluations over g·H are ``y``."""
    y, xp = _check(y, xp)
    return transforms(xp).coset_intt(y)
