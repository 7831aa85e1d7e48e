"""A partition pod the API server refuses is visible, not retried in a tight loop: refused as
invalid (422), the partition and the job fail with the API server's message; refused by a
ResourceQuota (403), the partition stays pending with the reason on it, in the PodsRefused
condition and in FailedCreate Events, asked for again after a doubling backoff, and the job
runs once the quota is raised."""

from __future__ import annotations

import time
from typing import Any

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


def _partition(job: dict[str, Any] | None, index: int) -> dict[str, Any]:
    entries = ((job or {}).get("status") or {}).get("partitions") or []
    return next((p for p in entries if p["index"] == index), {})


def _refusal_lines(text: str, code: int) -> list[str]:
    return [line for line in text.splitlines() if f"refused its pod ({code})" in line]


def test_an_invalid_pod_fails_its_partition_and_the_job_with_the_api_servers_message(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    plan.set(**{"*": {"seconds": 0.2}})
    operator = run_operator()
    resources = {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}
    apply_job(cluster, namespace, proofjob("invalid", partitions=1,
                                           prover={"resources": resources}))
    job = wait_job(cluster, namespace, "invalid", "Failed", timeout=60)

    entry = _partition(job, 0)
    assert (entry["state"], entry["reason"]) == ("failed", "PodInvalid")
    assert "(422)" in entry["message"] and "must be less than or equal to" in entry["message"]
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "PodInvalid"
    assert "must be less than or equal to" in failed["message"]
    assert job_pods(cluster, namespace, "invalid") == []
    lines = wait_for(lambda: _refusal_lines(operator.text(), 422), 10, "the refusal logged")
    assert len(lines) == 1 and "the partition fails" in lines[0]


def test_a_quota_refusal_keeps_the_partition_pending_until_the_quota_is_raised(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    plan.set(**{"*": {"seconds": 0.2}})
    quota = {"metadata": {"name": "gpus"}, "spec": {"hard": {"requests.nvidia.com/gpu": "0"}}}
    cluster.core.create_namespaced_resource_quota(namespace, quota)
    wait_for(lambda: (cluster.core.read_namespaced_resource_quota("gpus", namespace)
                      .status.hard), 30, "the quota controller's first count")
    operator = run_operator()
    apply_job(cluster, namespace, proofjob("quota", partitions=2))

    def refused(times: int) -> dict[str, Any] | None:
        job = get_job(cluster, namespace, "quota")
        parts = [_partition(job, i) for i in (0, 1)]
        return job if all(p.get("refusals", 0) >= times for p in parts) else None

    job = wait_for(lambda: refused(1), 30, "both partitions refused once", interval=0.2)
    first = time.monotonic()
    entry = _partition(job, 0)
    assert (entry["state"], entry["reason"]) == ("pending", "PodRefused")
    assert "(403)" in entry["message"] and "exceeded quota: gpus" in entry["message"]
    assert job["status"]["phase"] == "Pending"
    refusal = condition(job, "PodsRefused")
    assert refusal is not None and refusal["status"] == "True"
    assert refusal["reason"] == "FailedCreate" and "exceeded quota: gpus" in refusal["message"]

    # Asked again only after the backoff (5 s), and each refusal is one log line.
    job = wait_for(lambda: refused(2), 30, "both partitions refused twice", interval=0.2)
    assert time.monotonic() - first > 3
    refusals = sum(_partition(job, i)["refusals"] for i in (0, 1))
    # Each refusal is logged just after the status write that records it: wait for the lines.
    def logged() -> list[str] | None:
        lines = _refusal_lines(operator.text(), 403)
        return lines if len(lines) >= refusals else None

    lines = wait_for(logged, 10, "each recorded refusal logged")
    assert len(lines) <= refusals + 2  # two more if the next round refused since the read
    assert all("asking again in" in line for line in lines)
    events = cluster.core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=quota").items
    assert any(e.reason == "FailedCreate" and "exceeded quota" in e.message for e in events)
    assert job_pods(cluster, namespace, "quota") == []

    cluster.core.patch_namespaced_resource_quota(
        "gpus", namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})
    job = wait_job(cluster, namespace, "quota", "Succeeded", timeout=90)
    assert all("reason" not in p for p in job["status"]["partitions"])
    refusal = condition(job, "PodsRefused")
    assert refusal is not None and refusal["status"] == "False"
    assert job["status"]["retries"] == 0

