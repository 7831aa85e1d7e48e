"""Probes run as the kubelet runs them: readiness drives Ready, a failing liveness probe
restarts the container and counts the restart."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.integration.helpers import pod, read_pod
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for


def _ready(cluster: Cluster, ns: str, name: str) -> bool:
    p = read_pod(cluster.core, ns, name)
    return bool(p and any(c.type == "Ready" and c.status == "True"
                          for c in p.status.conditions or []))


def test_readiness_follows_exec_probe(cluster: Cluster, namespace: str, nodes,
                                      tmp_path: Path) -> None:
    nodes(1)
    flag = tmp_path / "ready"
    probe = {"exec": {"command": ["test", "-e", str(flag)]}, "periodSeconds": 1,
             "failureThreshold": 1}
    cluster.core.create_namespaced_pod(namespace, pod(
        "r", [sys.executable, "-c", "import time; time.sleep(600)"],
        container={"readinessProbe": probe}))
    wait_for(lambda: (p := read_pod(cluster.core, namespace, "r")) and p.status.phase == "Running",
             60, "pod running")
    assert not _ready(cluster, namespace, "r")
    flag.touch()
    wait_for(lambda: _ready(cluster, namespace, "r"), 30, "Ready after probe passes")
    flag.unlink()
    wait_for(lambda: not _ready(cluster, namespace, "r"), 30, "not Ready after probe fails")


def test_failing_liveness_probe_restarts_container(cluster: Cluster, namespace: str,
                                                   nodes) -> None:
    nodes(1)
    probe = {"tcpSocket": {"port": 1}, "periodSeconds": 1, "failureThreshold": 2}
    cluster.core.create_namespaced_pod(namespace, pod(
        "l", [sys.executable, "-c", "import time; time.sleep(600)"],
        restartPolicy="Always", container={"livenessProbe": probe}))

    def restarted() -> bool:
        p = read_pod(cluster.core, namespace, "l")
        return bool(p and p.status.container_statuses
                    and p.status.container_statuses[0].restart_count >= 1)

    wait_for(restarted, 60, "container restarted by its liveness probe")
