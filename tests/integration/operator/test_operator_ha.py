"""Two operator replicas with Kopf peering: exactly one acts, and killing it hands over."""

from __future__ import annotations

import signal

from tests.integration.operator.conftest import Plan, apply_job, proofjob, wait_job
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for


def test_one_replica_acts_and_the_other_takes_over(cluster: Cluster, namespace: str, nodes,
                                                   run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    # Kopf starts every replica paused until it has seen the peers; a replica alone resumes,
    # one that sees a higher priority stays paused.
    resumed = "Resuming operations after the pause"
    high = run_operator("--priority", "20", "--peering-lifetime", "5", standalone=False)
    wait_for(lambda: resumed in high.text(), 60, "high replica resumes")
    low = run_operator("--priority", "10", "--peering-lifetime", "5", standalone=False)
    wait_for(lambda: "Initial authentication has finished" in low.text(), 60, "low replica up")

    apply_job(cluster, namespace, proofjob("first", partitions=2))
    wait_job(cluster, namespace, "first", "Succeeded")
    assert "first" in high.text()
    assert "first" not in low.text()
    assert resumed not in low.text()

    high.stop(signal.SIGKILL)
    apply_job(cluster, namespace, proofjob("second", partitions=2))
    wait_job(cluster, namespace, "second", "Succeeded", timeout=120)
    assert resumed in low.text()
    assert "second" in low.text()
