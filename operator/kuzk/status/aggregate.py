"""The status document: a pure function of the objects, what the watches have seen, and a clock.

No I/O and no clock of its own, so tests drive it with tables. Ordering is stable by
construction (jobs by creation time then namespace/name, workers by node then worker number),
job ids are never cut, and the queue counts partitions waiting for a GPU, not requests.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kuzk.contract import api, gputime, workerstatus
from kuzk.contract.api import (
    COMMITTING,
    DONE,
    FAILED,
    FINISHED_PHASES,
    GPU,
    PENDING,
    SCHEDULED,
    TERMINAL_STATES,
)
from kuzk.contract.ledger import GpuKey, Tally, gpu_key
from kuzk.contract.workerstatus import lane_model, lanes
from kuzk.status import document
from kuzk.status.history import BUSY, IDLE_REASONS, STRIP_CELLS, WINDOW_S, History, WorkerTrack
from kuzk.status.objects import Job, Node, Pod, WorkerNode, by_node

QUEUED_STATES = (PENDING, SCHEDULED)
PodKey = tuple[str, str, int, int]
LaneKey = tuple[str, str, int, int]  # a partition attempt: job namespace, job name, index, attempt


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
    counts: Tally
    gpu_seconds: Mapping[GpuKey, Mapping[str, float]] = field(default_factory=dict)


def lane_index(worker_nodes: Iterable[WorkerNode]
               ) -> dict[LaneKey, tuple[workerstatus.Worker, lane_model.Lane]]:
    """Every lane of every GPU by its partition attempt, with its GPU."""
    return {(lane.job.namespace, lane.job.name, lane.partition, lane.attempt): (w, lane)
            for wn in worker_nodes for w in wn.workers for lane in w.lanes}


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


def shown_state(state: str, lane: tuple[workerstatus.Worker, lane_model.Lane] | None) -> str:
    """A partition's state as the screen shows it: the job's, or where its attempt has a lane
    the lane's (its WorkerStatus is newer than the job's status, which the operator writes
    after it), so that ``gpu`` is shown only for the holder of a GPU's phase, and a partition
    the job still says is in ``gpu`` but whose lane gave the GPU up (or left) is
    ``committing``."""
    if state in TERMINAL_STATES:
        return state
    if lane is not None:
        worker, held = lane
        holding = worker.holder is not None and worker.holder.pod.uid == held.pod.uid
        return GPU if holding else lanes.PARTITION_STATE[held.stage]
    return COMMITTING if state == GPU else state


def pipeline(job: Job, lanes: Mapping[LaneKey, tuple[workerstatus.Worker, lane_model.Lane]],
             pods: Mapping[PodKey, Pod], since: Sequence[float | None],
             age: Callable[[float], Any]) -> document.Pipeline:
    """A job's line. ``since``: when each partition entered its state (``History``), by
    position; ``age`` turns a moment into its time field (``seconds_before(now)``, or the
    placeholder ``fragments`` fills in at each render)."""
    label = api.job_label_value(job.name)
    parts: list[document.Partition] = []
    for p, entered in zip(job.partitions, since, strict=True):
        state = shown_state(p.state, lanes.get((job.namespace, job.name, p.index, p.attempt)))
        reason, message = p.reason, p.message
        pod = pods.get(pod_key(job.namespace, label, p.index, p.attempt))
        if state == PENDING and pod is not None and pod.unschedulable:
            reason, _, message = pod.unschedulable.partition(": ")
        if state == DONE:
            reason = message = None
        parts.append({
            "index": p.index,
            "state": state,
            "attempt": p.attempt,
            "node": p.node,
            "worker": p.worker,
            "synth_ms": p.synth_ms,
            "gpu_ms": p.gpu_ms,
            "stage_secs": None if p.state in TERMINAL_STATES or entered is None
            else age(entered),
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
        "started_secs_ago": None if job.start_time is None else age(job.start_time),
        "finished_secs_ago": None if job.completion_time is None else age(job.completion_time),
        "total_partitions": len(job.partitions),
        "partitions_done": sum(p.state == DONE for p in job.partitions),
        "partitions_failed": sum(p.state == FAILED for p in job.partitions),
        "partitions": parts,
        "resource_version": job.resource_version,
    }


def seconds_before(now: float) -> Callable[[float], float]:
    """A moment's time field as of ``now``: seconds since it, never negative."""
    return lambda moment: _secs(now - moment)


def queued(job: Job) -> int:
    """The job's partitions waiting for a GPU: pending and scheduled."""
    return sum(p.state in QUEUED_STATES for p in job.partitions)


def _lane_row(lane: lane_model.Lane, now: float) -> document.Lane:
    ready = lane.ready_at.timestamp() if lane.ready_at is not None else None
    return {
        "pod": lane.pod.name,
        "job_id": f"{lane.job.namespace}/{lane.job.name}",
        "proof_kind": lane.job.proof_kind,
        "partition": lane.partition,
        "attempt": lane.attempt,
        "stage": str(lane.stage),
        "stage_secs": _secs(now - lane.since.timestamp()),
        "not_live_secs": (None if lane.not_live_since is None
                          else _secs(now - lane.not_live_since.timestamp())),
        "ready_secs": None if ready is None else _secs(now - ready),
        "host_memory_bytes": None if lane.memory is None else lane.memory.host_bytes,
        "device_memory_bytes": None if lane.memory is None else lane.memory.device_bytes,
    }


def memory(lanes: Iterable[lane_model.Lane]) -> document.Memory:
    """What lanes hold and do: synthesizing now, waiting for the GPU phase (ready, not
    holding it), and the host and device memory their provers measured at their last write."""
    lanes = list(lanes)
    measured = [lane.memory for lane in lanes if lane.memory is not None]
    return {
        "lanes_synthesizing": sum(lane.stage == lane_model.LaneStage.SYNTHESIZING
                                  for lane in lanes),
        "lanes_waiting": sum(lane.stage == lane_model.LaneStage.SYNTH_DONE
                             and lane.ready_at is not None for lane in lanes),
        "host_memory_bytes": sum(m.host_bytes for m in measured),
        "device_memory_bytes": sum(m.device_bytes for m in measured),
    }


def gpu_worker(wn: WorkerNode, w: workerstatus.Worker, snap: Snapshot,
               now: float) -> document.GpuWorker:
    node = wn.node
    track = snap.history.workers.get((node, w.id))
    start = snap.history.window_start(now)
    busy = track.busy_between(start, now) if track else 0.0
    held = w.holding_lane()
    holder: document.Holder | None = None if held is None or w.holder is None else {
        "pod": held.pod.name,
        "job_id": f"{held.job.namespace}/{held.job.name}",
        "proof_kind": held.job.proof_kind,
        "partition": held.partition,
        "attempt": held.attempt,
        "since_secs": _secs(now - w.holder.since.timestamp()),
    }
    seconds = snap.gpu_seconds.get(gpu_key(node, w), {})
    return {
        "node": node,
        "worker_id": w.id,
        "gpu_uuid": w.gpu.uuid or None,
        "gpu_name": w.gpu.name or None,
        "state": str(w.state),
        "holder": holder,
        "lanes": [_lane_row(lane, now) for lane in w.lanes],
        "idle_reason": None if track is None or track.mode == BUSY else track.mode,
        "stage": str(held.stage) if held else None,
        "current_job": holder["job_id"] if holder else None,
        "current_proof_kind": holder["proof_kind"] if holder else None,
        "current_partition": holder["partition"] if holder else None,
        "attempt": holder["attempt"] if holder else None,
        "busy_secs": holder["since_secs"] if holder else None,
        "stage_secs": _secs(now - held.since.timestamp()) if held else None,
        "completed": w.completed,
        "busy_fraction_10m": _fraction(busy, now - start),
        **memory(w.lanes),
        "busy_seconds_total": _secs(seconds.get(gputime.BUSY, 0.0)),
        "idle_seconds_total": {reason: _secs(seconds.get(reason, 0.0))
                               for reason in gputime.IDLE_MODES},
        "busy_strip_10m": strip(track, snap.history.started, now),
        "idle_strip_10m": idle_strip(track, snap.history.started, now),
        "resource_version": wn.resource_version,
    }


def _cells(started: float, now: float) -> list[tuple[float, float] | None]:
    """The last ten minutes in STRIP_CELLS slices, oldest first; None before the server
    started."""
    width = WINDOW_S / STRIP_CELLS
    cells: list[tuple[float, float] | None] = []
    for i in range(STRIP_CELLS):
        begin = now - WINDOW_S + i * width
        end = begin + width
        cells.append(None if end <= started else (max(begin, started), end))
    return cells


def strip(track: WorkerTrack | None, started: float, now: float) -> list[float | None]:
    """The share of each slice of the last ten minutes the GPU was in its GPU phase."""
    out: list[float | None] = []
    for cell in _cells(started, now):
        if cell is None or cell[1] <= cell[0]:
            out.append(None)
            continue
        busy = track.busy_between(*cell) if track else 0.0
        out.append(round(min(busy / (cell[1] - cell[0]), 1.0), 3))
    return out


def idle_strip(track: WorkerTrack | None, started: float, now: float) -> list[str | None]:
    """The reason the GPU was idle longest in each slice; None where it was never idle (or
    before the server started)."""
    out: list[str | None] = []
    for cell in _cells(started, now):
        if cell is None or track is None:
            out.append(None)
            continue
        idle = {reason: track.between(*cell, reason) for reason in IDLE_REASONS}
        reason = max(idle, key=lambda r: idle[r])
        out.append(reason if idle[reason] > 0 else None)
    return out


def workers(snap: Snapshot, now: float) -> list[document.GpuWorker]:
    rows = [(wn, w) for wn in snap.worker_nodes for w in wn.workers]
    rows.sort(key=lambda row: (natural(row[0].node), natural(row[1].id)))
    return [gpu_worker(wn, w, snap, now) for wn, w in rows]


def nodes(snap: Snapshot) -> list[document.Node]:
    """Per GPU node, what its lanes hold and do (``memory``), beside its allocatable memory."""
    allocatable = {n.name: n.memory_bytes for n in snap.nodes}
    grouped = by_node(snap.worker_nodes)
    return [{"node": node,
             "gpus": len(gpus),
             "lanes": sum(len(w.lanes) for w in gpus),
             **memory(lane for w in gpus for lane in w.lanes),
             "allocatable_memory_bytes": allocatable.get(node)}
            for node, gpus in sorted(grouped.items(), key=lambda item: natural(item[0]))]


def fleet(snap: Snapshot, gpu_rows: list[document.GpuWorker], now: float) -> document.Fleet:
    """Physical GPUs, by the one rule (``kuzk.contract.gpu.physical_gpus``: the node's GPU
    count label, else its WorkerStatuses' workers, else its GPUs divided by its replicas)."""
    per_node: Counter[str] = Counter(row["node"] for row in gpu_rows)
    nodes = {n.name: n for n in snap.nodes if n.gpus() > 0}
    names = set(nodes) | set(per_node)
    gpus = sum(nodes[name].gpus(per_node[name]) if name in nodes else per_node[name]
               for name in names)
    start = snap.history.window_start(now)
    busy = sum(track.busy_between(start, now) for track in snap.history.workers.values())
    return {
        "nodes": len(names),
        "gpus": gpus,
        "gpus_proving": sum(row["state"] == str(workerstatus.WorkerState.GPU)
                            and row["idle_reason"] is None for row in gpu_rows),
        "gpus_waiting": sum(row["state"] == str(workerstatus.WorkerState.WAITING)
                            for row in gpu_rows),
        "busy_fraction_10m": _fraction(busy, gpus * (now - start)) if gpus else None,
    }


def counters(counts: Tally, queue_depth: int, filters: Filters) -> document.Counters:
    completed: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for (namespace, kind), n in counts.completed.items():
        if filters.admits(namespace, kind):
            completed[kind] += n
    for (namespace, kind), n in counts.failed.items():
        if filters.admits(namespace, kind):
            failed[kind] += n
    kinds = sorted(set(api.PROOF_KINDS) | set(completed) | set(failed))
    return {
        "total_completed": sum(completed.values()),
        "total_failed": sum(failed.values()),
        "completed_by_kind": {kind: completed[kind] for kind in kinds},
        "failed_by_kind": {kind: failed[kind] for kind in kinds},
        "queue_depth": queue_depth,
        "stale_writes_rejected": counts.stale_writes_rejected,
    }


def summary(snap: Snapshot, now: float, sync: Sync) -> dict[str, Any]:
    """The document's fields that no filter or page changes, by name."""
    gpu_rows = workers(snap, now)
    return {
        "uptime_secs": _secs(now - snap.history.started),
        "generated_at": round(now, 3),
        "view": {"synced": sync.synced, "age_secs": _secs(sync.age_secs),
                 "watch_restarts": sync.watch_restarts},
        "fleet": fleet(snap, gpu_rows, now),
        "gpu_workers": gpu_rows,
        "nodes": nodes(snap),
    }


def render(snap: Snapshot, *, now: float, sync: Sync, keep_finished: float,
           filters: Filters = Filters()) -> document.StatusDocument:
    """The whole ``/status`` document (README.md, "The status endpoint"; ``document`` types
    it): the reference the served one (``fragments``) is assembled to equal."""
    admitted = sorted((j for j in snap.jobs if filters.admits(j.namespace, j.proof_kind)),
                      key=job_order)
    lanes = lane_index(snap.worker_nodes)
    age = seconds_before(now)
    parts = summary(snap, now, sync)
    return {
        "uptime_secs": parts["uptime_secs"],
        "generated_at": parts["generated_at"],
        "view": parts["view"],
        "fleet": parts["fleet"],
        "pipelines": [pipeline(j, lanes, snap.pods, snap.history.since(j), age)
                      for j in admitted if is_shown(j, now, keep_finished)],
        "gpu_workers": parts["gpu_workers"],
        "nodes": parts["nodes"],
        "counters": counters(snap.counts, sum(queued(j) for j in admitted), filters),
        "metadata": {"continue": None, "remaining_item_count": 0},
    }
