"""With the real operator and the real prover, /status tells the truth while a job runs: every
sample agrees with the API objects it was rendered from, proving GPUs show proving with the
right job and partition, and at the end the counters and /metrics add up. A failed job shows
its failed partitions with their reason and leaves none pending."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk import api
from tests.integration.operator.conftest import apply_job, get_job, proofjob, wait_job
from tests.integration.status.server import StatusServer
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for

pytestmark = pytest.mark.cluster

@dataclass
class Agreement:
    samples: int = 0
    jobs_compared: int = 0
    workers_compared: int = 0
    proving_compared: int = 0
    problems: list[str] = field(default_factory=list)


def _worker_statuses(custom: client.CustomObjectsApi, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        try:
            out[name] = custom.get_cluster_custom_object(api.GROUP, api.VERSION,
                                                         api.WORKERSTATUS_PLURAL, name)
        except ApiException as e:
            if e.status != 404:
                raise
    return out


def compare(doc: dict[str, Any], job: dict[str, Any] | None, statuses: dict[str, Any],
            seen: Agreement) -> None:
    """Compare a /status sample with the objects read right after it. Where an object changed
    in between (its resourceVersion moved on), the sample is older than the object: skipped."""
    seen.samples += 1
    pipelines = {p["job_id"]: p for p in doc["pipelines"]}
    if job is not None:
        key = f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        p = pipelines.get(key)
        if p is not None and p["resource_version"] == job["metadata"]["resourceVersion"]:
            seen.jobs_compared += 1
            truth = [(q["index"], q["state"], q["attempt"], q.get("node"), q.get("worker"))
                     for q in (job.get("status") or {}).get("partitions") or []]
            shown = [(q["index"], q["state"], q["attempt"], q["node"], q["worker"])
                     for q in p["partitions"]][:len(truth)]
            if shown != truth:
                seen.problems.append(f"job {key}: /status {shown} but the API {truth}")
    for row in doc["gpu_workers"]:
        ws = statuses.get(row["node"])
        if ws is None or ws["metadata"]["resourceVersion"] != row["resource_version"]:
            continue
        seen.workers_compared += 1
        w = next(w for w in ws["status"]["workers"] if w["id"] == row["worker_id"])
        truth = (w["state"], None, None, None)
        if w["state"] == "proving":
            seen.proving_compared += 1
            truth = ("proving", f"{w['job']['namespace']}/{w['job']['name']}", w["partition"],
                     w.get("stage"))
        shown = (row["state"], row["current_job"], row["current_partition"], row["stage"])
        if shown != truth:
            seen.problems.append(f"worker {row['node']}/{row['worker_id']}: /status {shown} "
                                 f"but the API {truth}")


def test_status_tells_the_truth_while_a_real_job_runs(cluster: Cluster, namespace: str, nodes,
                                                      operator, status_server) -> None:
    kubelet = nodes(2, gpus=2)
    names = sorted(kubelet.nodes)
    operator(real_prover=True)
    server: StatusServer = status_server()
    custom = client.CustomObjectsApi(cluster.api)
    seen = Agreement()
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            doc = server.status(namespace=namespace)
            compare(doc, get_job(cluster, namespace, "truth"), _worker_statuses(custom, names),
                    seen)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        apply_job(cluster, namespace, proofjob("truth", circuitLog2=12))
        wait_job(cluster, namespace, "truth", "Succeeded", timeout=300)
    finally:
        stop.set()
        sampler.join()
    assert seen.problems == []
    assert seen.jobs_compared >= 5, seen
    assert seen.proving_compared >= 3, seen

    def settled() -> dict[str, Any] | None:
        doc = server.status(namespace=namespace)
        mine = [w for w in doc["gpu_workers"] if w["node"] in names]
        p = doc["pipelines"][0] if doc["pipelines"] else None
        done = p is not None and p["partitions_done"] == p["total_partitions"] == 16
        idle = len(mine) == 4 and all(w["state"] == "idle" for w in mine)
        return doc if done and idle else None

    doc = wait_for(settled, 10, "/status showing the finished job and idle workers")
    counters = doc["counters"]
    assert (counters["total_completed"], counters["total_failed"]) == (16, 0)
    assert counters["completed_by_kind"]["snap-update"] == 16
    assert counters["queue_depth"] == 0
    mine = [w for w in doc["gpu_workers"] if w["node"] in names]
    assert sum(w["completed"] for w in mine) == 16
    assert all(w["current_job"] is None for w in mine)
    assert all(w["busy_fraction_10m"] > 0 for w in mine)

    metrics = server.metrics()
    assert metrics[("kuzk_partitions", (("proof_kind", "snap-update"), ("state", "done")))] == 16
    assert metrics[("kuzk_partitions_completed_total", (("proof_kind", "snap-update"),))] == 16
    assert metrics[("kuzk_proofjobs", (("phase", "Succeeded"), ("proof_kind", "snap-update")))] == 1
    for w in mine:
        assert metrics[("kuzk_gpu_workers", (("node", w["node"]), ("state", "proving")))] == 0
        busy = metrics[("kuzk_gpu_busy_seconds_total", (("gpu_uuid", w["gpu_uuid"]),
                                                        ("node", w["node"]),
                                                        ("worker", w["worker_id"])))]
        assert busy == pytest.approx(w["busy_seconds_total"], abs=0.01)
    histogram = metrics[("kuzk_partition_duration_seconds_count",
                         (("proof_kind", "snap-update"), ("stage", "gpu")))]
    assert histogram == 16


def test_a_failed_job_shows_its_failed_partitions_and_none_pending(
        cluster: Cluster, namespace: str, nodes, plan, operator, status_server) -> None:
    nodes(1, gpus=4)
    plan.set(**{"2": {"exit": 2, "message": "sector 5678 is not sealed"}, "*": {"hold": True}})
    operator()
    server: StatusServer = status_server()
    apply_job(cluster, namespace, proofjob("doomed", partitions=4, circuitLog2=10))
    job = wait_job(cluster, namespace, "doomed", "Failed", timeout=120)

    def shown() -> dict[str, Any] | None:
        pipelines = server.status(namespace=namespace)["pipelines"]
        p = pipelines[0] if pipelines else None
        return p if p and p["phase"] == "Failed" and p["resource_version"] == job[
            "metadata"]["resourceVersion"] else None

    p = wait_for(shown, 10, "/status showing the failed job")
    states = {q["index"]: q["state"] for q in p["partitions"]}
    assert states[2] == "failed"
    assert not {"pending", "scheduled"} & set(states.values()), states
    failed = {q["index"]: q for q in p["partitions"] if q["state"] == "failed"}
    assert failed[2]["reason"] == "InvalidInput"
    assert "not sealed" in failed[2]["message"]
    assert all(q["reason"] for q in failed.values())
    truth = {q["index"]: (q["state"], q.get("reason")) for q in job["status"]["partitions"]}
    assert {i: (q["state"], q["reason"]) for i, q in enumerate(p["partitions"])} == truth
    assert p["partitions_failed"] == len(failed)
