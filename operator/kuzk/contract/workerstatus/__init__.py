"""The one typed model of a WorkerStatus, read and written by the prover, the operator and the
status server alike. Everything else about the resource sits beside it in this folder: a lane's
model (``lane_model``), what a lane means to the rest of kuzk (``lanes``), and the write
protocol: its pure decisions (``decisions``) and the guarded writes that make them (``writes``).

A WorkerStatus is one physical GPU of a node (``spec.nodeName``, ``spec.gpu``: a
``kuzk.contract.gpu.Gpu``), named ``<node>-<GPU id>`` (``worker_status_name``): its status lists
that one worker, so no object is written by more lanes than share one GPU. A WorkerStatus of a
release before per-GPU objects (``legacy``: no ``spec.gpu``, named after its node) lists every
GPU of its node; the model reads both alike, and the operator retires the old kind once its
lanes are gone. A GPU carries lanes (``kuzk.contract.workerstatus.lane_model.Lane``): the
partition pods the device plugin's time-slicing replicas put on it, in arrival order. At most
one lane holds the GPU phase (``holder``); the others start, synthesize, wait for the GPU or
commit on the CPU meanwhile. What the API server stores is the ``to_status`` form (camelCase,
the CRD's schema); everything else in kuzk reads it through ``parse``.

A worker's state follows from its lanes: ``gpu`` while a lane holds the GPU phase (the only
state counted as busy), ``waiting`` while lanes exist but none holds it (idle for a CPU
reason), ``idle`` with no lanes.

Two kinds of figures ride on the writes lanes make anyway, so reading them costs no write:
each lane's memory at its last write (``lane_model.Memory``: the prover's resident host memory
and the device memory it holds), and each GPU's time by mode (``kuzk.contract.gputime``). What
a lane means to the rest of kuzk (the partition state it shows, its rank for the GPU phase) is
``kuzk.contract.workerstatus.lanes``.

A lane writes only when its stage changes, never to say it is alive: whether its prover is
alive is its pod's to say (the prover container's readiness and liveness probes, ``api.
pod_not_live_since``). The object learns it from the operator, which marks a lane whose pod
stopped being live (``Lane.not_live_since``) and unmarks it when the pod is live again, in
the same guarded write as its sweep: one write per change of liveness, none in steady state.
So the object can tell the mode ``not_live`` from ``busy`` and ``cpu`` itself, and every
write, whoever makes it, accounts a GPU's time by the same rule (``gputime.gpu_mode``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from kuzk.contract import api
from kuzk.contract.gpu import Gpu
from kuzk.contract.gputime import GpuTime, gpu_mode, read_time, stamp
from kuzk.contract.workerstatus.lane_model import Lane, PodRef


class WorkerState(StrEnum):
    """What a physical GPU is doing, as derived from its lanes."""

    IDLE = "idle"
    WAITING = "waiting"
    GPU = "gpu"


# How many lanes a GPU's worker lists at most, workers a WorkerStatus lists at most (a legacy
# one lists every GPU of its node), and pods a worker remembers the sweep took the GPU phase
# from (``Worker.remember``): the CRD's limits.
MAX_LANES = 16
MAX_WORKERS = 64
PREVIOUS_PODS = 8


@dataclass(frozen=True)
class Holder:
    """The lane in its GPU phase: its pod, and since when it holds the GPU."""

    pod: PodRef
    since: datetime

    def as_status(self) -> dict[str, Any]:
        return {"pod": self.pod.as_status(), "since": stamp(self.since)}


@dataclass(frozen=True)
class Worker:
    """One physical GPU on the node."""

    id: str
    gpu: Gpu
    lanes: tuple[Lane, ...] = ()
    holder: Holder | None = None
    previous_pod_uids: tuple[str, ...] = ()
    completed: int = 0
    since: datetime | None = None
    gpu_time: GpuTime = field(default_factory=GpuTime)

    @property
    def state(self) -> WorkerState:
        if self.holder is not None:
            return WorkerState.GPU
        return WorkerState.WAITING if self.lanes else WorkerState.IDLE

    def mode(self) -> str:
        """The mode (``gputime.GPU_TIME_MODES``) this GPU is in, by its holder's and its
        lanes' liveness (``gputime.gpu_mode``)."""
        held = self.holding_lane()
        holder_live = None if self.holder is None else held is None or held.live
        return gpu_mode(holder_live, (lane.live for lane in self.lanes))

    def accounted(self, now: datetime) -> GpuTime:
        """Its GPU time up to ``now``, the time since it was last accounted added to the mode
        it was in (``GpuTime.accounted``)."""
        return self.gpu_time.accounted(self.mode(), now)

    def lane(self, pod_uid: str) -> Lane | None:
        return next((lane for lane in self.lanes if lane.pod.uid == pod_uid), None)

    def holding_lane(self) -> Lane | None:
        return None if self.holder is None else self.lane(self.holder.pod.uid)

    def queue(self) -> list[Lane]:
        """The lanes ready for the GPU phase and waiting for it, in the order they get it:
        higher priority first, then the one ready first, then arrival."""
        order = {lane.pod.uid: k for k, lane in enumerate(self.lanes)}
        waiting = [
            lane
            for lane in self.lanes
            if lane.ready_at is not None
            and (self.holder is None or lane.pod.uid != self.holder.pod.uid)
        ]
        return sorted(
            waiting,
            key=lambda lane: (-lane.priority, lane.ready_at, order[lane.pod.uid]),
        )

    def with_lane(self, lane: Lane) -> Worker:
        """This worker with ``lane`` replacing the lane of the same pod (or appended)."""
        if self.lane(lane.pod.uid) is None:
            return replace(self, lanes=(*self.lanes, lane))
        lanes = tuple(lane if old.pod.uid == lane.pod.uid else old for old in self.lanes)
        return replace(self, lanes=lanes)

    def without_lane(self, pod_uid: str) -> Worker:
        """This worker with the pod's lane gone, and the GPU phase with it if it held it."""
        holder = self.holder
        if holder is not None and holder.pod.uid == pod_uid:
            holder = None
        lanes = tuple(lane for lane in self.lanes if lane.pod.uid != pod_uid)
        return replace(self, lanes=lanes, holder=holder)

    def remember(self, pod_uid: str) -> Worker:
        """Remember a pod that was taken from the GPU phase while it held it: a later release
        about it is stale."""
        previous = [u for u in self.previous_pod_uids if u != pod_uid]
        return replace(self, previous_pod_uids=(pod_uid, *previous)[:PREVIOUS_PODS])

    def as_status(self) -> dict[str, Any]:
        worker: dict[str, Any] = {
            "id": self.id,
            "gpu": self.gpu.as_status(),
            "state": str(self.state),
            "lanes": [lane.as_status() for lane in self.lanes],
            "completed": self.completed,
        }
        if self.holder is not None:
            worker["holder"] = self.holder.as_status()
        if self.previous_pod_uids:
            worker["previousPodUIDs"] = list(self.previous_pod_uids)
        if self.since is not None:
            worker["since"] = stamp(self.since)
        if self.gpu_time.accounted_at is not None:
            worker["gpuTime"] = self.gpu_time.as_status()
        return worker


@dataclass(frozen=True)
class WorkerStatusModel:
    """The ``status`` of a WorkerStatus: its one GPU's worker (a legacy one: its node's)."""

    workers: tuple[Worker, ...] = ()
    stale_writes_rejected: int = 0
    updated_at: datetime | None = None

    def worker(self, worker_id: str) -> Worker | None:
        return next((w for w in self.workers if w.id == worker_id), None)

    def worker_of_gpu(self, uuid: str) -> Worker | None:
        return next((w for w in self.workers if w.gpu.uuid == uuid), None)

    def worker_of_pod(self, pod_uid: str) -> Worker | None:
        """The worker on which this pod has a lane."""
        return next((w for w in self.workers if w.lane(pod_uid) is not None), None)

    def with_worker(self, worker: Worker) -> WorkerStatusModel:
        if self.worker(worker.id) is None:
            return replace(self, workers=(*self.workers, worker))
        workers = tuple(worker if w.id == worker.id else w for w in self.workers)
        return replace(self, workers=workers)

    def as_status(self, now: datetime) -> dict[str, Any]:
        """The stored form, with the counts the printer columns show."""
        return {
            "workers": [w.as_status() for w in self.workers],
            "proving": sum(1 for w in self.workers if w.holder is not None),
            "lanes": sum(len(w.lanes) for w in self.workers),
            "workerCount": len(self.workers),
            "staleWritesRejected": self.stale_writes_rejected,
            "updatedAt": stamp(now),
        }


# --- reading the stored form -----------------------------------------------------------
def _worker(value: Mapping[str, Any], fallback: datetime) -> Worker:
    holder = value.get("holder")
    return Worker(
        id=str(value.get("id") or ""),
        gpu=Gpu.from_status(value.get("gpu")),
        lanes=tuple(Lane.from_status(lane, fallback) for lane in value.get("lanes") or []),
        holder=(
            Holder(PodRef.from_status(holder.get("pod")),
                   read_time(holder.get("since")) or fallback)
            if isinstance(holder, Mapping)
            else None
        ),
        previous_pod_uids=tuple(str(u) for u in value.get("previousPodUIDs") or []),
        completed=int(value.get("completed") or 0),
        since=read_time(value.get("since")),
        gpu_time=GpuTime.from_status(value.get("gpuTime")),
    )


def parse(status: Mapping[str, Any] | None, fallback: datetime | None = None) -> WorkerStatusModel:
    """The model of a stored ``status`` (a missing one is empty). Times that are absent fall
    back to ``fallback`` (default: the status's ``updatedAt``, else the epoch)."""
    status = status or {}
    updated = read_time(status.get("updatedAt"))
    base = fallback or updated or datetime.fromtimestamp(0, tz=UTC)
    return WorkerStatusModel(
        workers=tuple(_worker(w, base) for w in status.get("workers") or []),
        stale_writes_rejected=int(status.get("staleWritesRejected") or 0),
        updated_at=updated,
    )


def gpu_id(uuid: str) -> str:
    """The ID of the worker that drives the GPU ``uuid``: 8 hex digits of its SHA-256, the
    same on every write and every node, and safe in an object name whatever the UUID holds."""
    return hashlib.sha256(uuid.encode()).hexdigest()[:8]


def worker_status_name(node: str, uuid: str) -> str:
    """The name of the WorkerStatus of GPU ``uuid`` on ``node``: ``<node>-<gpu_id>`` (the
    node's name cut so that the whole stays a DNS subdomain)."""
    suffix = f"-{gpu_id(uuid)}"
    return node[: api.DNS_SUBDOMAIN_MAX - len(suffix)].rstrip(".-") + suffix


def legacy(worker_status: Mapping[str, Any]) -> bool:
    """Whether a WorkerStatus is of a release before per-GPU objects: one per node, named
    after it, without ``spec.gpu``."""
    return "gpu" not in (worker_status.get("spec") or {})


def node_of(worker_status: Mapping[str, Any]) -> str:
    """The node a WorkerStatus is on."""
    return str((worker_status.get("spec") or {}).get("nodeName")
               or (worker_status.get("metadata") or {}).get("name", ""))


__all__ = [
    "MAX_LANES",
    "MAX_WORKERS",
    "PREVIOUS_PODS",
    "Gpu",
    "Holder",
    "Worker",
    "WorkerState",
    "WorkerStatusModel",
    "gpu_id",
    "legacy",
    "node_of",
    "parse",
    "worker_status_name",
]
