"""A lane's liveness comes from its pod, not from writes: a prover that hangs while it holds
its GPU's phase (SIGSTOP) turns its pod not ready, the operator marks its lane not live and
/status shows the GPU idle for that reason while the hung lane still holds it; the pod's
liveness probe then has the kubelet kill it, the operator's finalizer release frees the GPU
phase and the waiting lane holds it, within 90 s of the hang. A lane's pod deleted with
``--grace-period=0`` leaves no lane."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk.contract import api
from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.waiting import wait_for
from tests.integration.helpers import pod_ready
from tests.integration.operator.conftest import Plan, apply_job, proofjob, wait_job
from tests.integration.operator.test_worker_truth import Gates
from tests.integration.status.server import StatusServer

# Mostly waiting on the probes' periods: it runs on the long tests' worker (tests/conftest.py).
pytestmark = pytest.mark.worker("long")

HANDOVER_S = 90.0
log = logging.getLogger(__name__)


def _only_ws(cluster: Cluster, node: str) -> dict[str, Any]:
    """The WorkerStatus of the node's one GPU; empty until its first lane has made it."""
    listed = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, field_selector=f"spec.nodeName={node}")
    found = listed.get("items") or []
    assert len(found) <= 1, [ws["metadata"]["name"] for ws in found]
    return dict(found[0]) if found else {}


def _worker(cluster: Cluster, node: str) -> dict[str, Any]:
    ws = _only_ws(cluster, node)
    return dict(((ws.get("status") or {}).get("workers") or [{}])[0])


def _holder(worker: dict[str, Any]) -> str | None:
    return (worker.get("holder") or {}).get("pod", {}).get("uid")


def _holder_and_waiter(cluster: Cluster, node: str) -> tuple[str, str] | None:
    w = _worker(cluster, node)
    held = _holder(w)
    waiting = [lane["pod"]["uid"] for lane in w.get("lanes") or []
               if lane.get("readyAt") and lane["pod"]["uid"] != held]
    return (held, waiting[0]) if held and waiting else None


def _row(server: StatusServer, node: str) -> dict[str, Any] | None:
    return next((w for w in server.status()["gpu_workers"] if w["node"] == node), None)


def test_a_hung_holder_shows_not_live_then_loses_the_gpu_phase_within_90_s(
        cluster: Cluster, namespace: str, nodes, operator, status_server,
        tmp_path: Path) -> None:
    kubelet: ProcessKubelet = nodes(1, gpus=1, replicas=2)
    node = next(iter(kubelet.nodes))
    # The real prover, waiting in its GPU phase until the test lets it go on: the holder is
    # stopped once its pod is ready (a pod not yet ready is starting, not stuck).
    gates = Gates(tmp_path / "gates")
    gates.set(**{"*": ["gpu"]})
    operator(*gates.command())
    server: StatusServer = status_server()
    wait_for(server.ready, 60, "the status server")
    apply_job(cluster, namespace, proofjob("hang", partitions=2, circuitLog2=22))
    held, waiter = wait_for(lambda: _holder_and_waiter(cluster, node), 180,
                            "one lane holding the GPU phase, the other waiting", interval=0.02)
    runner = kubelet.runners[held]
    gates.set()  # the attempts to come go through
    wait_for(lambda: (runner.name, "gpu") in gates.waiting(), 60, "the holder at its gate")
    wait_for(lambda: pod_ready(cluster.core, namespace, runner.name), 60, "the holder's pod ready")
    proc = runner.containers[0].proc
    assert proc is not None
    os.killpg(proc.pid, signal.SIGSTOP)
    hung = time.monotonic()

    def shown_not_live() -> dict[str, Any] | None:
        row = _row(server, node)
        return row if row and row["idle_reason"] == "not_live" else None

    row = wait_for(shown_not_live, HANDOVER_S, "/status showing the GPU idle: lane not live")
    shown = time.monotonic() - hung
    assert _holder(_worker(cluster, node)) == held, "not live while the hung lane still holds"
    assert (row["state"], row["holder"]["pod"]) == ("gpu", runner.name)
    lanes = {lane["pod"]: lane for lane in row["lanes"]}
    assert lanes[runner.name]["not_live_secs"] is not None
    assert server.status()["fleet"]["gpus_proving"] == 0
    wait_for(lambda: _holder(_worker(cluster, node)) == waiter,
             HANDOVER_S - (time.monotonic() - hung), "the waiting lane holding the GPU phase")
    handed = time.monotonic() - hung
    log.info("hung holder: shown not live after %.1f s, GPU phase handed over after %.1f s",
             shown, handed)
    assert shown < handed <= HANDOVER_S, (shown, handed)
    killed = client.CoreV1Api(cluster.api).read_namespaced_pod_status(runner.name, namespace)
    terminated = killed.status.container_statuses[0].state.terminated
    assert killed.status.phase == "Failed" and terminated.exit_code == 137
    wait_for(lambda: (_row(server, node) or {}).get("idle_reason") != "not_live", 30,
             "/status no longer showing the GPU not live")
    gates.release(kubelet.runners[waiter].name, "gpu")
    job = wait_job(cluster, namespace, "hang", "Succeeded", timeout=300)
    assert sorted(p["attempt"] for p in job["status"]["partitions"]) == [1, 2]
    seconds = (_row(server, node) or {})["idle_seconds_total"]
    assert 0 < seconds["not_live"] < handed, seconds


def test_a_lanes_pod_deleted_with_grace_period_0_leaves_no_lane(
        cluster: Cluster, namespace: str, nodes, operator, plan: Plan) -> None:
    kubelet: ProcessKubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    plan.set(**{"*": {"hold": True, "claim": True}})
    operator()
    apply_job(cluster, namespace, proofjob("drop", partitions=1))

    def lane() -> dict[str, Any] | None:
        return next(iter(_worker(cluster, node).get("lanes") or []), None)

    pod = wait_for(lane, 120, "the stand-in's lane")["pod"]["name"]
    cluster.kubectl("delete", "pod", "-n", namespace, pod, "--grace-period=0", "--force",
                    "--wait=false")
    def gone() -> bool:
        now = lane()  # read once: the lane may go between two reads
        return now is None or now["pod"]["name"] != pod

    wait_for(gone, 60, "the deleted pod's lane gone")
    core = client.CoreV1Api(cluster.api)

    def gone() -> bool:
        try:
            core.read_namespaced_pod(pod, namespace)
        except ApiException as e:
            return e.status == 404
        return False

    wait_for(gone, 60, "the pod gone, its finalizer released")
    stale = _only_ws(cluster, node)["status"]
    assert stale.get("staleWritesRejected", 0) == 0, json.dumps(stale)
