"""ProverReporter, the prover's side of the protocol, against the API server: it is built from
the partition pod's env, finds its GPU, waits for the operator to create the WorkerStatus,
reports stages, keeps a rate-limited heartbeat, releases on the way out, and stops writing
once its assignment was taken from it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from kuzk.workers import Gpu, sweep
from kuzk_prover.reporter import ProverReporter
from tests.integration.workers.conftest import (
    create_worker_status,
    delete_worker_status,
    read_worker_status,
)
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for


def pod_env(cluster: Cluster, node: str, **extra: str) -> dict[str, str]:
    return {
        "KUBECONFIG": str(cluster.kubeconfig),
        "NODE_NAME": node,
        "POD_NAME": "snap-p7-a2",
        "POD_UID": str(uuid.uuid4()),
        "POD_NAMESPACE": "provers",
        "KUZK_JOB": "snap",
        "KUZK_JOB_UID": str(uuid.uuid4()),
        "KUZK_PARTITION": "7",
        "KUZK_ATTEMPT": "2",
        "KUZK_PROOF_KIND": "snap-update",
        **extra,
    }


def w0(api: client.ApiClient, node: str) -> dict[str, Any]:
    return dict(read_worker_status(api, node)["status"]["workers"][0])


def test_a_proof_seen_through_the_reporter(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    env = pod_env(cluster, node, NVIDIA_VISIBLE_DEVICES="GPU-aaaa,GPU-bbbb")
    with ProverReporter.from_env(env, heartbeat_interval=0.4) as reporter:
        assert reporter.claim() == "W0"
        held = w0(admin, node)
        assert held["gpu"] == {"uuid": "GPU-aaaa"}
        assert (held["state"], held["partition"], held["attempt"]) == ("proving", 7, 2)
        assert held["pod"] == {"name": "snap-p7-a2", "uid": env["POD_UID"]}
        assert held["job"] == {
            "namespace": "provers",
            "name": "snap",
            "uid": env["KUZK_JOB_UID"],
            "proofKind": "snap-update",
        }
        reporter.on_stage("synth_done")
        assert w0(admin, node)["stage"] == "synth_done"
        first = w0(admin, node)["heartbeat"]
        wait_for(lambda: w0(admin, node)["heartbeat"] != first, 10, "a heartbeat")
    done = w0(admin, node)
    assert (done["state"], done["completed"]) == ("idle", 1)
    assert reporter.release("succeeded") is False, "released once"


def test_a_failure_inside_the_block_releases_without_completing(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    with (
        pytest.raises(RuntimeError, match="kernel"),
        ProverReporter.from_env(pod_env(cluster, node)) as reporter,
    ):
        reporter.claim(Gpu("GPU-cccc", "NVIDIA H200", 1 << 37))
        raise RuntimeError("kernel failed")
    done = w0(admin, node)
    assert (done["state"], done["completed"]) == ("idle", 0)
    assert done["gpu"] == {"uuid": "GPU-cccc", "name": "NVIDIA H200", "memoryBytes": 1 << 37}


def test_without_a_gpu_the_worker_is_the_nodes_cpu(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    reporter = ProverReporter.from_env(pod_env(cluster, node))
    reporter.claim()
    assert w0(admin, node)["gpu"] == {"uuid": f"CPU-{node}", "name": "cpu"}
    # A heartbeat within the interval of the claim writes nothing.
    version = read_worker_status(admin, node)["metadata"]["resourceVersion"]
    reporter.heartbeat()
    assert read_worker_status(admin, node)["metadata"]["resourceVersion"] == version
    assert reporter.release("failed") is True


def test_claim_waits_for_the_operator_to_create_the_object(
    cluster: Cluster, admin: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kuzk_prover.reporter")
    node = f"late-{uuid.uuid4().hex[:8]}"
    reporter = ProverReporter.from_env(pod_env(cluster, node))
    try:
        with ThreadPoolExecutor(1) as pool:
            claimed = pool.submit(reporter.claim, wait_s=30)
            wait_for(lambda: "not there yet" in caplog.text, 10, "a claim on a missing object")
            create_worker_status(admin, node)
            assert claimed.result(timeout=30) == "W0"
        assert reporter.release("succeeded") is True
    finally:
        delete_worker_status(admin, node)


def test_a_reporter_whose_worker_was_swept_stops_writing(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    reporter = ProverReporter.from_env(pod_env(cluster, node))
    reporter.claim()
    assert [r.pod.uid for r in sweep(admin, node, {}, datetime.now(UTC))] == [
        reporter.assignment.pod_uid
    ]
    reporter.on_stage("gpu")
    reporter.on_stage("gpu")
    status = read_worker_status(admin, node)["status"]
    assert status["staleWritesRejected"] == 1, "one refused write, then silence"
    assert reporter.release("failed") is False, "already released by the sweep"
    assert read_worker_status(admin, node)["status"]["staleWritesRejected"] == 1
