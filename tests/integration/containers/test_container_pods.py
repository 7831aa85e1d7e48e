"""The process kubelet's container mode: a pod whose image is in the local store runs as a
real container with what a kubelet gives it (in-cluster credentials at the standard path, the
termination-message file, env, volumes), its securityContext honoured, probes on its pod IP,
restarts, and deletion through SIGTERM, the grace period and a kill."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testenv.cluster import Cluster
from testenv.runtime import Images
from testenv.waiting import wait_for
from tests.integration.helpers import DOWNWARD, read_pod, wait_gone, wait_phase

# The first test may build the images from a cold cache (minutes on a small machine).
# Containers through podman, mostly waiting on them: on the long tests' worker
# (tests/conftest.py).
pytestmark = [pytest.mark.timeout(1500), pytest.mark.worker("long")]

IN_CLUSTER = """
import json, os, sys
from kubernetes import client, config
config.load_incluster_config()
review = client.AuthenticationV1Api().create_self_subject_review(
    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
report = {
    "user": review.status.user_info.username,
    "pod": (review.status.user_info.extra or {}).get("authentication.kubernetes.io/pod-name"),
    "namespace": open(sa + "/namespace").read(),
    "argv": sys.argv[1:],
    "uid": os.getuid(), "gid": os.getgid(),
    "env": {k: os.environ.get(k) for k in
            ("KUBECONFIG", "TERMINATION_MESSAGE_PATH", "POD_IP", "GREETING", "HOSTNAME")},
}
open("/dev/termination-log", "w").write(json.dumps(report))
"""

HARDENED = """
import errno, json, os
out = {}
for path in ("/opt/kuzk/probe", "/tmp/probe", "/scratch/probe"):
    try:
        open(path, "w").write("x")
        out[path] = "written"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines())
out["CapEff"] = status["CapEff"].strip()
out["NoNewPrivs"] = status["NoNewPrivs"].strip()
out["uid"] = os.getuid()
open("/dev/termination-log", "w").write(json.dumps(out))
"""

ON_SIGTERM = """
import os, signal, sys, time
def stop(*_):
    open("/out/signal", "w").write("SIGTERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop if sys.argv[1] == "exit" else signal.SIG_IGN)
open("/out/started", "w").write(str(os.getpid()))
while True:
    time.sleep(1)
"""


def container_pod(name: str, image: str, command: list[str] | None = None,
                  **container: Any) -> dict[str, Any]:
    spec = {key: container.pop(key) for key in ("securityContext_pod", "volumes",
                                                "restartPolicy") if key in container}
    pod_sc = spec.pop("securityContext_pod", None)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": spec.get("restartPolicy", "Never"),
            "terminationGracePeriodSeconds": 5,
            "volumes": spec.get("volumes", []),
            "containers": [{
                "name": "main",
                "image": image,
                "env": list(DOWNWARD),
                "terminationMessagePolicy": "FallbackToLogsOnError",
                **({"command": command} if command is not None else {}),
                **container,
            }],
        },
    }
    if pod_sc:
        body["spec"]["securityContext"] = pod_sc
    return body


def terminated(cluster: Cluster, namespace: str, name: str, *phases: str) -> Any:
    pod = wait_phase(cluster.core, namespace, name, *phases, timeout=90)
    return pod.status.container_statuses[0].state.terminated


def test_in_cluster_config_env_and_termination_message(cluster: Cluster, namespace: str,
                                                       nodes, images: Images) -> None:
    nodes(1)
    manifest = container_pod(
        "incluster", images.operator, ["python3", "-c", IN_CLUSTER],
        args=["$(GREETING)", "$(POD_NAME)", "$$(LITERAL)"],
        env=[*DOWNWARD, {"name": "WHO", "value": "kuzk"},
             {"name": "GREETING", "value": "hello-$(WHO)"}],
        securityContext={"runAsUser": 10002, "runAsGroup": 10003},
    )
    cluster.core.create_namespaced_pod(namespace, manifest)
    term = terminated(cluster, namespace, "incluster", "Succeeded")
    assert term.exit_code == 0
    assert term.container_id.startswith("podman://")
    report = json.loads(term.message)
    assert report["user"] == f"system:serviceaccount:{namespace}:default"
    assert report["pod"] == ["incluster"]  # the token is bound to this pod
    assert report["namespace"] == namespace
    assert report["argv"] == ["hello-kuzk", "incluster", "$(LITERAL)"]
    assert (report["uid"], report["gid"]) == (10002, 10003)
    pod = read_pod(cluster.core, namespace, "incluster")
    assert report["env"] == {"KUBECONFIG": None, "TERMINATION_MESSAGE_PATH": None,
                             "POD_IP": pod.status.pod_ip, "GREETING": "hello-kuzk",
                             "HOSTNAME": "incluster"}


def test_args_alone_keep_the_image_entrypoint(cluster: Cluster, namespace: str, nodes,
                                              images: Images) -> None:
    nodes(1)
    cluster.core.create_namespaced_pod(
        namespace, container_pod("entry", images.operator, args=["no-such-command"]))
    term = terminated(cluster, namespace, "entry", "Failed")
    assert term.exit_code == 2  # argparse's answer: the image's `kuzk` ran with our args
    assert "kuzk: error" in term.message
    assert "'no-such-command'" in term.message


def test_run_as_non_root_refuses_a_root_image(cluster: Cluster, namespace: str, nodes,
                                              images: Images) -> None:
    nodes(1)
    manifest = container_pod("rooted", images.base, ["true"],
                             securityContext_pod={"runAsNonRoot": True})
    cluster.core.create_namespaced_pod(namespace, manifest)
    term = terminated(cluster, namespace, "rooted", "Failed")
    assert term.reason == "StartError"
    assert "container has runAsNonRoot and image will run as root" in term.message
    # the same image runs when nothing forbids root
    cluster.core.create_namespaced_pod(
        namespace, container_pod("root-ok", images.base, ["true"]))
    assert terminated(cluster, namespace, "root-ok", "Succeeded").exit_code == 0


def test_read_only_root_and_dropped_privileges(cluster: Cluster, namespace: str, nodes,
                                               images: Images) -> None:
    nodes(1)
    manifest = container_pod(
        "hardened", images.operator, ["python3", "-c", HARDENED],
        securityContext={"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                         "capabilities": {"drop": ["ALL"]}},
        securityContext_pod={"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        volumes=[{"name": "scratch", "emptyDir": {}}],
    )
    cluster.core.create_namespaced_pod(namespace, manifest)
    report = json.loads(terminated(cluster, namespace, "hardened", "Succeeded").message)
    assert report["/opt/kuzk/probe"] == "EROFS"
    assert report["/tmp/probe"] == "EROFS"
    assert report["/scratch/probe"] == "written"
    assert int(report["CapEff"], 16) == 0
    assert report["NoNewPrivs"] == "1"
    assert report["uid"] == 10001  # the image's user


def _ready(cluster: Cluster, namespace: str, name: str) -> bool:
    pod = read_pod(cluster.core, namespace, name)
    statuses = pod.status.container_statuses if pod else None
    return bool(statuses and statuses[0].ready)


def test_probes_reach_the_pod_ip_and_run_inside(cluster: Cluster, namespace: str, nodes,
                                                images: Images) -> None:
    nodes(1)
    server = container_pod(
        "server", images.operator,
        ["python3", "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
        readinessProbe={"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1},
        restartPolicy="Always",
    )
    # /scratch/ready exists only inside the container: an exec probe run anywhere else fails.
    inside = container_pod(
        "inside", images.operator, ["sh", "-c", "touch /scratch/ready && exec sleep 600"],
        readinessProbe={"exec": {"command": ["test", "-e", "/scratch/ready"]},
                        "periodSeconds": 1},
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        volumes=[{"name": "scratch", "emptyDir": {}}],
        restartPolicy="Always",
    )
    cluster.core.create_namespaced_pod(namespace, server)
    cluster.core.create_namespaced_pod(namespace, inside)
    wait_for(lambda: _ready(cluster, namespace, "server"), 60, "server Ready through httpGet")
    wait_for(lambda: _ready(cluster, namespace, "inside"), 60, "inside Ready through exec")


def test_restarts_are_counted(cluster: Cluster, namespace: str, nodes, images: Images) -> None:
    nodes(1)
    flaky = container_pod(
        "flaky", images.operator,
        ["sh", "-c", "test -e /scratch/once || { touch /scratch/once; exit 3; }"],
        volumeMounts=[{"name": "scratch", "mountPath": "/scratch"}],
        volumes=[{"name": "scratch", "emptyDir": {}}],
        restartPolicy="OnFailure",
    )
    cluster.core.create_namespaced_pod(namespace, flaky)
    pod = wait_phase(cluster.core, namespace, "flaky", "Succeeded", timeout=90)
    status = pod.status.container_statuses[0]
    assert status.restart_count == 1
    assert status.last_state.terminated.exit_code == 3


@pytest.mark.parametrize("on_term", ["exit", "ignore"])
def test_deletion_sends_sigterm_then_kills(cluster: Cluster, namespace: str, nodes,
                                           images: Images, tmp_path: Path, on_term: str) -> None:
    nodes(1)
    tmp_path.chmod(0o777)
    manifest = container_pod(
        "term", images.operator, ["python3", "-c", ON_SIGTERM, on_term],
        volumeMounts=[{"name": "out", "mountPath": "/out"}],
        volumes=[{"name": "out", "hostPath": {"path": str(tmp_path), "type": "Directory"}}],
    )
    manifest["spec"]["terminationGracePeriodSeconds"] = 2
    cluster.core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: (tmp_path / "started").exists(), 60, "the container's SIGTERM handler")
    cluster.core.delete_namespaced_pod("term", namespace)
    wait_gone(cluster.core, namespace, "term", timeout=30)
    if on_term == "exit":
        assert (tmp_path / "signal").read_text() == "SIGTERM"
    else:
        assert not (tmp_path / "signal").exists()  # ignored, then killed after the grace
