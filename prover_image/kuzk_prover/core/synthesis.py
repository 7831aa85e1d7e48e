"""Witness synthesis (CPU): the R1CS rows of a MiMC-style hash chain, evaluated over H.

The circuit is many independent lanes, each a hash chain over the partition's seed with rounds
x → (x + k_i)^7 (the S-box BabyBear's Poseidon2 uses, since 3 divides p - 1 and 7 does not).
One round takes four multiplication constraints a·b = c:

    t = x + k_i        (linear: folded into the a and b columns, no row of its own)
    t·t   = t2
    t2·t2 = t4
    t4·t2 = t6
    t6·t  = t7         (the next x)

Rows are laid out round-major, then constraint, then lane, so that one round of every lane is
computed by a handful of array operations; the only Python loop is over rounds. The domain is
filled exactly (4 · lanes · rounds = n); rows left over for sizes that do not divide evenly
are padded with the satisfied row 1·1 = 1.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

from kuzk_prover.core import field
from kuzk_prover.core.field import U64, P

ROWS_PER_ROUND = 4
MAX_ROUNDS = 64
"""Rounds per lane; longer chains use fewer lanes, so 64 keeps lanes ≥ n/256."""

_SEED_DOMAIN = b"kuzk-seed-v1"
_LANE_DOMAIN = b"kuzk-lanes-v1"
_ROUND_DOMAIN = b"kuzk-mimc-round-v1"


@dataclass(frozen=True)
class Witness:
    """The three R1CS columns over H, as uint64 field elements of length n = 2^log_n."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    lanes: int
    rounds: int


def derive_seed(
    proof_kind: str, miner: int, sector: int, randomness: bytes | None, partition: int
) -> bytes:
    """The 32-byte seed of one partition: what is proven, against which challenge, which part."""
    challenge = randomness.hex() if randomness is not None else "-"
    text = f"{proof_kind}|{miner}|{sector}|{challenge}|{partition}".encode()
    return hashlib.sha256(_SEED_DOMAIN + b"|" + text).digest()


def shape(log_n: int) -> tuple[int, int]:
    """(lanes, rounds) of a circuit on 2^log_n rows."""
    n = 1 << log_n
    rounds = min(MAX_ROUNDS, max(1, n // ROWS_PER_ROUND))
    lanes = max(1, n // (ROWS_PER_ROUND * rounds))
    return lanes, rounds


@functools.lru_cache(maxsize=4)
def round_constants(rounds: int) -> np.ndarray:
    """The fixed constants k_i of the chain (part of the circuit, not of the input)."""
    values = [
        int.from_bytes(hashlib.sha256(_ROUND_DOMAIN + i.to_bytes(4, "big")).digest()[:8], "big") % P
        for i in range(rounds)
    ]
    return np.array(values, dtype=np.uint64)


def lane_inputs(seed: bytes, lanes: int) -> np.ndarray:
    """The starting x of every lane: SHA-256 in counter mode over the seed, reduced mod p."""
    blocks = -(-lanes // 4)
    stream = b"".join(
        hashlib.sha256(_LANE_DOMAIN + seed + i.to_bytes(8, "big")).digest() for i in range(blocks)
    )
    words = np.frombuffer(stream, dtype=">u8")[:lanes].astype(np.uint64)
    return words % U64(P)


def synthesize(seed: bytes, log_n: int) -> Witness:
    """The satisfied witness of the hash-chain circuit on 2^log_n rows for ``seed``."""
    n = 1 << log_n
    lanes, rounds = shape(log_n)
    used = ROWS_PER_ROUND * lanes * rounds
    a = np.ones(n, dtype=np.uint64)
    b = np.ones(n, dtype=np.uint64)
    c = np.ones(n, dtype=np.uint64)
    a3 = a[:used].reshape(rounds, ROWS_PER_ROUND, lanes)
    b3 = b[:used].reshape(rounds, ROWS_PER_ROUND, lanes)
    c3 = c[:used].reshape(rounds, ROWS_PER_ROUND, lanes)
    x = lane_inputs(seed, lanes)
    for i, k in enumerate(round_constants(rounds)):
        t = field.add(x, k)
        t2 = field.mul(t, t)
        t4 = field.mul(t2, t2)
        t6 = field.mul(t4, t2)
        x = field.mul(t6, t)
        a3[i] = (t, t2, t4, t6)
        b3[i] = (t, t2, t2, t)
        c3[i] = (t2, t4, t6, x)
    return Witness(a=a, b=b, c=c, lanes=lanes, rounds=rounds)
