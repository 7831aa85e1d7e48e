"""kuzk.operator.decide.ranges: compressed index ranges, both ways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kuzk.operator.decide import ranges


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        ([], ""),
        ([0], "0"),
        ([0, 1], "0-1"),
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11], "0-9,11"),
        ([5, 3, 4, 4, 9], "3-5,9"),
        (list(range(64)), "0-63"),
        ([1, 3, 5], "1,3,5"),
    ],
    ids=["empty", "one", "pair", "design-example", "unsorted-duplicates", "all-64", "gaps"],
)
def test_compress_and_expand(indexes, text):
    assert ranges.compress(indexes) == text
    assert ranges.expand(text) == sorted(set(indexes))


@pytest.mark.parametrize("text", ["a", "1-", "-1", "3-1", "1-2-3", "1,x"], ids=str)
def test_expand_rejects_garbage(text):
    with pytest.raises(ValueError, match=r"range|index"):
        ranges.expand(text)


def test_compress_rejects_negative_indexes():
    with pytest.raises(ValueError, match="non-negative"):
        ranges.compress([-1, 2])


@given(st.sets(st.integers(min_value=0, max_value=200)))
def test_round_trip(indexes):
    assert ranges.expand(ranges.compress(indexes)) == sorted(indexes)
