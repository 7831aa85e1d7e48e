"""The status server's reading of API objects: only the fields the screen shows.

A watch event carries the whole object; the view keeps these small frozen records instead, so
a fleet of a thousand jobs stays small in memory and an update that changes nothing the screen
shows (a node's heartbeat, a pod's IP) changes nothing in the view either. The words a fleet
repeats (namespaces, kinds, phases, states, nodes, workers, reasons) are kept once each
(``sys.intern``): read from JSON, every job would hold its own copy of each, some fifty strings
a job.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from kuzk.contract import api, gpu, workerstatus
from kuzk.contract.api import PENDING


@dataclass(frozen=True, slots=True)
class Partition:
    index: int
    state: str
    attempt: int
    node: str | None = None
    worker: str | None = None
    synth_ms: int | None = None
    gpu_ms: int | None = None
    started_at: float | None = None
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True, slots=True)
class Job:
    namespace: str
    name: str
    uid: str
    created: str
    proof_kind: str
    phase: str
    start_time: float | None
    completion_time: float | None
    partitions: tuple[Partition, ...]
    resource_version: str = ""

    @property
    def job_id(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class WorkerNode:
    """One WorkerStatus: one GPU of ``node`` (a legacy one: every GPU of its node), as the one
    model (``kuzk.contract.workerstatus``) reads it. A node's GPUs are the WorkerNodes of that node
    (``by_node``)."""

    node: str
    workers: tuple[workerstatus.Worker, ...]
    stale_writes_rejected: int
    resource_version: str = ""
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Node:
    """A Node, with what ``gpu.physical_gpus`` reads of it."""

    name: str
    gpu_resource: str
    labels: tuple[tuple[str, str], ...]
    advertised: str
    memory_bytes: int | None = None  # its allocatable memory

    def gpus(self, workers: int = 0) -> int:
        """Its physical GPUs (replicas not counted), ``workers`` those its WorkerStatuses list."""
        slim = {"metadata": {"labels": dict(self.labels)},
                "status": {"allocatable": {self.gpu_resource: self.advertised}}}
        return gpu.physical_gpus(slim, self.gpu_resource, workers)


@dataclass(frozen=True, slots=True)
class Pod:
    """A partition pod, kept for what the ProofJob cannot say: why it is not scheduled."""

    namespace: str
    job_label: str
    partition: int
    attempt: int
    unschedulable: str | None


def key(obj: Mapping[str, Any]) -> str:
    """The store key of a raw object: ``namespace/name`` or ``name``."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _word(value: Any) -> str | None:
    """``_str`` of a word the fleet repeats, kept once."""
    return sys.intern(value) if isinstance(value, str) and value else None


def job(obj: Mapping[str, Any]) -> Job:
    """A ProofJob. Partitions the operator has not reported yet are shown ``pending``."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    kind = str(spec.get("proofKind", ""))
    defaults = api.PROOF_KINDS.get(kind)
    total = (
        api.as_int(status.get("partitionCount"))
        or api.as_int(spec.get("partitions"))
        or (defaults.partitions if defaults else 0)
    )
    reported: dict[int, Partition] = {}
    for entry in status.get("partitions") or []:
        index = api.as_int(entry.get("index"))
        if index is None:
            continue
        reported[index] = Partition(
            index=index,
            state=sys.intern(str(entry.get("state", PENDING))),
            attempt=api.as_int(entry.get("attempt")) or 1,
            node=_word(entry.get("node")),
            worker=_word(entry.get("worker")),
            synth_ms=api.as_int(entry.get("synthMs")),
            gpu_ms=api.as_int(entry.get("gpuMs")),
            started_at=api.as_timestamp(entry.get("startedAt")),
            reason=_word(entry.get("reason")),
            message=_str(entry.get("message")),
        )
    count = max(total, max(reported, default=-1) + 1)
    partitions = tuple(reported.get(i) or Partition(i, PENDING, 1) for i in range(count))
    return Job(
        namespace=sys.intern(str(meta.get("namespace", ""))),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        created=sys.intern(str(meta.get("creationTimestamp", ""))),
        proof_kind=sys.intern(kind),
        phase=sys.intern(str(status.get("phase") or "Pending")),
        start_time=api.as_timestamp(status.get("startTime")),
        completion_time=api.as_timestamp(status.get("completionTime")),
        partitions=partitions,
        resource_version=str(meta.get("resourceVersion", "")),
    )


def by_node(worker_nodes: Iterable[WorkerNode]) -> dict[str, list[workerstatus.Worker]]:
    """Each node's workers (its GPUs), from the WorkerStatuses on it."""
    grouped: dict[str, list[workerstatus.Worker]] = {}
    for wn in worker_nodes:
        grouped.setdefault(wn.node, []).extend(wn.workers)
    return grouped


def worker_node(obj: Mapping[str, Any]) -> WorkerNode:
    """A WorkerStatus: its GPU as the status subresource says."""
    meta = obj.get("metadata") or {}
    model = workerstatus.parse(obj.get("status"))
    return WorkerNode(
        node=workerstatus.node_of(obj),
        workers=model.workers,
        stale_writes_rejected=model.stale_writes_rejected,
        resource_version=str(meta.get("resourceVersion", "")),
        uid=str(meta.get("uid", "")),
    )


def node(obj: Mapping[str, Any], gpu_resource: str = gpu.DEFAULT_GPU_RESOURCE) -> Node:
    """A Node: the labels and the amount of ``gpu_resource`` its GPU count comes from, and
    its allocatable memory."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    status = obj.get("status") or {}
    amounts = status.get("allocatable") or status.get("capacity") or {}
    kept = tuple(sorted((k, str(labels[k])) for k in
                        (gpu.GPU_COUNT_LABEL, gpu.GPU_REPLICAS_LABEL)
                        if k in labels))
    return Node(name=str((obj.get("metadata") or {}).get("name", "")),
                gpu_resource=gpu_resource, labels=kept,
                advertised=str(amounts.get(gpu_resource, "0")),
                memory_bytes=_bytes(amounts.get("memory")))


def _bytes(quantity: Any) -> int | None:
    """A memory quantity ("64Gi", "1000000Ki") in bytes; None when absent or unreadable."""
    if quantity is None:
        return None
    try:
        return int(parse_quantity(quantity))  # type: ignore[no-untyped-call]
    except ValueError:
        return None


def pod(obj: Mapping[str, Any]) -> Pod | None:
    """A partition pod, or None when its labels do not name a partition attempt."""
    meta = obj.get("metadata") or {}
    job_label = (meta.get("labels") or {}).get(api.LABEL_JOB)
    identity = api.pod_partition(obj)
    if not job_label or identity is None:
        return None
    partition, attempt = identity
    unschedulable = None
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = condition.get("reason") or "Unschedulable"
            unschedulable = f"{reason}: {condition.get('message') or 'no message'}"
    return Pod(
        namespace=str(meta.get("namespace", "")),
        job_label=job_label,
        partition=partition,
        attempt=attempt,
        unschedulable=unschedulable,
    )

