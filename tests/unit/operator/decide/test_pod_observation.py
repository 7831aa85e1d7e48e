"""One reconcile over one pod: every pod phase, condition and exit-code class.

Each row is a pod of partition 0, attempt 1 of a one-partition job with the default backoff
limit, and what the partition, the job, the pods and the events must become.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from kuzk.operator.decide.actions import CreatePod, DeletePod, Event, ReleaseWorker
from kuzk.operator.decide.observe import observe, worker_outcome
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.decide.reconcile import reconcile
from tests.unit.operator.decide.objects import T0, Make, commitment_for

SETTINGS = PodSettings(image="kuzk/prover:test")
DISRUPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
NOT_DISRUPTED = {"type": "DisruptionTarget", "status": "False", "reason": "Whatever"}
POD_UID = "uid-job-p0-a1"

# (id, pod kwargs, worker stage or None, expected partition, job phase, events, create, delete)
ROWS: list[tuple[str, dict[str, Any], str | None, dict[str, Any], str, list[str], bool, bool]] = [
    ("pending-unscheduled", {}, None, {"state": "pending"}, "Pending", [], False, False),
    (
        "pending-scheduled",
        {"node": "n1"},
        None,
        {"state": "scheduled", "node": "n1"},
        "Running",
        [],
        False,
        False,
    ),
    (
        "running-unclaimed",
        {"phase": "Running", "node": "n1"},
        None,
        {"state": "scheduled"},
        "Running",
        [],
        False,
        False,
    ),
    *[
        (
            f"running-{stage}",
            {"phase": "Running", "node": "n1"},
            stage,
            {"state": stage, "worker": "W0"},
            "Running",
            [],
            False,
            False,
        )
        for stage in ("synthesizing", "synth_done", "gpu")
    ],
    (
        "unknown-phase",
        {"phase": "Unknown", "node": "n1"},
        None,
        {"state": "scheduled"},
        "Running",
        [],
        False,
        False,
    ),
    (
        "not-a-disruption",
        {"phase": "Running", "node": "n1", "conditions": [NOT_DISRUPTED]},
        None,
        {"state": "scheduled"},
        "Running",
        [],
        False,
        False,
    ),
    (
        "exit-0",
        {"phase": "Succeeded", "node": "n1", "exit_code": 0, "message": Make.result(0)},
        None,
        {"state": "done", "commitment": commitment_for(0), "synthMs": 120, "gpuMs": 34},
        "Succeeded",
        ["PartitionDone", "JobComplete"],
        False,
        False,
    ),
    (
        "exit-0-deleting",
        {
            "phase": "Succeeded",
            "node": "n1",
            "exit_code": 0,
            "message": Make.result(0),
            "deleting": T0,
        },
        None,
        {"state": "done"},
        "Succeeded",
        ["PartitionDone", "JobComplete"],
        False,
        False,
    ),
    (
        "exit-0-without-result",
        {"phase": "Succeeded", "node": "n1", "exit_code": 0, "message": "all good"},
        None,
        {"state": "pending", "attempt": 2, "retries": 1, "reason": "Failed"},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    (
        "exit-0-commitment-not-hex",
        {"phase": "Succeeded", "exit_code": 0, "message": '{"commitment": "0xnothex"}'},
        None,
        {"state": "pending", "attempt": 2, "retries": 1},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    (
        "exit-1",
        {"phase": "Failed", "node": "n1", "exit_code": 1, "message": "boom"},
        None,
        {"state": "pending", "attempt": 2, "retries": 1, "message": "exit 1: boom"},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    (
        "exit-137-sigkill",
        {"phase": "Failed", "node": "n1", "exit_code": 137, "reason": "OOMKilled"},
        None,
        {"state": "pending", "attempt": 2, "retries": 1, "disruptions": 0},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    (
        "exit-2-json",
        {
            "phase": "Failed",
            "node": "n1",
            "exit_code": 2,
            "message": json.dumps({"error": "sector 7 is not sealed"}),
        },
        None,
        {"state": "failed", "reason": "InvalidInput", "message": "sector 7 is not sealed"},
        "Failed",
        ["PartitionFailed", "JobFailed"],
        False,
        False,
    ),
    (
        "exit-2-text",
        {"phase": "Failed", "exit_code": 2, "message": "invalid input: KUZK_INPUT bad\n"},
        None,
        {"state": "failed", "reason": "InvalidInput", "message": "invalid input: KUZK_INPUT bad"},
        "Failed",
        ["PartitionFailed", "JobFailed"],
        False,
        False,
    ),
    (
        "failed-without-terminated-state",
        {"phase": "Failed", "pod_reason": "UnexpectedAdmissionError"},
        None,
        {"state": "pending", "attempt": 2, "retries": 1},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    *[
        (
            f"failed-{reason.lower()}",
            {"phase": "Failed", "node": "n1", "pod_reason": reason},
            None,
            {"state": "pending", "attempt": 2, "retries": 0, "disruptions": 1},
            "Pending",
            ["PartitionRetried"],
            True,
            False,
        )
        for reason in ("Evicted", "Preempting", "Terminated", "NodeLost")
    ],
    (
        "failed-disruption-target",
        {"phase": "Failed", "node": "n1", "exit_code": 143, "conditions": [DISRUPTED]},
        None,
        {"state": "pending", "attempt": 2, "retries": 0, "disruptions": 1, "reason": "Disrupted"},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    (
        "exit-2-but-disrupted",
        {"phase": "Failed", "node": "n1", "exit_code": 2, "conditions": [DISRUPTED]},
        None,
        {"state": "pending", "attempt": 2, "disruptions": 1},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    (
        "running-disruption-target",
        {"phase": "Running", "node": "n1", "conditions": [DISRUPTED]},
        "gpu",
        {"state": "pending", "attempt": 2, "disruptions": 1},
        "Pending",
        ["PartitionRetried"],
        True,
        True,
    ),
    (
        "running-deleted",
        {"phase": "Running", "node": "n1", "deleting": T0},
        "gpu",
        {"state": "pending", "attempt": 2, "disruptions": 1},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
    (
        "pending-deleted",
        {"deleting": T0},
        None,
        {"state": "pending", "attempt": 2, "disruptions": 1},
        "Pending",
        ["PartitionRetried"],
        True,
        False,
    ),
]


@pytest.mark.parametrize(
    ("pod_kwargs", "stage", "expected", "phase", "events", "create", "delete"),
    [row[1:] for row in ROWS],
    ids=[row[0] for row in ROWS],
)
def test_one_pod(pod_kwargs, stage, expected, phase, events, create, delete):
    job = Make.job(partitions=1)
    pod = Make.pod(job, 0, 1, **pod_kwargs)
    workers = [Make.workers("n1", ("W0", POD_UID, stage))] if stage else []
    decision = reconcile(job, [pod], workers, T0, settings=SETTINGS)
    (entry,) = decision.status["partitions"]
    assert {key: entry.get(key) for key in expected} == expected
    assert decision.status["phase"] == phase
    assert [e.reason for e in decision.of_type(Event)] == events
    creates = decision.of_type(CreatePod)
    assert [(c.partition, c.attempt) for c in creates] == ([(0, 2)] if create else [])
    deletes = decision.of_type(DeletePod)
    assert [(d.name, d.uid) for d in deletes] == ([("job-p0-a1", POD_UID)] if delete else [])


@pytest.mark.parametrize(
    ("pod_kwargs", "released"),
    [
        ({}, False),
        ({"phase": "Running", "node": "n1"}, False),
        ({"phase": "Succeeded", "node": "n1", "exit_code": 0, "message": Make.result(0)}, True),
        ({"phase": "Failed", "node": "n1", "exit_code": 1}, True),
        ({"phase": "Failed", "pod_reason": "Evicted"}, True),
        ({"deleting": T0.replace(hour=13)}, True),
        ({"phase": "Running", "node": "n1", "deleting": T0.replace(hour=13)}, False),
        ({"phase": "Running", "node": "n1", "deleting": T0}, True),
        ({"phase": "Running", "node": "n1", "deleting": T0.replace(hour=11)}, True),
        (
            {"phase": "Running", "node": "n1", "deleting": T0.replace(hour=13), "exit_code": 143},
            True,
        ),
        ({"phase": "Failed", "node": "n1", "exit_code": 1, "finalizer": False}, False),
    ],
    ids=[
        "pending",
        "running",
        "succeeded",
        "failed",
        "evicted",
        "deleting-unscheduled",
        "deleting-within-grace",
        "deleting-grace-over",
        "deleting-long-ago",
        "deleting-container-stopped",
        "already-released",
    ],
)
def test_release_worker_when_a_pod_ends(pod_kwargs, released):
    job = Make.job(partitions=1)
    pod = Make.pod(job, 0, 1, **pod_kwargs)
    releases = reconcile(job, [pod], [], T0, settings=SETTINGS).of_type(ReleaseWorker)
    expected = [ReleaseWorker("job-p0-a1", POD_UID, pod["spec"].get("nodeName"))]
    assert releases == (expected if released else [])


def test_a_deleting_pod_in_its_grace_period_asks_for_a_requeue():
    job = Make.job(partitions=1)
    pod = Make.pod(job, 0, 1, phase="Running", node="n1", deleting=T0.replace(second=20))
    decision = reconcile(job, [pod], [], T0, settings=SETTINGS)
    assert decision.requeue_after == 20.0


def test_pods_of_other_owners_are_ignored():
    job = Make.job(partitions=1)
    stranger = Make.pod(job, 0, 1, phase="Failed", exit_code=2, message="not ours")
    stranger["metadata"]["ownerReferences"][0]["uid"] = "an-older-job-with-this-name"
    decision = reconcile(job, [stranger], [], T0, settings=SETTINGS)
    assert decision.status["phase"] == "Pending"
    assert [c.name for c in decision.of_type(CreatePod)] == ["job-p0-a1"]
    assert decision.of_type(ReleaseWorker) == []


@pytest.mark.parametrize(
    "labels",
    [{"kuzk.io/partition": "7"}, {"kuzk.io/attempt": "x"}, {"kuzk.io/attempt": "0"}],
    ids=["partition-out-of-range", "attempt-not-a-number", "attempt-0"],
)
def test_stray_pods_are_deleted(labels):
    job = Make.job(partitions=1)
    stray = Make.pod(job, 0, 1, phase="Running", node="n1")
    stray["metadata"]["name"] = "stray"
    stray["metadata"]["labels"].update(labels)
    decision = reconcile(job, [stray], [], T0, settings=SETTINGS)
    assert decision.of_type(DeletePod) == [DeletePod("stray", POD_UID, "UnknownPartition")]
    assert [c.name for c in decision.of_type(CreatePod)] == ["job-p0-a1"]


# The worker's outcome at release follows the partition's rule (``observe``), never a second one.
OUTCOME_ROWS: list[tuple[str, dict[str, Any], str, str]] = [
    ("succeeded", {"phase": "Succeeded", "exit_code": 0, "message": Make.result(0)},
     "done", "succeeded"),
    ("succeeded-without-result", {"phase": "Succeeded", "exit_code": 0, "message": "ok"},
     "failed", "failed"),
    ("exit-2", {"phase": "Failed", "exit_code": 2, "message": '{"error": "bad input"}'},
     "invalid", "failed"),
    ("exit-1", {"phase": "Failed", "exit_code": 1}, "failed", "failed"),
    ("oom-killed", {"phase": "Failed", "exit_code": 137, "reason": "OOMKilled"},
     "failed", "failed"),
    ("evicted", {"phase": "Failed", "pod_reason": "Evicted"}, "disrupted", "disrupted"),
    ("disruption-target", {"phase": "Failed", "exit_code": 143, "conditions": [DISRUPTED]},
     "disrupted", "disrupted"),
    ("deleted-while-running", {"phase": "Running", "deleting": T0}, "disrupted", "disrupted"),
    # The same pod once its container has stopped: the deletion came first, so still disrupted.
    ("deleted-then-failed", {"phase": "Failed", "exit_code": 143, "deleting": T0,
                             "finished": T0 + timedelta(seconds=3)}, "disrupted", "disrupted"),
    ("failed-then-deleted", {"phase": "Failed", "exit_code": 1, "finished": T0,
                             "deleting": T0 + timedelta(seconds=60)}, "failed", "failed"),
    ("node-lost", {"phase": "Failed", "pod_reason": "NodeLost"}, "disrupted", "disrupted"),
    ("deleted-before-it-ran", {"deleting": T0}, "disrupted", "disrupted"),
]


@pytest.mark.parametrize(("pod_kwargs", "kind", "worker"),
                         [row[1:] for row in OUTCOME_ROWS], ids=[row[0] for row in OUTCOME_ROWS])
def test_the_worker_outcome_follows_the_partition_rule(pod_kwargs: dict[str, Any], kind: str,
                                                       worker: str) -> None:
    pod = Make.pod(Make.job(partitions=1), node="n1", **pod_kwargs)
    assert observe(pod, {}).kind == kind
    assert worker_outcome(pod) == worker
