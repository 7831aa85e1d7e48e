"""Raw API objects in the shapes the API server sends (``kuzk.contract.crds``), for the tables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kuzk.contract import api, ledger
from kuzk.contract import workerstatus as ws
from kuzk.contract.gputime import GpuTime
from kuzk.contract.workerstatus import lane_model
from kuzk.contract.workerstatus.lanes import lane_priority

T0 = 1_800_000_000.0  # the tables' clock: seconds since the epoch


def stamp(t: float) -> str:
    return api.format_time(datetime.fromtimestamp(t, UTC))


def part(index: int, state: str, attempt: int = 1, **extra: Any) -> dict[str, Any]:
    return {"index": index, "state": state, "attempt": attempt, **extra}


def proofjob(name: str, *parts: dict[str, Any], namespace: str = "ns", kind: str = "snap-update",
             phase: str | None = "Running", created: float = T0, started: float | None = T0,
             finished: float | None = None, count: int | None = None,
             uid: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"partitions": list(parts)}
    if phase is not None:
        status["phase"] = phase
    if count is not None:
        status["partitionCount"] = count
    if started is not None:
        status["startTime"] = stamp(started)
    if finished is not None:
        status["completionTime"] = stamp(finished)
    return {
        "apiVersion": api.API_VERSION, "kind": api.PROOFJOB_KIND,
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                     "creationTimestamp": stamp(created)},
        "spec": {"proofKind": kind, "sector": {"miner": 1, "number": 2}},
        "status": status,
    }


def at(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def lane(job: str, partition: int, *, stage: str = "synthesizing", attempt: int = 1,
         namespace: str = "ns", kind: str = "snap-update", since: float = T0,
         not_live: float | None = None, ready: float | None = None) -> lane_model.Lane:
    """A lane (a partition pod on a GPU) of ``job``, in the one model; ``not_live``: marked
    not live since then."""
    return lane_model.Lane(
        pod=lane_model.PodRef(f"{job}-p{partition}-a{attempt}", f"pod-{job}-{partition}-{attempt}"),
        job=lane_model.JobRef(namespace, job, f"uid-{job}", kind),
        partition=partition, attempt=attempt, priority=lane_priority(kind, ""),
        stage=lane_model.LaneStage(stage), since=at(since),
        ready_at=None if ready is None else at(ready),
        not_live_since=None if not_live is None else at(not_live))


def worker(wid: str, state: str = "idle", *, job: str | None = None, partition: int | None = None,
           stage: str | None = None, attempt: int = 1, namespace: str = "ns",
           completed: int = 0, since: float = T0, not_live: float | None = None,
           kind: str = "snap-update", lanes: tuple[lane_model.Lane, ...] = (),
           uuid: str | None = None) -> ws.Worker:
    """A physical GPU, its time accounted up to ``since``. ``gpu``: a lane of ``job`` holding
    its GPU phase (stage ``stage``, default gpu) since ``since``; ``waiting``: that lane
    without holding it (default synthesizing); ``lanes``: more lanes after it, none
    holding."""
    own: list[lane_model.Lane] = []
    holder = None
    if state in ("gpu", "waiting") and job is not None and partition is not None:
        default = "gpu" if state == "gpu" else "synthesizing"
        own.append(lane(job, partition, stage=stage or default, attempt=attempt,
                        namespace=namespace, kind=kind, since=since, not_live=not_live))
        if state == "gpu":
            holder = ws.Holder(own[0].pod, at(since))
    return ws.Worker(id=wid, gpu=ws.Gpu(uuid or f"GPU-{wid.lower()}"),
                     lanes=(*own, *lanes), holder=holder, completed=completed, since=at(since),
                     gpu_time=GpuTime(accounted_at=at(since)))


def workerstatus(node: str, *workers: ws.Worker, stale: int = 0,
                 updated: float = T0, uid: str | None = None) -> dict[str, Any]:
    """A node's WorkerStatus, its status in the stored form (``WorkerStatusModel.as_status``)."""
    model = ws.WorkerStatusModel(workers=workers, stale_writes_rejected=stale)
    return {
        "apiVersion": api.API_VERSION, "kind": api.WORKERSTATUS_KIND,
        "metadata": {"name": node, "uid": uid or f"uid-ws-{node}"},
        "spec": {"nodeName": node},
        "status": model.as_status(at(updated)),
    }


def gpu_workerstatus(node: str, worker: ws.Worker, *, stale: int = 0,
                     updated: float = T0) -> dict[str, Any]:
    """The WorkerStatus of one GPU of ``node``: ``worker``, named as a lane's join names it."""
    name = ws.worker_status_name(node, worker.gpu.uuid)
    model = ws.WorkerStatusModel(workers=(worker,), stale_writes_rejected=stale)
    return {
        "apiVersion": api.API_VERSION, "kind": api.WORKERSTATUS_KIND,
        "metadata": {"name": name, "uid": f"uid-ws-{name}"},
        "spec": {"nodeName": node, "gpu": worker.gpu.as_status()},
        "status": model.as_status(at(updated)),
    }


def written(node: str, status: dict[str, Any] | None) -> dict[str, Any]:
    """A WorkerStatus whose status is what a write protocol decision stored."""
    return {
        "apiVersion": api.API_VERSION, "kind": api.WORKERSTATUS_KIND,
        "metadata": {"name": node},
        "spec": {"nodeName": node},
        "status": status or {},
    }


def node(name: str, gpus: int, labels: dict[str, str] | None = None,
         resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    """A Node advertising ``gpus`` of ``resource`` (replicas, under time-slicing)."""
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"capacity": {resource: str(gpus)}, "allocatable": {resource: str(gpus)}}}


def pod(job: str, partition: int, attempt: int = 1, *, namespace: str = "ns",
        unschedulable: str | None = None) -> dict[str, Any]:
    conditions = []
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": unschedulable})
    return {
        "metadata": {"name": api.pod_name(job, partition, attempt), "namespace": namespace,
                     "labels": {api.LABEL_JOB: api.job_label_value(job),
                                api.LABEL_PARTITION: str(partition),
                                api.LABEL_ATTEMPT: str(attempt),
                                api.LABEL_MANAGED_BY: api.MANAGER}},
        "status": {"phase": "Pending", "conditions": conditions},
    }


def ledger_map(*folded: dict[str, Any], at_time: float = T0) -> dict[str, Any]:
    """The ledger's ConfigMap after the operator folded ``folded`` (ProofJobs and
    WorkerStatuses, as the API server returned them when they were deleted)."""
    book = ledger.Ledger()
    for obj in folded:
        tally = (ledger.proofjob_tally(obj) if obj.get("kind") == api.PROOFJOB_KIND
                 else ledger.workerstatus_tally(obj))
        book.fold(obj["metadata"]["uid"], tally, at(at_time))
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kuzk-ledger", "namespace": "kuzk"}, "data": book.data()}

