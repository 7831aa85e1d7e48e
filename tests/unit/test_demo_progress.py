"""The demo's progress line: one letter per partition state, each its own, all in the legend."""

from __future__ import annotations

from typing import Any

from kuzk.contract import api
from kuzk.contract.workerstatus.lanes import lane_states
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


def test_a_partition_shows_its_lanes_stage_before_the_jobs_status_says_it() -> None:
    job = {"metadata": {"name": "j", "namespace": "ns"}, "spec": {"proofKind": "snap-update"},
           "status": {"partitionCount": 3, "succeeded": 1, "phase": "Running", "partitions": [
               {"index": 0, "state": "done", "attempt": 1},
               {"index": 1, "state": "scheduled", "attempt": 2},
               {"index": 2, "state": "scheduled", "attempt": 1}]}}

    def lane(partition: int, attempt: int, stage: str) -> dict[str, Any]:
        return {"job": {"namespace": "ns", "name": "j"}, "partition": partition,
                "attempt": attempt, "stage": stage,
                "pod": {"name": f"j-p{partition}-a{attempt}", "uid": f"u{partition}{attempt}"}}

    gpu = {"metadata": {"name": "n1-0"}, "spec": {"nodeName": "n1"}, "status": {"workers": [
        {"id": "W0", "state": "gpu", "lanes": [
            lane(0, 1, "committing"), lane(1, 1, "gpu"), lane(2, 1, "synthesizing")]}]}}
    # partition 0 is done whatever a late lane says; partition 1's lane is of an older attempt
    assert "[#sy" in job_line(job, lane_states([gpu]))
