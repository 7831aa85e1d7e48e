"""The quotient h = (a·b - c) / Z_H, the GPU phase of a Groth16 prover.

a, b, c arrive as evaluations over H (|H| = n). Their product a·b has degree up to 2n - 2, so
it cannot be divided on H itself, where Z_H = X^n - 1 vanishes. Instead the three are
interpolated (inverse NTT), evaluated on the coset g·H (coset NTT), where Z_H is the single
non-zero constant g^n - 1, divided pointwise, and h is interpolated back from the coset
(inverse coset NTT). Seven transforms and one pointwise pass: the work a GPU prover does.

For a satisfied witness Z_H divides a·b - c and h has degree at most n - 2. The coefficient
forms of a, b, c are kept too, so that the commitment step can check the identity at random
points.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kuzk_prover import field
from kuzk_prover.domain import log2_size
from kuzk_prover.field import GENERATOR, P
from kuzk_prover.ntt import transforms
from kuzk_prover.xp import array_namespace


@dataclass(frozen=True)
class Quotient:
    """Coefficients (natural order, lowest degree first) in the namespace that computed them."""

    h: Any
    a: Any
    b: Any
    c: Any


def vanishing_on_coset(log_n: int) -> int:
    """Z_H(g·x) = g^n - 1 for every x in H."""
    return (pow(GENERATOR, 1 << log_n, P) - 1) % P


def vanishing_at(point: int, log_n: int) -> int:
    """Z_H(r) = r^n - 1."""
    return (pow(point, 1 << log_n, P) - 1) % P


def quotient(a: Any, b: Any, c: Any, *, xp: ModuleType | None = None) -> Quotient:
    """h = (a·b - c)/Z_H from the evaluations of a, b, c over H."""
    xp = array_namespace(a, b, c) if xp is None else xp
    if not a.shape == b.shape == c.shape:
        msg = f"a, b, c must have one shape, got {a.shape}, {b.shape}, {c.shape}"
        raise ValueError(msg)
    log_n = log2_size(a.shape[0])
    h, ca, cb, cc = transforms(xp).quotient(a, b, c, vanishing_on_coset(log_n))
    return Quotient(h=h, a=ca, b=cb, c=cc)


def evaluate(polys: tuple[Any, ...], point: int) -> tuple[int, ...]:
    """The values at ``point`` of polynomials given by coefficients of one length."""
    xp = array_namespace(*polys)
    n = polys[0].shape[0]
    pw = field.powers(point, n, xp=xp)
    # n values below p sum to under 2^58 in a uint64 for every n ≤ 2^27.
    return tuple(int(field.mul(poly, pw).sum()) % P for poly in polys)
