"""The chart installed by real helm: the operator runs as pods under its own ServiceAccount
(RBAC real), two replicas elect one actor, a ProofJob is proven by the real prover, and
``helm uninstall`` leaves no partition pod that nothing can delete."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kuzk import api
from tests.integration.operator.conftest import apply_job, get_job, job_pods, proofjob, wait_job
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for

CHART = Path(__file__).resolve().parents[2] / "charts" / "kuzk"
BIN = Path(sys.executable).parent


def _install(cluster: Cluster, namespace: str) -> None:
    cluster.helm(
        "install", "kz", str(CHART), "-n", namespace, "--wait", "--timeout", "120s",
        "--set", "image.repository=kuzk-operator", "--set", "image.tag=test",
        "--set-json", f"command={json.dumps([str(BIN / 'kuzk')])}",
        "--set-json", f"prover.command={json.dumps([str(BIN / 'kuzk-prover')])}",
        "--set", "priorityClasses.create=false",
        "--set", "operator.peeringLifetime=5",
        "--set-json", f"operator.watchNamespaces={json.dumps([namespace])}",
    )


def _workers(cluster: Cluster, names: list[str]) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(cluster.api)
    out = []
    for n in names:
        ws = custom.get_cluster_custom_object(api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, n)
        out += (ws.get("status") or {}).get("workers") or []
    return out


@pytest.mark.usefixtures("kuzk_installed")
def test_chart_runs_a_proofjob_and_uninstalls_cleanly(cluster: Cluster, namespace: str,
                                                      nodes) -> None:
    kubelet = nodes(2, gpus=2)
    _install(cluster, namespace)
    deploy = client.AppsV1Api(cluster.api).read_namespaced_deployment("kz-kuzk-operator",
                                                                      namespace)
    assert deploy.status.available_replicas == 2

    apply_job(cluster, namespace, proofjob("chart-snap", partitions=4, circuitLog2=10))
    job = wait_job(cluster, namespace, "chart-snap", "Succeeded", timeout=180)
    assert job["status"]["succeeded"] == 4
    node_names = sorted(kubelet.nodes)
    workers = _workers(cluster, node_names)
    assert sum(w.get("completed", 0) for w in workers) == 4
    assert {w["state"] for w in workers} == {"idle"}

    # A job whose pods cannot be scheduled: they exist, carry the release finalizer, and
    # would stay undeletable once the operator is gone, but for the uninstall hook.
    stuck = proofjob("stuck", partitions=2, prover={"nodeSelector": {"kuzk.io/none": "x"}})
    apply_job(cluster, namespace, stuck)
    wait_for(lambda: len(job_pods(cluster, namespace, "stuck")) == 2, 60, "pending pods")
    assert all(api.FINALIZER in (p.metadata.finalizers or [])
               for p in job_pods(cluster, namespace, "stuck"))

    cluster.helm("uninstall", "kz", "-n", namespace, "--wait", "--timeout", "120s")
    assert all(not p.metadata.finalizers for p in job_pods(cluster, namespace, "stuck"))
    cluster.kubectl("delete", "pj", "stuck", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(lambda: not job_pods(cluster, namespace, "stuck"), 60, "pods gone after uninstall")
    assert get_job(cluster, namespace, "stuck") is None
    assert yaml.safe_load(cluster.kubectl("get", "crd", "proofjobs.kuzk.io", "-o", "yaml").stdout)
