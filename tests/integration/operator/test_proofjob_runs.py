"""A ProofJob becomes one pod per partition on GPU nodes and is followed to the end."""

from __future__ import annotations

import hashlib

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    Plan,
    apply_job,
    condition,
    job_pods,
    proofjob,
    wait_job,
)


def _max_concurrency(plan: Plan) -> int:
    edges = [(r["time"], 1) for r in plan.records("started")]
    edges += [(r["time"], -1) for r in plan.records("ended")]
    level = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):
        level += step
        peak = max(peak, level)
    return peak


def test_snap_update_runs_16_partitions_on_4_gpus(cluster: Cluster, namespace: str, nodes,
                                                  run_operator, plan: Plan) -> None:
    nodes(2, gpus=2)
    plan.set(**{"*": {"seconds": 0.5}})
    run_operator()
    apply_job(cluster, namespace, proofjob("snap"))
    job = wait_job(cluster, namespace, "snap", "Succeeded", timeout=180)

    status = job["status"]
    assert status["succeeded"] == 16
    assert status["partitionCount"] == 16
    assert status["completedPartitions"] == "0-15"
    assert status["failedPartitions"] in ("", None)
    assert status["retries"] == 0
    complete = condition(job, "Complete")
    assert complete and complete["status"] == "True"
    commitments = [p["commitment"] for p in sorted(status["partitions"],
                                                   key=lambda p: p["index"])]
    assert all(commitments)
    digest = hashlib.sha256(b"".join(bytes.fromhex(c) for c in commitments)).hexdigest()
    assert status["proof"]["commitment"] == digest
    assert {p["state"] for p in status["partitions"]} == {"done"}
    assert all(p["node"] and p["synthMs"] == 11 and p["gpuMs"] == 22
               for p in status["partitions"])

    assert len(plan.started()) == 16
    assert _max_concurrency(plan) <= 4
    assert len({r["node"] for r in plan.records("started")}) == 2
    pods = job_pods(cluster, namespace, "snap")
    assert sorted(p.metadata.name for p in pods) == sorted(f"snap-p{i}-a1" for i in range(16))
    pod = pods[0]
    assert pod.spec.priority_class_name == "kuzk-normal"
    assert pod.metadata.owner_references[0].kind == "ProofJob"
    assert pod.spec.restart_policy == "Never"

    table = cluster.kubectl("get", "pj", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "KIND", "PARTITIONS", "DONE", "PHASE", "AGE"]
    assert table[1].split()[:5] == ["snap", "snap-update", "16", "16", "Succeeded"]

    def posted() -> list | None:  # Events are posted off the sync's path, a moment later
        events = cluster.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=snap").items
        return events if {"PartitionDone", "JobComplete"} <= {e.reason for e in events} \
            else None

    events = wait_for(posted, 10, "the job's PartitionDone and JobComplete Events")
    # kuzk's Events say they come from kuzk, as a Kubernetes controller's do.
    assert {e.source.component for e in events} == {"kuzk-operator"}
    assert {e.reporting_component for e in events} == {"kuzk-operator"}
    assert all(e.reporting_instance for e in events)


def test_transient_failure_is_retried(cluster: Cluster, namespace: str, nodes, run_operator,
                                      plan: Plan) -> None:
    nodes(1, gpus=2)
    plan.set(**{"1:1": {"exit": 1, "message": "transient"}, "*": {"seconds": 0.2}})
    run_operator()
    apply_job(cluster, namespace, proofjob("flaky", partitions=3))
    job = wait_job(cluster, namespace, "flaky", "Succeeded")
    status = job["status"]
    assert status["retries"] == 1
    part = next(p for p in status["partitions"] if p["index"] == 1)
    assert part["attempt"] == 2
    assert part["state"] == "done"
    assert sorted(plan.started()) == ["flaky-p0-a1", "flaky-p1-a1", "flaky-p1-a2", "flaky-p2-a1"]


def test_exit_code_2_fails_the_job_at_once(cluster: Cluster, namespace: str, nodes,
                                           run_operator, plan: Plan) -> None:
    nodes(1, gpus=4)  # partition 0 runs whatever the scheduling order
    plan.set(**{"0": {"exit": 2, "message": "sector 5678 has no replica"},
                "*": {"hold": True}})
    run_operator()
    apply_job(cluster, namespace, proofjob("fatal", partitions=4))
    job = wait_job(cluster, namespace, "fatal", "Failed")
    failed = condition(job, "Failed")
    assert failed and failed["status"] == "True"
    assert "sector 5678 has no replica" in failed["message"]
    states = {p["index"]: p["state"] for p in job["status"]["partitions"]}
    assert states[0] == "failed"
    assert not {"pending", "scheduled"} & set(states.values())
    assert "fatal-p0-a2" not in plan.started()
    # The running partitions' pods are deleted; the failed one stays for its logs.
    wait_for(lambda: [p.metadata.name for p in job_pods(cluster, namespace, "fatal")]
             == ["fatal-p0-a1"], 60, "the other pods of the failed job deleted")
