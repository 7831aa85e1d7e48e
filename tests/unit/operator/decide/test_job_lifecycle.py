"""Job-level behaviour: success and its proof, failure cleanup, deadline, suspend, TTL, events."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest

from kuzk.contract import api, proofjob
from kuzk.operator.decide.actions import CreatePod, DeleteJob, DeletePod, Event
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.decide.reconcile import reconcile
from tests.unit.operator.decide.objects import T0, Cluster, Make, commitment_for

SETTINGS = PodSettings(image="kuzk/prover:test")


def condition(status, kind):
    return next(c for c in status["conditions"] if c["type"] == kind)


def drive(cluster: Cluster, partitions: list[int], stage: str = "gpu") -> None:
    """Reconcile, bind and start the given partitions' current pods, reconcile again."""
    cluster.reconcile()
    cluster.schedule()
    for index in partitions:
        cluster.start(cluster.partition(index)["pod"], stage)
    cluster.reconcile()


def test_success_records_the_proof_and_emits_each_event_once():
    cluster = Cluster(Make.job(partitions=4))
    drive(cluster, [0, 1, 2, 3])
    cluster.tick(5)
    for index in range(4):
        cluster.finish(cluster.partition(index)["pod"])
    decision = cluster.reconcile()
    status = cluster.job["status"]
    expected = hashlib.sha256(b"".join(bytes.fromhex(commitment_for(i)) for i in range(4)))
    assert status["phase"] == "Succeeded"
    assert status["proof"] == {"commitment": expected.hexdigest(), "partitions": 4}
    assert (status["succeeded"], status["active"], status["completedPartitions"]) == (4, 0, "0-3")
    assert status["completionTime"] == api.format_time(cluster.now)
    complete = condition(status, "Complete")
    assert (complete["status"], complete["reason"]) == ("True", "AllPartitionsDone")
    assert condition(status, "Running")["status"] == "False"
    # The four partitions ended in one sync: one PartitionDone names them all (an Event is
    # an API write); starts are not events.
    events = decision.of_type(Event)
    assert [e.reason for e in events] == ["PartitionDone", "JobComplete"]
    assert events[0].message.startswith("partitions 0-3 done on ")
    reasons = [e.reason for e in cluster.events]
    assert reasons.count("PartitionDone") == 1
    again = cluster.reconcile()
    assert again.actions == []
    assert again.status == decision.status


def test_a_fatal_failure_cleans_up_the_whole_job():
    cluster = Cluster(Make.job(partitions=4), nodes={"n1": 3})
    drive(cluster, [0, 1, 2])
    cluster.finish(cluster.partition(2)["pod"])
    message = json.dumps({"error": "sector 7 has no replica"})
    cluster.finish(cluster.partition(0)["pod"], exit_code=2, message=message)
    decision = cluster.reconcile()
    status = cluster.job["status"]
    states = {p["index"]: (p["state"], p.get("reason")) for p in status["partitions"]}
    assert states == {
        0: ("failed", "InvalidInput"),
        1: ("failed", "JobFailed"),
        2: ("done", None),
        3: ("failed", "JobFailed"),
    }
    assert status["phase"] == "Failed"
    assert (status["failed"], status["failedPartitions"], status["active"]) == (3, "0-1,3", 0)
    failed = condition(status, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "InvalidInput")
    assert "sector 7 has no replica" in failed["message"]
    deleted = {(d.name, d.reason) for d in decision.of_type(DeletePod)}
    assert deleted == {("job-p1-a1", "JobFailed"), ("job-p3-a1", "JobFailed")}
    assert decision.of_type(CreatePod) == []
    assert [e.reason for e in decision.of_type(Event)] == [
        "PartitionFailed",
        "PartitionDone",
        "JobFailed",
    ]
    cluster.terminate_deleting()
    cluster.reconcile()
    cluster.reconcile()
    assert cluster.pods.keys() == {"job-p0-a1", "job-p2-a1"}
    assert all(not p["metadata"]["finalizers"] for p in cluster.pods.values())
    assert cluster.job["status"]["partitions"] == status["partitions"]
    assert [e.reason for e in cluster.events].count("JobFailed") == 1


def test_the_deadline_fails_the_job_and_deletes_its_pods():
    cluster = Cluster(Make.job("winning-post"))
    first = cluster.reconcile()
    assert first.requeue_after == 25.0
    cluster.schedule()
    cluster.start("job-p0-a1")
    cluster.tick(24)
    assert cluster.reconcile().requeue_after == 1.0
    cluster.tick(1)
    decision = cluster.reconcile()
    status = cluster.job["status"]
    assert status["phase"] == "Failed"
    failed = condition(status, "Failed")
    assert (failed["reason"], failed["status"]) == ("DeadlineExceeded", "True")
    assert status["partitions"][0]["state"] == "failed"
    assert status["partitions"][0]["message"] == "JobFailed: DeadlineExceeded"
    assert decision.of_type(DeletePod) == [DeletePod("job-p0-a1", "uid-0", "JobFailed")]
    assert cluster.reconcile().requeue_after == 30.0  # the grace period of the deleted pod


def test_a_job_never_written_counts_its_deadline_from_its_creation():
    """Its first status may wait (only Pending: progress), its deadline must not."""
    job = Make.job("winning-post")
    job["metadata"]["creationTimestamp"] = api.format_time(T0 - timedelta(seconds=10))
    cluster = Cluster(job)
    first = cluster.reconcile()
    assert first.status["startTime"] == job["metadata"]["creationTimestamp"]
    assert first.requeue_after == 15.0


def test_success_beats_a_deadline_that_passes_at_the_same_time():
    cluster = Cluster(Make.job("winning-post"))
    drive(cluster, [0])
    cluster.tick(60)
    cluster.finish("job-p0-a1")
    assert cluster.reconcile().status["phase"] == "Succeeded"


def test_suspend_deletes_live_pods_and_resume_continues_where_it_stopped():
    cluster = Cluster(Make.job(partitions=4, activeDeadlineSeconds=100), nodes={"n1": 3})
    drive(cluster, [0, 1])
    cluster.finish(cluster.partition(0)["pod"])
    cluster.reconcile()
    cluster.job["spec"]["suspend"] = True
    cluster.tick(50)
    suspended = cluster.reconcile()
    status = cluster.job["status"]
    assert status["phase"] == "Suspended"
    assert condition(status, "Suspended")["status"] == "True"
    assert "startTime" not in status
    assert suspended.requeue_after is None
    deleted = {(d.name, d.reason) for d in suspended.of_type(DeletePod)}
    assert deleted == {(f"job-p{i}-a1", "Suspended") for i in (1, 2, 3)}
    attempts = {p["index"]: (p["state"], p["attempt"]) for p in status["partitions"]}
    assert attempts == {0: ("done", 1), 1: ("pending", 2), 2: ("pending", 2), 3: ("pending", 2)}
    assert all(p["retries"] == 0 for p in status["partitions"])
    cluster.terminate_deleting()
    cluster.tick(200)
    while_suspended = cluster.reconcile()
    assert while_suspended.of_type(CreatePod) == []
    assert cluster.job["status"]["phase"] == "Suspended"
    cluster.job["spec"]["suspend"] = False
    resumed = cluster.reconcile()
    status = cluster.job["status"]
    assert status["phase"] == "Running"
    assert status["startTime"] == api.format_time(cluster.now)
    assert resumed.requeue_after == 100.0
    assert [c.name for c in resumed.of_type(CreatePod)] == [f"job-p{i}-a2" for i in (1, 2, 3)]
    assert condition(status, "Suspended")["status"] == "False"
    reasons = [e.reason for e in cluster.events]
    assert (reasons.count("Suspended"), reasons.count("Resumed")) == (1, 1)


def test_a_job_created_suspended_starts_nothing():
    decision = reconcile(Make.job(suspend=True), [], [], T0, settings=SETTINGS)
    assert decision.status["phase"] == "Suspended"
    assert decision.status["startTime"] is None
    assert decision.of_type(CreatePod) == []
    assert [e.reason for e in decision.of_type(Event)] == ["Suspended"]


@pytest.mark.parametrize("outcome", ["0", "2"], ids=["succeeded", "failed"])
def test_ttl_deletes_the_finished_job(outcome):
    cluster = Cluster(Make.job(partitions=1, ttlSecondsAfterFinished=10))
    drive(cluster, [0])
    cluster.finish("job-p0-a1", exit_code=int(outcome), message=None if outcome == "0" else "x")
    finished = cluster.reconcile()
    assert finished.requeue_after == 10.0
    assert not finished.ttl_expired
    cluster.tick(10)
    expired = cluster.reconcile()
    assert expired.ttl_expired
    assert expired.of_type(DeleteJob) == [DeleteJob("ttlSecondsAfterFinished=10")]


def test_ttl_zero_deletes_at_once():
    cluster = Cluster(Make.job(partitions=1, ttlSecondsAfterFinished=0))
    drive(cluster, [0])
    cluster.finish("job-p0-a1")
    assert cluster.reconcile().ttl_expired


def test_conditions_keep_their_transition_time_until_they_change():
    cluster = Cluster(Make.job(partitions=2))
    cluster.reconcile()
    created = {c["type"]: c["lastTransitionTime"] for c in cluster.job["status"]["conditions"]}
    cluster.tick(5)
    cluster.schedule()
    cluster.reconcile()
    later = {c["type"]: c["lastTransitionTime"] for c in cluster.job["status"]["conditions"]}
    assert later["Running"] == api.format_time(T0 + timedelta(seconds=5))
    assert {k: v for k, v in later.items() if k != "Running"} == {
        k: v for k, v in created.items() if k != "Running"
    }


def test_status_records_what_was_resolved_and_observed():
    job = Make.job("window-post")
    job["metadata"]["generation"] = 4
    status = reconcile(job, [], [], T0, settings=SETTINGS).status
    assert status["observedGeneration"] == 4
    assert status["partitionCount"] == 1
    assert status["resolved"] == {
        "circuitLog2": 27,
        "priorityClassName": "kuzk-high",
        "activeDeadlineSeconds": 1800,
        "randomness": proofjob.resolve(job).randomness,
    }
    assert {c["observedGeneration"] for c in status["conditions"]} == {4}
    assert set(status) == {
        "observedGeneration", "phase", "partitionCount", "resolved", "startTime",
        "completionTime", "active", "succeeded", "failed", "retries", "completedPartitions",
        "failedPartitions", "partitions", "proof", "conditions",
    }  # fmt: skip


def test_a_deleting_job_creates_nothing_and_stops_its_pods():
    job = Make.job(partitions=2)
    job["metadata"]["deletionTimestamp"] = api.format_time(T0)
    running = Make.pod(job, 0, 1, phase="Running", node="n1")
    decision = reconcile(job, [running], [], T0, settings=SETTINGS)
    assert decision.of_type(CreatePod) == []
    assert decision.of_type(DeletePod) == [DeletePod("job-p0-a1", "uid-job-p0-a1", "JobDeleted")]


def test_a_finished_job_stops_pods_that_appear_late():
    job = Make.job(partitions=1)
    first = reconcile(job, [], [], T0, settings=SETTINGS)
    job["status"] = {**first.status, "phase": "Failed"}
    late = Make.pod(job, 0, 1, phase="Running", node="n1")
    decision = reconcile(job, [late], [], T0, settings=SETTINGS)
    assert decision.of_type(DeletePod) == [DeletePod("job-p0-a1", "uid-job-p0-a1", "JobFailed")]
    assert decision.of_type(Event) == []


def test_a_partition_is_in_gpu_only_while_its_lane_holds_the_gpu_phase():
    """Its lane gives the GPU phase up (committing), or leaves before the operator saw that:
    either way the job's status moves it on from gpu, so it never shows more partitions in
    gpu than GPUs with a holder."""
    cluster = Cluster(Make.job(partitions=2), nodes={"n1": 2})
    drive(cluster, [0, 1])

    def states():
        return [p["state"] for p in cluster.job["status"]["partitions"]]

    assert states() == ["gpu", "gpu"]
    cluster.stage(cluster.partition(0)["pod"], "committing")
    cluster.claims.pop(cluster.pods[cluster.partition(1)["pod"]]["metadata"]["uid"])
    cluster.reconcile()
    assert states() == ["committing", "committing"]
