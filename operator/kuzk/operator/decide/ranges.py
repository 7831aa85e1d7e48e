"""Compressed index ranges ("0-9,11"), the form Job.status.completedIndexes uses.

A 64-partition job's done set stays one short, human-readable string in ProofJob.status.
"""

from __future__ import annotations

from collections.abc import Iterable


def compress(indexes: Iterable[int]) -> str:
    """Write a set of non-negative indexes as sorted intervals: ``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    parts: list[str] = []
    ordered = sorted(set(indexes))
    if ordered and ordered[0] < 0:
        msg = f"indexes must be non-negative, got {ordered[0]}"
        raise ValueError(msg)
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            first, last = ordered[start], ordered[i - 1]
            parts.append(str(first) if first == last else f"{first}-{last}")
            start = i
    return ",".join(parts)


def expand(text: str) -> list[int]:
    """Read a compressed range string back into sorted indexes: ``"0-2,5"`` → ``[0, 1, 2, 5]``."""
    indexes: set[int] = set()
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            msg = f"not an index or an index range: {part!r} in {text!r}"
            raise ValueError(msg)
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            msg = f"range {part!r} in {text!r} runs backwards"
            raise ValueError(msg)
        indexes.update(range(low, high + 1))
    return sorted(indexes)
