"""ProverReporter, the prover's side of the protocol, against the API server: it is built from
the partition pod's env, finds its GPU, joins its GPU's lanes (creating the GPU's
WorkerStatus, after waiting for its Node if need be), reports stages, holds the GPU phase
only around the GPU work (waiting on a watch while another lane holds it), writes nothing
between stage changes (no heartbeat), leaves on the way out, and stops writing once its lane
was taken from it."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch
from prometheus_client.parser import text_string_to_metric_families

from kuzk.contract import api
from kuzk.contract.workerstatus import worker_status_name
from kuzk.contract.workerstatus.decisions import Acquired, Gpu
from kuzk.contract.workerstatus.writes import sweep
from kuzk_prover.reporter import ProverReporter
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.workers.conftest import delete_node, read_worker_status


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


def w0(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The one worker of WorkerStatus ``name``."""
    (worker,) = read_worker_status(api, name)["status"]["workers"]
    return dict(worker)


def lane0(api: client.ApiClient, name: str) -> dict[str, Any]:
    return dict(w0(api, name)["lanes"][0])


def test_a_proof_seen_through_the_reporter(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    env = pod_env(cluster, node, NVIDIA_VISIBLE_DEVICES="GPU-aaaa,GPU-bbbb")
    with ProverReporter.from_env(env) as reporter:
        name = worker_status_name(node, "GPU-aaaa")
        assert reporter.join() == name == reporter.worker_status
        worker = w0(admin, name)
        assert worker["gpu"] == {"uuid": "GPU-aaaa"}
        assert worker["state"] == "waiting", "a lane, no holder: idle for a CPU reason"
        lane = lane0(admin, name)
        assert (lane["stage"], lane["partition"], lane["attempt"]) == ("starting", 7, 2)
        assert lane["pod"] == {"name": "snap-p7-a2", "uid": env["POD_UID"]}
        assert lane["job"] == {
            "namespace": "provers",
            "name": "snap",
            "uid": env["KUZK_JOB_UID"],
            "proofKind": "snap-update",
        }
        reporter.on_stage("synth_done")
        assert lane0(admin, name)["stage"] == "starting", "synth_done is the acquire's write"
        # The phase's device memory is written by the acquire that takes it, before the
        # phase allocates it; the release writes what the pool holds then (none here).
        with reporter.gpu_phase(3 << 30):
            held = w0(admin, name)
            assert (held["state"], held["holder"]["pod"]["uid"]) == ("gpu", env["POD_UID"])
            assert (held["lanes"][0]["stage"], held["lanes"][0]["deviceMemoryBytes"]) == (
                "gpu", 3 << 30)
        after = w0(admin, name)
        assert (after["state"], after["lanes"][0]["stage"]) == ("waiting", "committing")
        assert after["lanes"][0]["deviceMemoryBytes"] == 0
        assert "holder" not in after
        assert "heartbeat" not in after["lanes"][0]
    done = w0(admin, name)
    assert (done["state"], done["completed"], done["lanes"]) == ("idle", 1, [])
    assert reporter.release("succeeded") is False, "released once"


def test_a_failure_inside_the_block_releases_without_completing(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    with (
        pytest.raises(RuntimeError, match="kernel"),
        ProverReporter.from_env(pod_env(cluster, node)) as reporter,
    ):
        name = reporter.join(Gpu("GPU-cccc", "NVIDIA H200", 1 << 37))
        with reporter.gpu_phase():
            raise RuntimeError("kernel failed")
    done = w0(admin, name)
    assert (done["state"], done["completed"], done["lanes"]) == ("idle", 0, [])
    assert "holder" not in done
    assert done["gpu"] == {"uuid": "GPU-cccc", "name": "NVIDIA H200", "memoryBytes": 1 << 37}


def test_without_a_gpu_the_worker_is_the_nodes_cpu(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    reporter = ProverReporter.from_env(pod_env(cluster, node))
    name = reporter.join()
    assert name == worker_status_name(node, f"CPU-{node}")
    assert w0(admin, name)["gpu"] == {"uuid": f"CPU-{node}", "name": "cpu"}
    assert reporter.release("failed") is True


def changes(admin: client.ApiClient, name: str, version: str, seconds: int) -> list[str]:
    """The resourceVersions WorkerStatus ``name`` took after ``version``, as a watch of it sees
    them for ``seconds`` (the watch's own timeout: the time is the observation)."""
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    seen = []
    for event in stream.stream(  # type: ignore[no-untyped-call]
            client.CustomObjectsApi(admin).list_cluster_custom_object, api.GROUP, api.VERSION,
            api.WORKERSTATUS_PLURAL, field_selector=f"metadata.name={name}",
            resource_version=version, timeout_seconds=seconds):
        seen.append(event["object"]["metadata"]["resourceVersion"])
    return seen


def test_a_lane_writes_nothing_between_its_stage_changes(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    """A lane synthesizing for longer than the 10 s heartbeat interval of former releases
    writes its stage once and then nothing: whether its prover is alive is its pod's
    probes' to say."""
    node = worker_status()
    with ProverReporter.from_env(pod_env(cluster, node)) as reporter:
        name = reporter.join()
        reporter.on_stage("synthesizing")
        version = read_worker_status(admin, name)["metadata"]["resourceVersion"]
        assert changes(admin, name, version, 15) == []
        assert reporter.acquire() is Acquired.GRANTED
        assert len(changes(admin, name, version, 1)) == 1, "the next stage is one write"
    assert w0(admin, name)["completed"] == 1


def etcd_reads(cluster: Cluster) -> float:
    """How many WorkerStatus reads kube-apiserver has made from etcd (its own counter)."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "etcd_requests_total" and s.labels.get("operation") == "get"
               and s.labels.get("resource") == api.WORKERSTATUS_PLURAL)


def test_after_its_join_a_lane_reads_from_the_watch_cache_and_sees_its_own_writes(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    """The join reads the latest from etcd; the acquire, the GPU release and the leave each
    read the API server's watch cache at the lane's last written version or later (no etcd
    read), and each decides on what the lane wrote before it. A write of another lane in
    between is seen too (the cache answers with its latest, not the version asked for): no
    409, whose retry would have read etcd."""
    node = worker_status()
    env = pod_env(cluster, node, NVIDIA_VISIBLE_DEVICES="GPU-eeee")
    reporter = ProverReporter.from_env(env)
    other = ProverReporter.from_env(
        pod_env(cluster, node, NVIDIA_VISIBLE_DEVICES="GPU-eeee", POD_NAME="snap-p9-a1"))
    name = reporter.join()
    before = etcd_reads(cluster)
    assert reporter.acquire() is Acquired.GRANTED
    other.join()
    reporter.release_gpu()
    assert reporter.release("succeeded") is True
    assert etcd_reads(cluster) == before + 1, "the other lane's join read etcd; this lane's none"
    worker = w0(admin, name)
    assert "holder" not in worker and worker["completed"] == 1
    assert [lane["pod"]["name"] for lane in worker["lanes"]] == ["snap-p9-a1"]
    assert read_worker_status(admin, name)["status"].get("staleWritesRejected", 0) == 0
    assert other.release("succeeded") is True


def test_join_waits_for_its_node(
    cluster: Cluster, admin: client.ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kuzk_prover.outage")
    node = f"late-{uuid.uuid4().hex[:8]}"
    reporter = ProverReporter.from_env(pod_env(cluster, node))
    try:
        with ThreadPoolExecutor(1) as pool:
            claimed = pool.submit(reporter.join, wait_s=30)
            wait_for(lambda: "not there yet" in caplog.text, 10, "a join on a missing node")
            client.CoreV1Api(admin).create_node({"metadata": {"name": node}})
            assert claimed.result(timeout=30) == worker_status_name(node, f"CPU-{node}")
        assert reporter.release("succeeded") is True
    finally:
        delete_node(admin, node)


def test_a_reporter_whose_lane_was_swept_stops_writing(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    node = worker_status()
    reporter = ProverReporter.from_env(pod_env(cluster, node))
    name = reporter.join()
    assert [r.pod.uid for r in sweep(admin, name, {}, datetime.now(UTC))] == [
        reporter.assignment.pod_uid
    ]
    reporter.on_stage("synthesizing")
    reporter.on_stage("synth_done")
    status = read_worker_status(admin, name)["status"]
    assert status["staleWritesRejected"] == 1, "one refused write, then silence"
    assert reporter.release("failed") is False, "already released by the sweep"
    assert read_worker_status(admin, name)["status"]["staleWritesRejected"] == 1


def test_a_waiting_lane_gets_the_gpu_phase_when_the_holder_gives_it_up(
    cluster: Cluster, admin: client.ApiClient, worker_status: Callable[[], str]
) -> None:
    """Two lanes on one GPU: the second waits on its watch while the first holds the GPU
    phase, and holds it promptly once the first gives it up (a watch event, not the watch's
    10 s timeout)."""
    node = worker_status()
    first = ProverReporter.from_env(pod_env(cluster, node, NVIDIA_VISIBLE_DEVICES="GPU-dddd"))
    second = ProverReporter.from_env(
        pod_env(cluster, node, NVIDIA_VISIBLE_DEVICES="GPU-dddd", POD_NAME="snap-p8-a1")
    )
    name = worker_status_name(node, "GPU-dddd")
    assert first.join() == second.join() == name
    held_at: list[float] = []

    def second_lane() -> None:
        with second.gpu_phase():
            held_at.append(time.monotonic())

    with first.gpu_phase():
        waiter = threading.Thread(target=second_lane)
        waiter.start()
        wait_for(
            lambda: any(lane.get("readyAt") for lane in w0(admin, name)["lanes"]),
            10,
            "the second lane waiting for the GPU phase",
        )
        assert w0(admin, name)["holder"]["pod"]["uid"] == first.assignment.pod_uid
        assert not held_at
        given_up = time.monotonic()
    waiter.join(timeout=30)
    assert held_at, "the second lane never held the GPU phase"
    assert held_at[0] - given_up < 5, "woken by the watch, not by its timeout"
    assert first.release("succeeded") and second.release("succeeded")
    done = w0(admin, name)
    assert (done["state"], done["completed"], done["lanes"]) == ("idle", 2, [])
    assert read_worker_status(admin, name)["status"]["staleWritesRejected"] == 0
