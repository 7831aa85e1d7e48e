"""Preemption, an operator restart mid-job, deadlines, suspend/resume and TTL."""

from __future__ import annotations

import signal

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    Plan,
    apply_job,
    condition,
    get_job,
    job_pods,
    proofjob,
    wait_job,
)


def test_winning_post_preempts_snap_partition(cluster: Cluster, namespace: str, nodes,
                                              run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    plan.set(**{"*": {"hold": True}})
    run_operator()
    # backoffLimitPerPartition 0: if the preemption counted, the snap job would fail.
    apply_job(cluster, namespace, proofjob("snap", partitions=2, backoffLimitPerPartition=0))
    wait_for(lambda: len(plan.started()) == 2, 60, "both snap partitions running")

    plan.set(**{"winning-p0-a1": {"seconds": 0.2}, "0:1": {"hold": True}, "1:1": {"hold": True},
                "*": {"seconds": 0.2}})
    apply_job(cluster, namespace, proofjob("winning", "winning-post"))
    win = wait_job(cluster, namespace, "winning", "Succeeded", timeout=90)
    snap = get_job(cluster, namespace, "snap")
    assert snap is not None and snap["status"]["phase"] == "Running"
    preempted = [r for r in plan.records("ended") if r.get("signal") == "SIGTERM"]
    assert len(preempted) == 1
    assert win["status"]["completionTime"]

    plan.go()
    snap = wait_job(cluster, namespace, "snap", "Succeeded", timeout=90)
    victim = preempted[0]["partition"]
    part = next(p for p in snap["status"]["partitions"] if p["index"] == victim)
    assert part["attempt"] == 2
    assert snap["status"]["retries"] == 0 or snap["status"]["failed"] == 0


def test_operator_restart_mid_job_loses_nothing(cluster: Cluster, namespace: str, nodes,
                                                run_operator, plan: Plan) -> None:
    nodes(2, gpus=2)
    plan.set(**{"*": {"hold": True}})
    first = run_operator()
    apply_job(cluster, namespace, proofjob("steady", partitions=6))
    wait_for(lambda: len(plan.started()) == 4, 60, "four partitions running")
    first.stop(signal.SIGKILL)

    for pod in plan.started()[:2]:
        plan.go(pod)
    wait_for(lambda: len(plan.records("ended")) == 2, 30, "two partitions finished")
    run_operator()
    wait_for(lambda: len(plan.started()) == 6, 60, "remaining partitions running")
    plan.go()
    job = wait_job(cluster, namespace, "steady", "Succeeded")
    assert job["status"]["succeeded"] == 6
    assert plan.started() == sorted(f"steady-p{i}-a1" for i in range(6))
    names = [p.metadata.name for p in job_pods(cluster, namespace, "steady")]
    assert sorted(names) == plan.started()


def test_active_deadline_fails_job_and_deletes_pods(cluster: Cluster, namespace: str, nodes,
                                                    run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    plan.set(**{"*": {"hold": True}})
    run_operator()
    apply_job(cluster, namespace, proofjob("late", partitions=2, activeDeadlineSeconds=3))
    job = wait_job(cluster, namespace, "late", "Failed", timeout=60)
    failed = condition(job, "Failed")
    assert failed and failed["reason"] == "DeadlineExceeded"
    assert {p["state"] for p in job["status"]["partitions"]} == {"failed"}
    wait_for(lambda: not job_pods(cluster, namespace, "late"), 60, "pods deleted")


def test_suspend_and_resume(cluster: Cluster, namespace: str, nodes, run_operator,
                            plan: Plan) -> None:
    nodes(1, gpus=3)  # all three partitions run at once, whatever the scheduling order
    plan.set(**{"0:1": {"seconds": 0.1}, "*": {"hold": True}})
    run_operator()
    apply_job(cluster, namespace, proofjob("pause", partitions=3))

    def partition_done(i: int) -> bool:
        job = get_job(cluster, namespace, "pause") or {}
        parts = (job.get("status") or {}).get("partitions") or []
        return any(p["index"] == i and p["state"] == "done" for p in parts)

    wait_for(lambda: partition_done(0), 60, "partition 0 done")
    wait_for(lambda: "pause-p1-a1" in plan.started(), 60, "partition 1 running")
    cluster.kubectl("patch", "pj", "pause", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"suspend":true}}')
    job = wait_job(cluster, namespace, "pause", "Suspended")
    assert (condition(job, "Suspended") or {}).get("status") == "True"
    wait_for(lambda: not [p for p in job_pods(cluster, namespace, "pause")
                          if p.status.phase in ("Pending", "Running")], 60, "pods stopped")

    plan.set(**{"*": {"seconds": 0.1}})
    cluster.kubectl("patch", "pj", "pause", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"suspend":false}}')
    job = wait_job(cluster, namespace, "pause", "Succeeded")
    parts = {p["index"]: p for p in job["status"]["partitions"]}
    assert parts[0]["attempt"] == 1
    assert "pause-p0-a2" not in plan.started()
    assert job["status"]["succeeded"] == 3


def test_ttl_deletes_finished_job_and_its_pods(cluster: Cluster, namespace: str, nodes,
                                               run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    run_operator()
    apply_job(cluster, namespace, proofjob("brief", partitions=2, ttlSecondsAfterFinished=2))
    wait_job(cluster, namespace, "brief", "Succeeded")
    wait_for(lambda: get_job(cluster, namespace, "brief") is None, 60, "job deleted by ttl")
    wait_for(lambda: not job_pods(cluster, namespace, "brief"), 60, "pods collected")
