"""Small builders and waits shared by the integration tests."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from testenv.waiting import wait_for

PROGRAMS = Path(__file__).parent / "programs"
DOWNWARD = [
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
]


def pod(name: str, command: list[str], *, gpus: int = 0, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "python:3.11",
        "command": command,
        "env": list(DOWNWARD),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container],
                 "terminationGracePeriodSeconds": 5, **spec},
    }


def gated(name: str, gate: Path, *, gpus: int = 1, code: int = 0, **spec: Any) -> dict[str, Any]:
    return pod(name, [sys.executable, str(PROGRAMS / "gated.py"), str(gate), str(code)],
               gpus=gpus, **spec)


def read_pod(core: client.CoreV1Api, ns: str, name: str) -> client.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, ns)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def pod_ready(core: client.CoreV1Api, ns: str, name: str) -> bool:
    """Whether the pod exists and its Ready condition is True."""
    p = read_pod(core, ns, name)
    return bool(p and any(c.type == "Ready" and c.status == "True"
                          for c in p.status.conditions or []))


def wait_phase(core: client.CoreV1Api, ns: str, name: str, *phases: str,
               timeout: float = 60) -> client.V1Pod:
    def check() -> client.V1Pod | None:
        p = read_pod(core, ns, name)
        return p if p is not None and p.status.phase in phases else None

    return wait_for(check, timeout, f"pod {ns}/{name} in phase {'/'.join(phases)}")


def wait_gone(core: client.CoreV1Api, ns: str, name: str, timeout: float = 60) -> None:
    wait_for(lambda: read_pod(core, ns, name) is None, timeout, f"pod {ns}/{name} deleted")
