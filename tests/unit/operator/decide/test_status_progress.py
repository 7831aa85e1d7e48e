"""Which news in a ProofJob's status may wait (``partitions.progress_only``): the progress of an
attempt that is live before and after (its stage, node, worker and start), and nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from kuzk.operator.decide.partitions import progress_only


def status(*entries: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"phase": "Running", "active": len(entries), "succeeded": 0, **top,
            "partitions": [{"index": i, "attempt": 1, "pod": f"job-p{i}-a1", **entry}
                           for i, entry in enumerate(entries)]}


RUNNING = {"state": "synthesizing", "node": "n1", "worker": "W0",
           "startedAt": "2030-01-01T12:00:00Z"}


@pytest.mark.parametrize("before, after", [
    ({"state": "scheduled", "node": "n1"}, RUNNING),
    ({"state": "pending"}, {"state": "scheduled", "node": "n1"}),
    (RUNNING, {**RUNNING, "state": "gpu"}),
    ({**RUNNING, "state": "gpu"}, {**RUNNING, "state": "committing", "worker": "W1"}),
])
def test_a_live_attempts_stage_node_worker_and_start_may_wait(before, after) -> None:
    assert progress_only(status(before, RUNNING), status(after, RUNNING))


@pytest.mark.parametrize("before, after, why", [
    (status(RUNNING), status({**RUNNING, "state": "done", "commitment": "ab"}, active=0,
                             succeeded=1), "a partition done"),
    (status(RUNNING), status({**RUNNING, "state": "failed", "reason": "InvalidInput"},
                             active=0), "a partition failed"),
    (status({**RUNNING, "state": "done"}), status({**RUNNING, "state": "committing"}),
     "a terminal state left (never by progress)"),
    (status(RUNNING), status({"state": "pending", "attempt": 2, "reason": "Failed"}),
     "a retry: a new attempt"),
    (status({"state": "pending", "pod": None}), status({"state": "pending"}),
     "a pod created"),
    (status(RUNNING), status(RUNNING, phase="Succeeded"), "the phase"),
    (status(RUNNING), status(RUNNING, conditions=[{"type": "Complete"}]), "a condition"),
    (status(RUNNING), status(RUNNING, RUNNING), "a partition more"),
    ({}, status(RUNNING), "a first status that says a pod runs"),
    ({}, status({"state": "pending", "reason": "PodRefused"}, phase="Pending"),
     "a first status that says a pod was refused"),
])
def test_anything_else_is_written_at_once(before, after, why) -> None:
    assert not progress_only(before, after), why


def test_an_unchanged_status_is_only_progress() -> None:
    assert progress_only(status(RUNNING), status(RUNNING))


def test_a_new_jobs_first_status_may_wait_while_it_is_only_pending() -> None:
    assert progress_only({}, status({"state": "pending"}, {"state": "pending"}, phase="Pending"))
