"""Raw API objects in the shapes the API server sends (DESIGN.md section 2), for the tables."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kuzk import api

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


def lane(job: str, partition: int, *, stage: str = "synthesizing", attempt: int = 1,
         namespace: str = "ns", kind: str = "snap-update", since: float = T0,
         heartbeat: float | None = None, ready: float | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pod": {"name": f"{job}-p{partition}-a{attempt}", "uid": f"pod-{job}-{partition}"},
        "job": {"namespace": namespace, "name": job, "uid": f"uid-{job}", "proofKind": kind},
        "partition": partition, "attempt": attempt, "priority": 0, "stage": stage,
        "since": stamp(since), "heartbeat": stamp(since if heartbeat is None else heartbeat),
    }
    if ready is not None:
        entry["readyAt"] = stamp(ready)
    return entry


def worker(wid: str, state: str = "idle", *, job: str | None = None, partition: int | None = None,
           stage: str | None = None, attempt: int = 1, namespace: str = "ns",
           completed: int = 0, since: float = T0, heartbeat: float | None = None,
           kind: str = "snap-update", lanes: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    """A GPU in the stored layout. ``proving``: a lane of ``job`` holding the GPU phase
    (stage ``stage``, default gpu); ``waiting``: that lane without holding it (default
    synthesizing); ``lanes``: more lanes, none holding."""
    entry: dict[str, Any] = {"id": wid, "gpu": {"uuid": f"GPU-{wid.lower()}"},
                             "completed": completed, "since": stamp(since)}
    all_lanes = list(lanes)
    if state in ("proving", "waiting") and job is not None and partition is not None:
        default = "gpu" if state == "proving" else "synthesizing"
        own = lane(job, partition, stage=stage or default, attempt=attempt,
                   namespace=namespace, kind=kind, since=since, heartbeat=heartbeat)
        all_lanes.insert(0, own)
        if state == "proving":
            entry["holder"] = {"pod": own["pod"], "since": stamp(since)}
    entry["lanes"] = all_lanes
    entry["state"] = "gpu" if "holder" in entry else "waiting" if all_lanes else "idle"
    return entry


def workerstatus(node: str, *workers: dict[str, Any], stale: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION, "kind": api.WORKERSTATUS_KIND,
        "metadata": {"name": node},
        "spec": {"nodeName": node},
        "status": {"workers": list(workers), "staleWritesRejected": stale},
    }


def node(name: str, gpus: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                       "allocatable": {"nvidia.com/gpu": str(gpus)}}}


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
