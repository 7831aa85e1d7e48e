"""Probes run as the kubelet runs them: readiness drives Ready, a failing liveness probe
restarts the container and counts the restart, or, under ``restartPolicy: Never``, kills a
stopped process (SIGTERM, then SIGKILL after the probe's own grace period), says so in a
``Killing`` Event and fails its pod, even while a slow readiness probe runs; a pod not ready
yet at its start is not a pod that stopped being ready (its first Ready condition dates from
before its container started); a startup probe holds the others back until it passes, and an
httpGet asks the pod's own address."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from kuzk.contract import api
from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.probes import KILLING
from testenv.waiting import wait_for
from tests.integration.helpers import pod, pod_ready, read_pod


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
    assert not pod_ready(cluster.core, namespace, "r")
    flag.touch()
    wait_for(lambda: pod_ready(cluster.core, namespace, "r"), 30, "Ready after probe passes")
    flag.unlink()
    wait_for(lambda: not pod_ready(cluster.core, namespace, "r"), 30, "not Ready after probe fails")


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


def test_a_stopped_process_is_killed_by_its_liveness_probe_and_its_pod_fails(
        cluster: Cluster, namespace: str, nodes, tmp_path: Path) -> None:
    kubelet: ProcessKubelet = nodes(1)
    alive = tmp_path / "alive"
    alive.touch()
    liveness = {"exec": {"command": ["test", "-e", str(alive)]}, "periodSeconds": 1,
                "failureThreshold": 2, "terminationGracePeriodSeconds": 2}
    slow = {"exec": {"command": ["sleep", "3"]}, "periodSeconds": 1, "timeoutSeconds": 10}
    cluster.core.create_namespaced_pod(namespace, pod(
        "s", [sys.executable, "-c", "import time; time.sleep(600)"],
        terminationGracePeriodSeconds=60,
        container={"livenessProbe": liveness, "readinessProbe": slow}))
    running = wait_for(lambda: (p := read_pod(cluster.core, namespace, "s"))
                       and p.status.phase == "Running" and p, 60, "pod running")
    body = cluster.api.sanitize_for_serialization(running)
    assert api.pod_not_live_since(body) is None, "not ready yet is not stuck"
    wait_for(lambda: pod_ready(cluster.core, namespace, "s"), 30, "Ready after the slow probe")
    runner = next(r for r in kubelet.runners.values() if r.name == "s")
    proc = runner.containers[0].proc
    assert proc is not None
    os.killpg(proc.pid, signal.SIGSTOP)
    alive.unlink()
    stopped = time.monotonic()
    failed = wait_for(lambda: (p := read_pod(cluster.core, namespace, "s"))
                      and p.status.phase == "Failed" and p, 30, "pod failed")
    # Two failures a second apart, then 2 s of grace, not the pod's 60 s.
    assert time.monotonic() - stopped < 15
    assert failed.status.container_statuses[0].state.terminated.exit_code == 137
    events = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name=s,reason={KILLING}").items
    assert [e.message for e in events] == ["Container main failed liveness probe, will be"
                                           " restarted"]


# A pod's server on its own address: 200 on GET while FLAG exists, 503 without it.
ANSWER = """
import http.server, os, pathlib, sys
flag = pathlib.Path(sys.argv[1])
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if flag.exists() else 503)
        self.end_headers()
http.server.HTTPServer((os.environ["POD_IP"], 8080), Answer).serve_forever()
"""


def test_http_probes_ask_the_pod_on_its_own_address_once_its_startup_probe_passes(
        cluster: Cluster, namespace: str, nodes, tmp_path: Path) -> None:
    """The startup probe holds the readiness probe back until it passes (a real kubelet's
    order), and every httpGet goes to the pod's own address at its named port."""
    nodes(1)
    flag = tmp_path / "up"
    ask = {"httpGet": {"path": "/", "port": "web"}, "periodSeconds": 1, "failureThreshold": 1}
    cluster.core.create_namespaced_pod(namespace, pod(
        "h", [sys.executable, "-c", ANSWER, str(flag)], container={
            "ports": [{"name": "web", "containerPort": 8080}],
            "startupProbe": {**ask, "failureThreshold": 60},
            "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1}}))
    running = wait_for(lambda: (p := read_pod(cluster.core, namespace, "h"))
                       and p.status.phase == "Running" and p, 60, "pod running")
    assert running.status.pod_ip != "127.0.0.1"
    assert not pod_ready(cluster.core, namespace, "h"), "ready before its startup probe passed"
    flag.touch()
    wait_for(lambda: pod_ready(cluster.core, namespace, "h"), 30, "ready once started")
    p = read_pod(cluster.core, namespace, "h")
    assert p is not None and p.status.container_statuses[0].started
