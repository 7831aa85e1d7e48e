"""The demo's progress line: one letter per partition state, each its own, all in the legend."""

from __future__ import annotations

from kuzk.contract import api
from testenv.demo import LEGEND, SYMBOL, job_line


def test_every_partition_state_has_a_letter_of_its_own_in_the_legend() -> None:
    assert set(SYMBOL) == set(api.STATES)
    assert len(set(SYMBOL.values())) == len(SYMBOL)
    for state, letter in SYMBOL.items():
        assert f"{letter} {state}" in LEGEND


def test_a_committing_partition_is_not_shown_on_a_gpu() -> None:
    job = {"metadata": {"name": "j"}, "spec": {"proofKind": "snap-update"},
           "status": {"partitionCount": 3, "succeeded": 1, "phase": "Running", "partitions": [
               {"index": 0, "state": "done"}, {"index": 1, "state": "committing"},
               {"index": 2, "state": "gpu"}]}}
    assert "[#cG" in job_line(job)
