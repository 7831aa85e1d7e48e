"""A pod the API server refuses: for good (400, 422) the partition fails with the API server's
message and the job fails; for now (403: a quota, Pod Security admission) the partition stays
pending with the reason shown, a condition and an Event, and its pod is asked for again
after a backoff that doubles, until it is accepted."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from kuzk.operator.decide.actions import CreatePod, Decision, Refusal
from kuzk.operator.decide.policies.refused import refusal_backoff
from kuzk.operator.decide.reconcile import reconcile
from tests.unit.operator.decide.objects import SETTINGS, Cluster, Make

QUOTA = 'pods "job-p0-a1" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=1'
INVALID = 'Pod "job-p0-a1" is invalid: spec.volumes[0].hostPath.path: must not contain \'..\''


def refuse(cluster: Cluster, refusals: dict[int, Refusal]) -> Decision:
    """One sync whose creates of ``refusals``' partitions the API server refuses: the
    decision is applied without those pods, then decided again with the refusals, as the
    controller's second pass does."""
    first = cluster.decide()
    kept = [a for a in first.actions
            if not (isinstance(a, CreatePod) and a.partition in refusals)]
    cluster.apply(Decision(first.status, kept, first.requeue_after))
    job, pods, workers = cluster.inputs()
    second = reconcile(copy.deepcopy(job), pods, workers, cluster.now, settings=SETTINGS,
                       refused=refusals)
    cluster.apply(second)
    return second


def condition(cluster: Cluster, kind: str) -> dict:
    return next(c for c in cluster.job["status"]["conditions"] if c["type"] == kind)


@pytest.mark.parametrize("code", [400, 422])
def test_an_invalid_pod_fails_its_partition_and_the_job_with_the_api_servers_message(code):
    cluster = Cluster(Make.job(partitions=2))
    refuse(cluster, {0: Refusal(code, INVALID)})
    entry, status = cluster.partition(0), cluster.job["status"]
    assert (entry["state"], entry["reason"]) == ("failed", "PodInvalid")
    assert INVALID in entry["message"] and f"({code})" in entry["message"]
    assert status["phase"] == "Failed"
    failed = condition(cluster, "Failed")
    assert failed["status"] == "True" and INVALID in failed["message"]
    assert [e.reason for e in cluster.events].count("PartitionFailed") == 1
    assert "job-p0-a1" not in cluster.pods
    assert cluster.reconcile().of_type(CreatePod) == []


def test_a_forbidden_pod_stays_pending_with_its_reason_and_is_asked_for_after_a_backoff():
    cluster = Cluster(Make.job(partitions=2))
    decision = refuse(cluster, {0: Refusal(403, QUOTA)})
    entry = cluster.partition(0)
    assert (entry["state"], entry["reason"], entry["refusals"]) == ("pending", "PodRefused", 1)
    assert QUOTA in entry["message"]
    refused = condition(cluster, "PodsRefused")
    assert (refused["status"], refused["reason"]) == ("True", "FailedCreate")
    assert "partition 0" in refused["message"] and QUOTA in refused["message"]
    (event,) = [e for e in cluster.events if e.reason == "FailedCreate"]
    assert event.type == "Warning" and QUOTA in event.message and "again in 5s" in event.message
    assert decision.requeue_after == pytest.approx(refusal_backoff(1))
    assert "job-p1-a1" in cluster.pods  # the other partition is not held back

    # Before the backoff has passed no sync asks again, however often the job is synced.
    cluster.now += timedelta(seconds=refusal_backoff(1) - 1)
    assert cluster.reconcile().of_type(CreatePod) == []

    # Refused again: the wait doubles.
    cluster.now += timedelta(seconds=1)
    decision = refuse(cluster, {0: Refusal(403, QUOTA)})
    assert cluster.partition(0)["refusals"] == 2
    assert decision.requeue_after == pytest.approx(refusal_backoff(2))
    assert refusal_backoff(2) == 2 * refusal_backoff(1)

    # The quota is raised: the pod is created and the refusal is over.
    cluster.now += timedelta(seconds=refusal_backoff(2))
    (create,) = cluster.reconcile().of_type(CreatePod)
    assert create.name == "job-p0-a1"
    cluster.reconcile()
    entry = cluster.partition(0)
    assert "reason" not in entry and "refusals" not in entry and "refusedAt" not in entry
    assert condition(cluster, "PodsRefused")["status"] == "False"
    assert entry["attempt"] == 1 and entry.get("retries", 0) == 0


def test_the_backoff_doubles_up_to_five_minutes():
    assert [refusal_backoff(n) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]


def test_a_refusal_during_the_backoff_is_not_counted_again():
    """A create made from a stale view of the job (before the first refusal was written) is
    refused too; deciding again on the fresh job must not count it twice."""
    cluster = Cluster(Make.job(partitions=1))
    refuse(cluster, {0: Refusal(403, QUOTA)})
    job, pods, workers = cluster.inputs()
    again = reconcile(copy.deepcopy(job), pods, workers, cluster.now, settings=SETTINGS,
                      refused={0: Refusal(403, QUOTA)})
    assert again.status["partitions"][0]["refusals"] == 1
    assert not [a for a in again.actions if getattr(a, "reason", "") == "FailedCreate"]
