"""The commitment to h (a SHA-256 Merkle root) and the self-check that guards every report.

Leaves are blocks of 256 coefficients (1 KiB as little-endian uint32), so a partition of 2^20
constraints hashes 4096 leaves rather than a million: the Python loops run over blocks, and
hashlib does the bytes. Leaves and inner nodes are domain-separated (0x00, 0x01 prefixes).

The Fiat-Shamir points come from the root, so they are fixed only after h is: the check
a(r)·b(r) - c(r) = h(r)·Z_H(r) at several such r, plus deg h ≤ n - 2, is what a verifier of a
real proof relies on, and the prover refuses to report a partition that fails it.
"""

from __future__ import annotations

import hashlib

import numpy as np

from kuzk_prover.core.field import P
from kuzk_prover.core.quotient import Quotient, evaluate_many, vanishing_at
from kuzk_prover.core.xp import to_host

LEAF_ELEMENTS = 256
CHECK_POINTS = 4
_LEAF = b"\x00"
_NODE = b"\x01"
_FIAT_SHAMIR = b"kuzk-fs-v1"


class SelfCheckFailed(RuntimeError):
    """The quotient does not satisfy a·b - c = h·Z_H: the witness or the kernel is wrong."""


def merkle_root(h: np.ndarray) -> bytes:
    """The SHA-256 Merkle root over blocks of ``LEAF_ELEMENTS`` coefficients of ``h``."""
    n = h.shape[0]
    if n < 1 or n & (n - 1):
        msg = f"Merkle tree needs a power-of-two length, got {n}"
        raise ValueError(msg)
    data = np.ascontiguousarray(h, dtype="<u4").tobytes()
    width = 4 * min(LEAF_ELEMENTS, n)
    level = [
        hashlib.sha256(_LEAF + data[i : i + width]).digest() for i in range(0, len(data), width)
    ]
    while len(level) > 1:
        level = [
            hashlib.sha256(_NODE + level[i] + level[i + 1]).digest()
            for i in range(0, len(level), 2)
        ]
    return level[0]


def challenge_points(root: bytes, log_n: int, count: int = CHECK_POINTS) -> list[int]:
    """``count`` field elements derived from the root and the size (Fiat-Shamir)."""
    points = []
    for j in range(count):
        seed = _FIAT_SHAMIR + root + log_n.to_bytes(1, "big") + j.to_bytes(4, "big")
        points.append(int.from_bytes(hashlib.sha256(seed).digest()[:8], "big") % P)
    return points


def check(q: Quotient, points: list[int]) -> None:
    """Raise SelfCheckFailed unless deg h ≤ n - 2 and the identity holds at every point."""
    n = q.h.shape[0]
    log_n = n.bit_length() - 1
    if n > 1 and int(q.h[n - 1]) != 0:
        msg = f"h has degree n-1={n - 1}: a·b - c is not divisible by Z_H"
        raise SelfCheckFailed(msg)
    columns = evaluate_many((q.a, q.b, q.c), points, bit_reversed=q.bit_reversed)
    quotients = evaluate_many((q.h,), points)
    for r, (a, b, c), (h,) in zip(points, columns, quotients, strict=True):
        lhs = (a * b - c) % P
        rhs = h * vanishing_at(r, log_n) % P
        if lhs != rhs:
            msg = f"a(r)·b(r) - c(r) = {lhs} but h(r)·Z_H(r) = {rhs} at r={r}"
            raise SelfCheckFailed(msg)


def commit(q: Quotient) -> tuple[bytes, list[int]]:
    """(Merkle root of h, the points it was checked at), after the self-check has passed."""
    h = to_host(q.h)
    root = merkle_root(h)
    points = challenge_points(root, h.shape[0].bit_length() - 1)
    check(q, points)
    return root, points
