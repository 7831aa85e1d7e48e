"""The status document: a pure function of the objects, what the watches have seen, and a clock.

No I/O and no clock of its own, so tests drive it with tables. Ordering is stable by
construction (jobs by creation time then namespace/name, workers by node then worker number),
job ids are never cut, and the queue counts partitions waiting for a GPU, not requests.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kuzk import api
from kuzk.api import DONE, FAILED, FINISHED_PHASES, PENDING, SCHEDULED, TERMINAL_STATES
from kuzk.status.history import STRIP_CELLS, WINDOW_S, History, WorkerTrack
from kuzk.status.objects import Job, Node, Pod, Worker, WorkerNode

QUEUED_STATES = (PENDING, SCHEDULED)
PodKey = tuple[str, str, int, int]


@dataclass(frozen=True)
class Filters:
    """``?namespace=`` and ``?kind=``: which pipelines and counters a document covers."""

    namespace: str | None = None
    kind: str | None = None

    def admits(self, namespace: str, kind: str) -> bool:
        return (self.namespace is None or namespace == self.namespace) and (
            self.kind is None or kind == self.kind
        )


@dataclass(frozen=True)
class Sync:
    synced: bool
    age_secs: float
    watch_restarts: int


@dataclass(frozen=True)
class Snapshot:
    """Everything the view holds, as the aggregation reads it."""

    jobs: Iterable[Job]
    worker_nodes: Iterable[WorkerNode]
    nodes: Iterable[Node]
    pods: Mapping[PodKey, Pod]
    history: History


def pod_key(namespace: str, job_label: str, partition: int, attempt: int) -> PodKey:
    return (namespace, job_label, partition, attempt)


def natural(text: str) -> tuple[tuple[int, Any], ...]:
    """Sort key that puts W2 before W10."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", text) if part)


def job_order(job: Job) -> tuple[str, str, str]:
    return (job.created, job.namespace, job.name)


def _secs(value: float) -> float:
    return round(max(value, 0.0), 3)


def _fraction(busy: float, span: float) -> float | None:
    return round(min(busy / span, 1.0), 4) if span > 0 else None


def is_shown(job: Job, now: float, keep_finished: float) -> bool:
    """Whether a job is still in ``pipelines``: unfinished, or finished within keep_finished."""
    if job.phase not in FINISHED_PHASES:
        return True
    return job.completion_time is None or now - job.completion_time <= keep_finished


def pipeline(job: Job, snap: Snapshot, now: float) -> dict[str, Any]:
    label = api.job_label_value(job.name)
    parts = []
    for p in job.partitions:
        reason, message = p.reason, p.message
        pod = snap.pods.get(pod_key(job.namespace, label, p.index, p.attempt))
        if p.state == PENDING and pod is not None and pod.unschedulable:
            reason, _, message = pod.unschedulable.partition(": ")
        if p.state == DONE:
            reason = message = None
        parts.append({
            "index": p.index,
            "state": p.state,
            "attempt": p.attempt,
            "node": p.node,
            "worker": p.worker,
            "synth_ms": p.synth_ms,
            "gpu_ms": p.gpu_ms,
            "stage_secs": None if p.state in TERMINAL_STATES
            else _opt(snap.history.partition_secs(job, p.index, now)),
            "reason": reason,
            "message": message,
        })
    return {
        "job_id": job.job_id,
        "namespace": job.namespace,
        "name": job.name,
        "uid": job.uid,
        "proof_kind": job.proof_kind,
        "phase": job.phase,
        "started_secs_ago": None if job.start_time is None else _secs(now - job.start_time),
        "finished_secs_ago": None if job.completion_time is None
        else _secs(now - job.completion_time),
        "total_partitions": len(job.partitions),
        "partitions_done": sum(p.state == DONE for p in job.partitions),
        "partitions_failed": sum(p.state == FAILED for p in job.partitions),
        "partitions": parts,
        "resource_version": job.resource_version,
    }


def _opt(value: float | None) -> float | None:
    return None if value is None else _secs(value)


def gpu_worker(wn: WorkerNode, w: Worker, snap: Snapshot, now: float) -> dict[str, Any]:
    node = wn.node
    track = snap.history.workers.get((node, w.id))
    proving = w.state == "proving"
    start = snap.history.window_start(now)
    busy = track.busy_between(start, now) if track else 0.0
    job_id = f"{w.job_namespace}/{w.job_name}" if proving and w.job_name else None
    since = w.since if w.since is not None else (track.proving_since if track else None)
    return {
        "node": node,
        "worker_id": w.id,
        "gpu_uuid": w.gpu_uuid,
        "gpu_name": w.gpu_name,
        "state": w.state,
        "stage": w.stage,
        "current_job": job_id,
        "current_proof_kind": w.proof_kind,
        "current_partition": w.partition,
        "attempt": w.attempt,
        "busy_secs": _secs(now - since) if proving and since is not None else 0.0,
        "stage_secs": _secs(now - track.stage_since) if proving and track else None,
        "heartbeat_age_secs": None if w.heartbeat is None else _secs(now - w.heartbeat),
        "completed": w.completed,
        "busy_fraction_10m": _fraction(busy, now - start),
        "busy_seconds_total": _secs(track.busy_total(now)) if track else 0.0,
        "busy_strip_10m": strip(track, snap.history.started, now),
        "resource_version": wn.resource_version,
    }


def strip(track: WorkerTrack | None, started: float, now: float) -> list[float | None]:
    """The last ten minutes in STRIP_CELLS slices, oldest first: the share of each slice the
    worker was proving; None for slices before the server started."""
    width = WINDOW_S / STRIP_CELLS
    cells: list[float | None] = []
    for i in range(STRIP_CELLS):
        begin = now - WINDOW_S + i * width
        end = begin + width
        if end <= started:
            cells.append(None)
            continue
        begin = max(begin, started)
        busy = track.busy_between(begin, end) if track else 0.0
        cells.append(round(min(busy / (end - begin), 1.0), 3) if end > begin else None)
    return cells


def workers(snap: Snapshot, now: float) -> list[dict[str, Any]]:
    rows = [(wn, w) for wn in snap.worker_nodes for w in wn.workers]
    rows.sort(key=lambda row: (natural(row[0].node), natural(row[1].id)))
    return [gpu_worker(wn, w, snap, now) for wn, w in rows]


def fleet(snap: Snapshot, gpu_rows: list[dict[str, Any]], now: float) -> dict[str, Any]:
    per_node: Counter[str] = Counter(row["node"] for row in gpu_rows)
    capacity = {n.name: n.gpus for n in snap.nodes if n.gpus > 0}
    names = set(capacity) | set(per_node)
    gpus = sum(max(capacity.get(name, 0), per_node[name]) for name in names)
    start = snap.history.window_start(now)
    busy = sum(track.busy_between(start, now) for track in snap.history.workers.values())
    return {
        "nodes": len(names),
        "gpus": gpus,
        "gpus_proving": sum(row["state"] == "proving" for row in gpu_rows),
        "busy_fraction_10m": _fraction(busy, gpus * (now - start)) if gpus else None,
    }


def counters(snap: Snapshot, jobs: list[Job], filters: Filters) -> dict[str, Any]:
    history = snap.history
    completed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for (namespace, kind), n in history.completed.items():
        if filters.admits(namespace, kind):
            completed[kind] += n
    for (namespace, kind), n in history.failed.items():
        if filters.admits(namespace, kind):
            failed[kind] += n
    kinds = sorted(set(api.PROOF_KINDS) | set(completed) | set(failed))
    return {
        "total_completed": sum(completed.values()),
        "total_failed": sum(failed.values()),
        "completed_by_kind": {kind: completed[kind] for kind in kinds},
        "failed_by_kind": {kind: failed[kind] for kind in kinds},
        "queue_depth": sum(p.state in QUEUED_STATES for j in jobs for p in j.partitions),
        "stale_writes_rejected": history.stale_total,
    }


def render(snap: Snapshot, *, now: float, sync: Sync, keep_finished: float,
           filters: Filters = Filters()) -> dict[str, Any]:
    """The ``/status`` document (DESIGN.md section 5)."""
    admitted = sorted((j for j in snap.jobs if filters.admits(j.namespace, j.proof_kind)),
                      key=job_order)
    gpu_rows = workers(snap, now)
    return {
        "uptime_secs": _secs(now - snap.history.started),
        "generated_at": round(now, 3),
        "view": {"synced": sync.synced, "age_secs": _secs(sync.age_secs),
                 "watch_restarts": sync.watch_restarts},
        "fleet": fleet(snap, gpu_rows, now),
        "pipelines": [pipeline(j, snap, now) for j in admitted
                      if is_shown(j, now, keep_finished)],
        "gpu_workers": gpu_rows,
        "counters": counters(snap, admitted, filters),
    }
