"""The status server's reading of API objects: only the fields the screen shows.

A watch event carries the whole object; the view keeps these small frozen records instead, so
a fleet of a thousand jobs stays small in memory and an update that changes nothing the screen
shows (a node's heartbeat, a pod's IP) changes nothing in the view either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kuzk import api
from kuzk.api import PENDING

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Partition:
    index: int
    state: str
    attempt: int
    node: str | None = None
    worker: str | None = None
    synth_ms: int | None = None
    gpu_ms: int | None = None
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Worker:
    id: str
    state: str
    gpu_uuid: str | None = None
    gpu_name: str | None = None
    stage: str | None = None
    job_namespace: str | None = None
    job_name: str | None = None
    proof_kind: str | None = None
    partition: int | None = None
    attempt: int | None = None
    pod_uid: str | None = None
    since: float | None = None
    heartbeat: float | None = None
    completed: int = 0


@dataclass(frozen=True)
class WorkerNode:
    """One WorkerStatus: the GPU workers of one node."""

    node: str
    workers: tuple[Worker, ...]
    stale_writes_rejected: int
    resource_version: str = ""


@dataclass(frozen=True)
class Node:
    name: str
    gpus: int


@dataclass(frozen=True)
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


def _time(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return api.parse_time(text).timestamp()
    except ValueError:
        return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def job(obj: Mapping[str, Any]) -> Job:
    """A ProofJob. Partitions the operator has not reported yet are shown ``pending``."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    kind = str(spec.get("proofKind", ""))
    defaults = api.PROOF_KINDS.get(kind)
    total = (
        _int(status.get("partitionCount"))
        or _int(spec.get("partitions"))
        or (defaults.partitions if defaults else 0)
    )
    reported: dict[int, Partition] = {}
    for entry in status.get("partitions") or []:
        index = _int(entry.get("index"))
        if index is None:
            continue
        reported[index] = Partition(
            index=index,
            state=str(entry.get("state", PENDING)),
            attempt=_int(entry.get("attempt")) or 1,
            node=_str(entry.get("node")),
            worker=_str(entry.get("worker")),
            synth_ms=_int(entry.get("synthMs")),
            gpu_ms=_int(entry.get("gpuMs")),
            reason=_str(entry.get("reason")),
            message=_str(entry.get("message")),
        )
    count = max(total, max(reported, default=-1) + 1)
    partitions = tuple(reported.get(i) or Partition(i, PENDING, 1) for i in range(count))
    return Job(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        created=str(meta.get("creationTimestamp", "")),
        proof_kind=kind,
        phase=str(status.get("phase") or "Pending"),
        start_time=_time(status.get("startTime")),
        completion_time=_time(status.get("completionTime")),
        partitions=partitions,
        resource_version=str(meta.get("resourceVersion", "")),
    )


def worker_node(obj: Mapping[str, Any]) -> WorkerNode:
    """A WorkerStatus: its node's workers as the status subresource says."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    status = obj.get("status") or {}
    workers = []
    for entry in status.get("workers") or []:
        gpu, job_ref = entry.get("gpu") or {}, entry.get("job") or {}
        proving = entry.get("state") == "proving"
        workers.append(
            Worker(
                id=str(entry.get("id", "")),
                state=str(entry.get("state", "idle")),
                gpu_uuid=_str(gpu.get("uuid")),
                gpu_name=_str(gpu.get("name")),
                stage=_str(entry.get("stage")) if proving else None,
                job_namespace=_str(job_ref.get("namespace")) if proving else None,
                job_name=_str(job_ref.get("name")) if proving else None,
                proof_kind=_str(job_ref.get("proofKind")) if proving else None,
                partition=_int(entry.get("partition")) if proving else None,
                attempt=_int(entry.get("attempt")) if proving else None,
                pod_uid=_str((entry.get("pod") or {}).get("uid")) if proving else None,
                since=_time(entry.get("since")),
                heartbeat=_time(entry.get("heartbeat")),
                completed=_int(entry.get("completed")) or 0,
            )
        )
    return WorkerNode(
        node=str(spec.get("nodeName") or meta.get("name", "")),
        workers=tuple(workers),
        stale_writes_rejected=_int(status.get("staleWritesRejected")) or 0,
        resource_version=str(meta.get("resourceVersion", "")),
    )


def node(obj: Mapping[str, Any]) -> Node:
    """A Node and its GPU count (allocatable, else capacity)."""
    status = obj.get("status") or {}
    amounts = status.get("allocatable") or status.get("capacity") or {}
    try:
        gpus = int(str(amounts.get(GPU_RESOURCE, "0")))
    except ValueError:
        gpus = 0
    return Node(name=str((obj.get("metadata") or {}).get("name", "")), gpus=gpus)


def pod(obj: Mapping[str, Any]) -> Pod | None:
    """A partition pod, or None when its labels do not name a partition attempt."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    partition, attempt = labels.get(api.LABEL_PARTITION, ""), labels.get(api.LABEL_ATTEMPT, "")
    job_label = labels.get(api.LABEL_JOB)
    if not (job_label and partition.isdigit() and attempt.isdigit()):
        return None
    unschedulable = None
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            reason = condition.get("reason") or "Unschedulable"
            unschedulable = f"{reason}: {condition.get('message') or 'no message'}"
    return Pod(
        namespace=str(meta.get("namespace", "")),
        job_label=job_label,
        partition=int(partition),
        attempt=int(attempt),
        unschedulable=unschedulable,
    )

