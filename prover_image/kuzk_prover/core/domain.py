"""The domain of a transform: its size 2^log_n (checked in one place) and the coset tables.

Both transform paths need these, the array code in ``ntt`` and the kernels in ``cuda``, so
they live apart from both and neither path imports the other's internals.
"""

from __future__ import annotations

import functools

import numpy as np

from kuzk_prover.core import field
from kuzk_prover.core.field import GENERATOR, TWO_ADICITY, U64

CACHE_TABLES_UP_TO_LOG2 = 22
"""n-element tables are cached for n ≤ 2^22 (32 MiB each as uint64)."""


def log2_size(n: int) -> int:
    """log2(n) for a supported transform size, or ValueError naming the size."""
    log_n = n.bit_length() - 1
    if n < 1 or n != 1 << log_n or log_n > TWO_ADICITY:
        msg = f"NTT size {n} is not a power of two between 1 and 2^{TWO_ADICITY}"
        raise ValueError(msg)
    return log_n


def _build_coset_tables(log_n: int) -> tuple[np.ndarray, np.ndarray]:
    """(g^i, g^-i / n) for i < n: the coset shift and the inverse coset's unshift and scale."""
    n = 1 << log_n
    shift = field.powers(GENERATOR, n)
    unshift = field.mul(field.powers(field.inverse_int(GENERATOR), n), U64(field.inverse_int(n)))
    return shift, unshift


_cached_coset_tables = functools.lru_cache(maxsize=8)(_build_coset_tables)


def coset_tables(log_n: int) -> tuple[np.ndarray, np.ndarray]:
    """(g^i, g^-i / n) for a size-2^log_n coset, cached up to the table size limit."""
    if log_n <= CACHE_TABLES_UP_TO_LOG2:
        return _cached_coset_tables(log_n)
    return _build_coset_tables(log_n)
