"""The process kubelet's nodes: ``NodeSpec`` (a GPU node and its time-slicing replicas), the
Node object and status it registers, and the node lease its heartbeat renews."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE
from testenv.gpus import gpu_uuid
from testenv.kubeapi import now

HEARTBEAT_SECONDS = 10.0
# A real kubelet reports its node's status at least every 5 min, and at once when it differs
# from what is stored; this one reports every minute, so a node the node lifecycle controller
# marked NotReady (leases that lapsed while the API server was away) comes back.
NODE_STATUS_SECONDS = 60.0


@dataclass
class NodeSpec:
    """A GPU node. With ``replicas`` N > 1 each physical GPU is advertised as N schedulable
    ``nvidia.com/gpu`` (the NVIDIA device plugin's time-slicing), and labelled as the GPU
    feature discovery labels a time-sliced node."""

    name: str
    gpus: int = 2
    cpu: str = "16"
    memory: str = "64Gi"
    pods: str = "110"
    labels: dict[str, str] = field(default_factory=dict)
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1:
            msg = f"node {self.name}: replicas must be at least 1, not {self.replicas}"
            raise ValueError(msg)

    def gpu_uuids(self) -> list[str]:
        return [gpu_uuid(self.name, i) for i in range(self.gpus)]

    def gpu_labels(self) -> dict[str, str]:
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(self.gpus),
            "nvidia.com/gpu.replicas": str(self.replicas),
            "nvidia.com/gpu.sharing-strategy": "time-slicing" if self.replicas > 1 else "none",
        }


def node_status(spec: NodeSpec, started: str) -> dict[str, Any]:
    """The node's status as its kubelet reports it: Ready since ``started``, capacity GPUs x
    replicas."""
    resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": spec.pods,
                 DEFAULT_GPU_RESOURCE: str(spec.gpus * spec.replicas), "ephemeral-storage": "100Gi"}
    t = now()
    cond = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady",
         "message": "process kubelet is posting ready status"},
        {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
        {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
        {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
    ]
    for c in cond:
        c.update(lastHeartbeatTime=t, lastTransitionTime=started)
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": cond,
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                      {"type": "Hostname", "address": spec.name}],
        "nodeInfo": {
            "architecture": "amd64", "operatingSystem": "linux", "osImage": "kuzk testenv",
            "kernelVersion": os.uname().release, "kubeletVersion": "process-kubelet",
            "kubeProxyVersion": "", "containerRuntimeVersion": "process://1",
            "machineID": spec.name, "systemUUID": spec.name, "bootID": spec.name,
        },
    }


def register_node(core: client.CoreV1Api, spec: NodeSpec, started: str) -> None:
    """Create the Node (or relabel the one that is there) and report its status."""
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **spec.gpu_labels(),
        **spec.labels,
    }
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": spec.name, "labels": labels}}
    try:
        core.create_node(body)
    except ApiException as e:
        if e.status != 409:
            raise
        core.patch_node(spec.name, {"metadata": {"labels": labels}})
    core.patch_node_status(spec.name, {"status": node_status(spec, started)})


def renew_lease(coord: client.CoordinationV1Api, spec: NodeSpec) -> None:
    """Renew the node's lease in ``kube-node-lease``, creating it the first time."""
    renew = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        coord.patch_namespaced_lease(spec.name, "kube-node-lease",
                                     {"spec": {"renewTime": renew}})
    except ApiException as e:
        if e.status != 404:
            raise
        coord.create_namespaced_lease("kube-node-lease", {
            "metadata": {"name": spec.name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": spec.name, "leaseDurationSeconds": 40,
                     "renewTime": renew},
        })
