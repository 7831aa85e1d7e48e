"""The process kubelet rides out a kube-apiserver restart as a real kubelet does: pods that
finish while the API server is down, and pods bound just before it went down, all get their
final status (phase, exit code, termination message) reported once it is back, and the pod
watch resumes, so a pod created afterwards runs too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.waiting import wait_for
from tests.integration.helpers import gated, read_pod, wait_phase


def _bound(cluster: Cluster, namespace: str, name: str) -> bool:
    got = read_pod(cluster.core, namespace, name)
    return got is not None and bool(got.spec.node_name)


def _exited(kubelet: ProcessKubelet, name: str) -> bool:
    """Whether the kubelet has seen the pod's process exit (whatever it could report)."""
    with kubelet.lock:
        runner = next((r for r in kubelet.runners.values() if r.name == name), None)
    return runner is None or runner.containers[0].terminated is not None


def test_every_final_status_arrives_across_an_api_server_restart(
    cluster: Cluster, namespace: str, nodes: Any, tmp_path: Path
) -> None:
    kubelet = nodes(1, gpus=4)
    for name in ("early-a", "early-b"):
        cluster.core.create_namespaced_pod(namespace, gated(name, tmp_path))
    wait_for(
        lambda: all((tmp_path / f"{n}.started").exists() for n in ("early-a", "early-b")),
        60,
        "the early pods running",
    )
    # The late pods may start at once: their gates are open before they exist.
    for name in ("late-c", "late-d"):
        (tmp_path / f"{name}.go").touch()
        cluster.core.create_namespaced_pod(namespace, gated(name, tmp_path, code=3))
    wait_for(
        lambda: all(_bound(cluster, namespace, n) for n in ("late-c", "late-d")),
        60,
        "the late pods bound",
        interval=0.02,
    )
    with cluster.plane.apiserver_down():
        for name in ("early-a", "early-b"):
            (tmp_path / f"{name}.go").touch()
        wait_for(
            lambda: all(_exited(kubelet, n) for n in ("early-a", "early-b")),
            30,
            "the early pods exited while the API server is down",
        )

    for name, phase, code in [
        ("early-a", "Succeeded", 0),
        ("early-b", "Succeeded", 0),
        ("late-c", "Failed", 3),
        ("late-d", "Failed", 3),
    ]:
        got = wait_phase(cluster.core, namespace, name, phase, timeout=90)
        (container,) = got.status.container_statuses
        assert container.state.terminated.exit_code == code
        assert json.loads(container.state.terminated.message)["POD_NAME"] == name

    (tmp_path / "after.go").touch()
    cluster.core.create_namespaced_pod(namespace, gated("after", tmp_path))
    wait_phase(cluster.core, namespace, "after", "Succeeded", timeout=60)
