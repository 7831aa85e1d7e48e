"""Two operator replicas with Kopf peering hand over in both orders: exactly one acts, and a
replica paused by a higher-priority peer stops its own timers and syncs too (a TTL that falls
due after the pause is carried out by the new leader only)."""

from __future__ import annotations

import signal

import pytest

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import Plan, apply_job, get_job, proofjob, wait_job

# They mostly wait on the peering's lifetimes: on the long tests' worker (tests/conftest.py),
# which the other control-plane tests' worker outlasted by a minute.
pytestmark = pytest.mark.worker("long")

RESUMED = "Resuming operations after the pause"
PAUSED = "paused by a higher-priority peer"
LIFETIME = ("--peering-lifetime", "5")


def test_a_low_replica_started_second_waits_and_takes_over(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    # Kopf starts every replica paused until it has seen the peers; a replica alone resumes,
    # one that sees a higher priority stays paused.
    high = run_operator("--priority", "20", *LIFETIME, standalone=False)
    wait_for(lambda: RESUMED in high.text(), 60, "high replica resumes")
    low = run_operator("--priority", "10", *LIFETIME, standalone=False)
    wait_for(lambda: PAUSED in low.text(), 60, "low replica sees the high one")

    apply_job(cluster, namespace, proofjob("first", partitions=2))
    wait_job(cluster, namespace, "first", "Succeeded")
    wait_for(lambda: "first" in high.text(), 30, "the high replica's log to name the job")
    assert "first" not in low.text()
    assert RESUMED not in low.text()

    high.stop(signal.SIGKILL)
    apply_job(cluster, namespace, proofjob("second", partitions=2))
    wait_job(cluster, namespace, "second", "Succeeded", timeout=120)
    assert RESUMED in low.text()
    wait_for(lambda: "second" in low.text(), 30, "the low replica's log to name the job")
    assert "Traceback" not in low.text() + high.text()


def test_a_replica_outranked_while_acting_stops_its_timers(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    low = run_operator("--priority", "10", *LIFETIME, standalone=False)
    wait_for(lambda: RESUMED in low.text(), 60, "low replica resumes alone")
    apply_job(cluster, namespace, proofjob("timed", partitions=1, ttlSecondsAfterFinished=25))
    wait_job(cluster, namespace, "timed", "Succeeded")
    # low acted, and holds the TTL's timer. What names a job in a replica's log is its
    # finalizer release of the job's pods, which may land just after the status write that
    # showed Succeeded: each check below waits for that line.
    wait_for(lambda: "timed" in low.text(), 30, "the low replica's log to name the job")

    high = run_operator("--priority", "20", *LIFETIME, standalone=False)
    wait_for(lambda: PAUSED in low.text(), 60, "low replica pauses for the high one")
    apply_job(cluster, namespace, proofjob("later", partitions=2))
    wait_job(cluster, namespace, "later", "Succeeded")
    wait_for(lambda: get_job(cluster, namespace, "timed") is None, 60, "the TTL fires")
    deleting = f"deleting ProofJob {namespace}/timed"
    assert deleting in high.text()
    assert deleting not in low.text()
    assert "later" not in low.text()

    high.stop(signal.SIGKILL)
    wait_for(lambda: low.text().count(RESUMED) >= 2, 60, "low replica resumes")
    apply_job(cluster, namespace, proofjob("after", partitions=2))
    wait_job(cluster, namespace, "after", "Succeeded", timeout=120)
    wait_for(lambda: "after" in low.text(), 30, "the low replica's log to name the job")
    assert "Traceback" not in low.text() + high.text()
