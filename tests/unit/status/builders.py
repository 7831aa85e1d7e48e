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


def worker(wid: str, state: str = "idle", *, job: str | None = None, partition: int | None = None,
           stage: str | None = None, attempt: int = 1, namespace: str = "ns",
           completed: int = 0, since: float = T0, heartbeat: float | None = None,
           kind: str = "snap-update") -> dict[str, Any]:
    entry: dict[str, Any] = {"id": wid, "state": state, "gpu": {"uuid": f"GPU-{wid.lower()}"},
                             "completed": completed, "since": stamp(since)}
    if heartbeat is not None:
        entry["heartbeat"] = stamp(heartbeat)
    if state == "proving":
        entry |= {"job": {"namespace": namespace, "name": job, "uid": f"uid-{job}",
                          "proofKind": kind},
                  "partition": partition, "attempt": attempt,
                  "pod": {"name": f"{job}-p{partition}-a{attempt}",
                          "uid": f"pod-{job}-{partition}"}}
        if stage:
            entry["stage"] = stage
    return entry


def workerstatus(node: str, *workers: dict[str, Any], stale: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION, "kind": api.WORKERSTATUS_KIND,
        "metadata": {"name": node},
        "spec": {"nodeName": node},
        "status": {"workers": list(workers), "staleWritesRejected": stale},
    }


def node(name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": name},
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
