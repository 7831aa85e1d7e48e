"""A GPU pod is bound by kube-scheduler, runs as a process with its downward-API env and GPU,
and its termination message and phase reach the API server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testenv.cluster import Cluster
from testenv.gpus import gpu_uuid
from testenv.waiting import wait_for
from tests.integration.helpers import gated, pod, wait_phase


def test_gpu_pod_is_scheduled_runs_and_reports(cluster: Cluster, namespace: str, nodes,
                                               tmp_path: Path) -> None:
    kubelet = nodes(1, gpus=2)
    node = next(iter(kubelet.nodes))
    (tmp_path / "p1.go").touch()
    cluster.core.create_namespaced_pod(namespace, gated("p1", tmp_path))

    got = wait_phase(cluster.core, namespace, "p1", "Succeeded")
    assert got.spec.node_name == node
    events = cluster.core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=p1,reason=Scheduled"
    ).items
    assert [e.reporting_component or e.source.component for e in events] == ["default-scheduler"]

    out = json.loads(cluster.kubectl("get", "pod", "p1", "-n", namespace, "-o", "json").stdout)
    assert out["status"]["phase"] == "Succeeded"
    state = out["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] == 0
    seen = json.loads(state["message"])
    assert seen["POD_NAME"] == "p1"
    assert seen["POD_NAMESPACE"] == namespace
    assert seen["POD_UID"] == out["metadata"]["uid"]
    assert seen["NODE_NAME"] == node
    assert seen["POD_IP"] == out["status"]["podIP"]
    assert seen["POD_IP"].startswith("127.") and seen["POD_IP"] != "127.0.0.1"
    assert seen["NVIDIA_VISIBLE_DEVICES"] in {gpu_uuid(node, 0), gpu_uuid(node, 1)}


def test_var_expansion_in_command_and_env(cluster: Cluster, namespace: str, nodes) -> None:
    nodes(1)
    script = "import os,sys; open(os.environ['TERMINATION_MESSAGE_PATH'],'w').write(sys.argv[1])"
    manifest = pod(
        "expand",
        [sys.executable, "-c", script, "$(GREETING)-$(POD_NAME)-$$(LITERAL)-$(UNDEFINED)"],
        container={"env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "WHO", "value": "kuzk"},
            {"name": "GREETING", "value": "hello-$(WHO)"},
        ]},
    )
    cluster.core.create_namespaced_pod(namespace, manifest)
    got = wait_phase(cluster.core, namespace, "expand", "Succeeded")
    message = got.status.container_statuses[0].state.terminated.message
    assert message == "hello-kuzk-expand-$(LITERAL)-$(UNDEFINED)"


def test_command_that_cannot_start_fails_the_pod(cluster: Cluster, namespace: str,
                                                  nodes) -> None:
    nodes(1)
    cluster.core.create_namespaced_pod(namespace, pod("bad", ["/nonexistent/kuzk-binary"]))
    got = wait_phase(cluster.core, namespace, "bad", "Failed")
    term = got.status.container_statuses[0].state.terminated
    assert term.reason == "StartError"
    assert "/nonexistent/kuzk-binary" in term.message
    # the kubelet survived: a following pod still runs
    cluster.core.create_namespaced_pod(namespace, pod("ok", [sys.executable, "-c", "pass"]))
    wait_phase(cluster.core, namespace, "ok", "Succeeded")


def test_failure_falls_back_to_log_tail(cluster: Cluster, namespace: str, nodes) -> None:
    nodes(1)
    script = "import sys; print('partition exploded'); sys.exit(3)"
    cluster.core.create_namespaced_pod(namespace, pod("crash", [sys.executable, "-c", script]))
    got = wait_phase(cluster.core, namespace, "crash", "Failed")
    term = got.status.container_statuses[0].state.terminated
    assert (term.exit_code, term.reason) == (3, "Error")
    assert "partition exploded" in term.message


def test_on_failure_restarts_are_counted(cluster: Cluster, namespace: str, nodes,
                                         tmp_path: Path) -> None:
    nodes(1)
    counter = tmp_path / "runs"
    script = (
        "import sys,pathlib; p=pathlib.Path(sys.argv[1]); "
        "n=len(p.read_text()) if p.exists() else 0; p.write_text('x'*(n+1)); "
        "sys.exit(0 if n >= 2 else 1)"
    )
    manifest = pod("flaky", [sys.executable, "-c", script, str(counter)],
                   restartPolicy="OnFailure")
    cluster.core.create_namespaced_pod(namespace, manifest)
    got = wait_phase(cluster.core, namespace, "flaky", "Succeeded", timeout=90)
    status = got.status.container_statuses[0]
    assert status.restart_count == 2
    assert status.last_state.terminated.exit_code == 1
    assert counter.read_text() == "xxx"


def test_a_late_running_event_never_restarts_a_finished_pod(cluster: Cluster, namespace: str,
                                                            nodes, tmp_path: Path) -> None:
    kubelet = nodes(1, gpus=1)
    cluster.core.create_namespaced_pod(namespace, gated("once", tmp_path))
    running = wait_phase(cluster.core, namespace, "once", "Running")
    stale = cluster.api.sanitize_for_serialization(running)
    (tmp_path / "once.go").touch()
    wait_phase(cluster.core, namespace, "once", "Succeeded")
    wait_for(lambda: not kubelet.runners, 30, "the runner to end")
    (tmp_path / "once.started").unlink()

    kubelet._on_pod(stale)  # what a lagging watch delivers
    assert not kubelet.runners
    assert not (tmp_path / "once.started").exists()
    assert kubelet.allocate_gpus(next(iter(kubelet.nodes)), "probe", 1) is not None
