"""Retries, disruptions and recovery of a partition's attempts from status and pods alone."""

from __future__ import annotations

import pytest

from kuzk.operator.decide.actions import CreatePod, DeletePod, Event
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.decide.reconcile import reconcile
from tests.unit.operator.decide.objects import T0, Cluster, Make

SETTINGS = PodSettings(image="kuzk/prover:test")


def run_attempt(cluster: Cluster, index: int, outcome: str) -> None:
    """Schedule, start and end the partition's current pod: exit code or preemption."""
    cluster.reconcile()
    cluster.schedule()
    name = cluster.partition(index)["pod"]
    cluster.start(name, "gpu")
    cluster.reconcile()
    if outcome == "preempt":
        cluster.preempt(name)
        cluster.terminate_deleting()
    else:
        cluster.finish(name, exit_code=int(outcome), message="boom" if outcome != "0" else None)
    cluster.tick()


@pytest.mark.parametrize("limit", [0, 1, 3], ids=lambda n: f"backoff-{n}")
def test_retries_up_to_the_limit_then_the_partition_and_job_fail(limit):
    cluster = Cluster(Make.job(partitions=1, backoffLimitPerPartition=limit))
    for _ in range(limit + 1):
        run_attempt(cluster, 0, "1")
    cluster.reconcile()
    entry = cluster.partition(0)
    status = cluster.job["status"]
    assert (entry["state"], entry["attempt"], entry["retries"]) == ("failed", limit + 1, limit)
    assert entry["reason"] == "BackoffLimitExceeded"
    assert status["phase"] == "Failed"
    assert (status["retries"], status["failed"], status["failedPartitions"]) == (limit, 1, "0")
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "BackoffLimitExceeded")
    assert "boom" in failed["message"]
    assert cluster.created == [f"job-p0-a{n}" for n in range(1, limit + 2)]
    reasons = [e.reason for e in cluster.events]
    assert reasons.count("PartitionRetried") == limit
    assert reasons.count("PartitionFailed") == reasons.count("JobFailed") == 1


def test_a_transient_failure_is_retried_and_the_job_succeeds():
    cluster = Cluster(Make.job(partitions=1))
    run_attempt(cluster, 0, "1")
    run_attempt(cluster, 0, "0")
    cluster.reconcile()
    status = cluster.job["status"]
    assert status["phase"] == "Succeeded"
    assert status["retries"] == 1
    assert (cluster.partition(0)["attempt"], cluster.partition(0)["retries"]) == (2, 1)


def test_disruptions_do_not_count_against_the_backoff_limit():
    cluster = Cluster(Make.job(partitions=1, backoffLimitPerPartition=0))
    for _ in range(3):
        run_attempt(cluster, 0, "preempt")
    run_attempt(cluster, 0, "0")
    cluster.reconcile()
    entry = cluster.partition(0)
    assert cluster.job["status"]["phase"] == "Succeeded"
    assert (entry["attempt"], entry["retries"], entry["disruptions"]) == (4, 0, 3)
    assert cluster.job["status"]["retries"] == 3


def test_a_counted_failure_after_disruptions_still_exhausts_the_limit():
    cluster = Cluster(Make.job(partitions=1, backoffLimitPerPartition=1))
    for outcome in ("1", "preempt", "preempt", "1"):
        run_attempt(cluster, 0, outcome)
    cluster.reconcile()
    entry = cluster.partition(0)
    assert (entry["state"], entry["attempt"], entry["retries"], entry["disruptions"]) == (
        "failed",
        4,
        1,
        2,
    )


@pytest.mark.parametrize(
    ("first", "retries", "disruptions"),
    [
        ({"phase": "Failed", "node": "n1", "exit_code": 1}, 1, 0),
        ({"phase": "Failed", "node": "n1", "pod_reason": "Evicted"}, 0, 1),
    ],
    ids=["failure", "eviction"],
)
def test_a_lost_status_write_is_recovered_from_the_pods(first, retries, disruptions):
    """The operator created attempt 2 and died before writing status: nothing is lost."""
    job = Make.job(partitions=1)
    pods = [Make.pod(job, 0, 1, **first), Make.pod(job, 0, 2, phase="Running", node="n2")]
    decision = reconcile(job, pods, [], T0, settings=SETTINGS)
    (entry,) = decision.status["partitions"]
    assert (entry["attempt"], entry["state"], entry["pod"]) == (2, "scheduled", "job-p0-a2")
    assert (entry["retries"], entry["disruptions"]) == (retries, disruptions)
    assert decision.of_type(CreatePod) == []


def test_an_attempt_without_any_trace_counts_as_a_disruption():
    job = Make.job(partitions=1)
    decision = reconcile(job, [Make.pod(job, 0, 3, node="n1")], [], T0, settings=SETTINGS)
    (entry,) = decision.status["partitions"]
    assert (entry["attempt"], entry["retries"], entry["disruptions"]) == (3, 0, 2)
    assert entry["reason"] == "AttemptRecordLost"
    assert decision.of_type(CreatePod) == []


def test_older_attempts_are_history():
    job = Make.job(partitions=1)
    job["status"] = {
        "partitionCount": 1,
        "partitions": [{"index": 0, "state": "pending", "attempt": 2, "retries": 1}],
    }
    pods = [
        Make.pod(job, 0, 1, phase="Failed", node="n1", exit_code=1, finalizer=False),
        Make.pod(job, 0, 2, phase="Running", node="n1"),
    ]
    decision = reconcile(job, pods, [], T0, settings=SETTINGS)
    (entry,) = decision.status["partitions"]
    assert (entry["attempt"], entry["retries"], entry["state"]) == (2, 1, "scheduled")
    assert decision.of_type(DeletePod) == []


def test_a_live_pod_of_an_older_attempt_is_deleted():
    job = Make.job(partitions=1)
    job["status"] = {
        "partitionCount": 1,
        "partitions": [{"index": 0, "state": "pending", "attempt": 2, "disruptions": 1}],
    }
    old = Make.pod(job, 0, 1, phase="Running", node="n1")
    decision = reconcile(job, [old], [], T0, settings=SETTINGS)
    assert decision.of_type(DeletePod) == [DeletePod("job-p0-a1", "uid-job-p0-a1", "Superseded")]
    assert [c.name for c in decision.of_type(CreatePod)] == ["job-p0-a2"]


@pytest.mark.parametrize("state", ["scheduled", "synthesizing", "gpu"], ids=str)
def test_a_started_pod_that_vanished_is_retried_without_counting(state):
    job = Make.job(partitions=1)
    job["status"] = {
        "partitionCount": 1,
        "partitions": [{"index": 0, "state": state, "attempt": 1, "pod": "job-p0-a1"}],
    }
    decision = reconcile(job, [], [], T0, settings=SETTINGS)
    (entry,) = decision.status["partitions"]
    assert (entry["attempt"], entry["retries"], entry["disruptions"]) == (2, 0, 1)
    assert [c.name for c in decision.of_type(CreatePod)] == ["job-p0-a2"]
    assert [e.reason for e in decision.of_type(Event)] == ["PartitionRetried"]


def test_a_pending_partition_whose_pod_is_not_listed_yet_is_created_again_by_name():
    job = Make.job(partitions=1)
    job["status"] = {
        "partitionCount": 1,
        "partitions": [{"index": 0, "state": "pending", "attempt": 1, "pod": "job-p0-a1"}],
    }
    decision = reconcile(job, [], [], T0, settings=SETTINGS)
    assert [(c.name, c.attempt) for c in decision.of_type(CreatePod)] == [("job-p0-a1", 1)]
    assert decision.status["partitions"][0]["disruptions"] == 0


@pytest.mark.parametrize("state", ["done", "failed"], ids=str)
def test_finished_partitions_are_final(state):
    job = Make.job(partitions=2)
    job["status"] = {
        "phase": "Running",
        "partitionCount": 2,
        "partitions": [
            {"index": 0, "state": state, "attempt": 1, "commitment": "00"},
            {"index": 1, "state": "scheduled", "attempt": 1},
        ],
    }
    late = Make.pod(job, 0, 1, phase="Succeeded", exit_code=0, message=Make.result(0))
    decision = reconcile(job, [late], [], T0, settings=SETTINGS)
    assert decision.status["partitions"][0]["state"] == state
    assert decision.status["partitions"][0]["commitment"] == "00"
