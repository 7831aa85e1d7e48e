"""The WorkerStatus write protocol: every write about a GPU worker is a compare-and-swap, and
this module is its decisions (pure ``decide_*`` functions, unit-tested without a cluster);
``kuzk.contract.workerstatus.writes`` makes the writes.

The engine kuzk replaces kept worker state in memory, and a late finalizer marked a worker idle
while it was proving the next partition. Here a worker's state lives in its GPU's
WorkerStatus (the typed model ``kuzk.contract.workerstatus``: one object per physical GPU, named
``<node>-<GPU id>``), and every write names the pod it is about and is made the same way: GET
the object, decide from what it says, then replace ``/status`` carrying the
``resourceVersion`` that was read; on 409 read and decide again. Only the lanes of one GPU
write one object, so a write conflicts only with the lanes it shares its GPU with. A write
about something the pod no longer holds is stale: it is refused, logged, and counted in the
WorkerStatus's ``status.staleWritesRejected``, which the status server sums into
``kuzk_stale_worker_writes_rejected_total`` on its ``/metrics``.

A GPU carries lanes (pods on the same GPU through time-slicing replicas); one lane at most
holds its GPU phase. A prover joins its GPU's lanes when it starts (creating the GPU's
WorkerStatus if it is the first: only the prover knows which GPU it was given), reports its
stages, acquires the GPU phase when its synthesis is done (waiting on a watch of the object
while another lane holds it), gives it up as soon as its GPU work is done, and leaves when it
exits. A lane writes only when it moves: no write says that it is alive. The operator's
finalizer release and its sweep remove the lane (and the GPU phase with it) of a pod that is
gone or ended, and only of that pod; the sweep also marks the lanes whose pod is running but
not live (its prover's probes fail: ``api.pod_not_live_since``), so the object tells a hung
lane from a working one without a write from the lane.

Choices the callers rely on:

* An acquire is granted only when no lane holds the GPU phase and no waiting lane comes
  before this one (higher priority, then the one ready first). A holder is only ever taken
  away by its own GPU release or leave, the finalizer release of its pod, or the sweep when
  its pod is gone: the prover cannot see pods, the operator can. A hung holder keeps it until
  its pod's liveness probe has the prover killed: then the pod ends and the finalizer release
  frees the GPU phase.
* The prover's writes (by ``Assignment``, to the WorkerStatus its join named) are about a
  lane it joined: a stage or leave of a lane that is gone, and a GPU release of a lane that
  does not hold the GPU phase (another lane took it since), are stale. The operator's
  finalizer release (by ``PodRef`` and node) knows nothing of lanes or GPUs: it writes the
  node's WorkerStatus that has the pod's lane, or that remembers the sweep took the GPU phase
  from that pod (``previousPodUIDs``: stale); for a pod without either it is nothing to do,
  neither written nor counted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

from kuzk.contract.api import WorkerOutcome
from kuzk.contract.workerstatus import (
    PREVIOUS_PODS,
    Gpu,
    Holder,
    Worker,
    WorkerStatusModel,
    gpu_id,
    parse,
)
from kuzk.contract.workerstatus.lane_model import JobRef, Lane, LaneStage, Memory, PodRef
from kuzk.contract.workerstatus.lanes import (
    ACQUIRE_STAGE,
    JOIN_STAGES,
    REPORTED_STAGES,
    lane_priority,
)

T = TypeVar("T")

__all__ = [
    "PREVIOUS_PODS",
    "Acquired",
    "Assignment",
    "Gpu",
    "Memory",
    "PodRef",
    "Released",
    "WriteDecision",
]


@dataclass(frozen=True)
class Assignment:
    """One attempt of one partition, on one pod. The pod UID is the identity: a retried
    partition (same job and partition, next attempt) is a different assignment. Its lane's
    rank for the GPU phase is ``lanes.lane_priority`` of its proof kind and its job's
    PriorityClass (empty where the pod's env does not say)."""

    job_namespace: str
    job_name: str
    job_uid: str
    proof_kind: str
    partition: int
    attempt: int
    pod_name: str
    pod_uid: str
    priority_class: str = ""

    @property
    def pod(self) -> PodRef:
        return PodRef(self.pod_name, self.pod_uid)

    @property
    def job(self) -> JobRef:
        return JobRef(self.job_namespace, self.job_name, self.job_uid, self.proof_kind)


class Acquired(StrEnum):
    """What an ``acquire`` came to: the GPU phase is this lane's, the lane waits for it, or
    the lane is gone (stale: the sweep or the finalizer removed it)."""

    GRANTED = "granted"
    WAITING = "waiting"
    GONE = "gone"


@dataclass(frozen=True)
class Released:
    """A lane removed by a sweep."""

    worker_id: str
    pod: PodRef
    outcome: WorkerOutcome


@dataclass(frozen=True)
class WriteDecision(Generic[T]):
    """What a write decided: the new status (None: nothing to write), the caller's result, the
    refused operation when the write is stale, and lines to log once the write has landed."""

    status: dict[str, Any] | None
    result: T
    stale: str | None = None
    notes: tuple[str, ...] = ()


def describe(who: Assignment | PodRef) -> str:
    """An assignment or pod as a log line names it."""
    if isinstance(who, PodRef):
        return f"pod {who.name} ({who.uid})"
    return (
        f"{who.job_namespace}/{who.job_name} partition {who.partition} attempt {who.attempt}"
        f" pod {who.pod_name} ({who.pod_uid})"
    )


def _describe_worker(worker: Worker) -> str:
    if not worker.lanes:
        return f"{worker.id} idle"
    holder = worker.holder.pod.name if worker.holder is not None else "none"
    lanes = ", ".join(
        f"{lane.job.namespace}/{lane.job.name} P{lane.partition} pod {lane.pod.name}"
        f" ({lane.pod.uid}) {lane.stage}"
        for lane in worker.lanes
    )
    return f"{worker.id} GPU phase held by {holder}; lanes: {lanes}"


def _write(
    model: WorkerStatusModel, old: WorkerStatusModel, now: datetime, stale: int = 0
) -> dict[str, Any]:
    """The stored status of ``model``; a worker whose state changed since ``old`` gets
    ``since`` = now. Every worker's GPU time is accounted up to now by the mode it was in
    ``old`` (a new worker starts counting now): the write that changes a GPU's mode closes
    the time it spent in the previous one."""
    workers = []
    for worker in model.workers:
        before = old.worker(worker.id)
        if before is None or before.state != worker.state or worker.since is None:
            worker = replace(worker, since=now)
        workers.append(replace(worker, gpu_time=(before or worker).accounted(now)))
    changed = replace(
        model,
        workers=tuple(workers),
        stale_writes_rejected=model.stale_writes_rejected + stale,
    )
    return changed.as_status(now)


def _refuse(
    model: WorkerStatusModel, operation: str, who: Assignment | PodRef, now: datetime
) -> WriteDecision[Any]:
    held = "; ".join(_describe_worker(w) for w in model.workers) or "no workers"
    note = f"refused stale {operation} of {describe(who)}: the workers hold: {held}"
    return WriteDecision(_write(model, model, now, stale=1), False, operation, (note,))


def _lane_of(model: WorkerStatusModel, uid: str) -> tuple[Worker, Lane] | None:
    worker = model.worker_of_pod(uid)
    if worker is None:
        return None
    lane = worker.lane(uid)
    return None if lane is None else (worker, lane)


def _before(stage: LaneStage, later: LaneStage) -> bool:
    """Whether a lane in ``stage`` has yet to reach ``later`` (a lane's stage only moves
    forward)."""
    order = list(LaneStage)
    return order.index(stage) < order.index(later)


def decide_join(
    status: Mapping[str, Any], gpu: Gpu, assignment: Assignment, now: datetime,
    memory: Memory | None = None, stage: LaneStage = LaneStage.STARTING,
) -> WriteDecision[str]:
    """Add ``assignment``'s lane (in ``stage``: ``starting``, or ``synthesizing`` for a
    prover that synthesizes at once, ``lanes.JOIN_STAGES``) to the worker of ``gpu``, adding
    the worker if it is new; return the worker's ID. Joining twice writes nothing."""
    if stage not in JOIN_STAGES:
        names = ", ".join(str(s) for s in JOIN_STAGES)
        msg = f"a lane joins in one of {names}, not {stage!r}"
        raise ValueError(msg)
    model = parse(status, now)
    found = _lane_of(model, assignment.pod_uid)
    if found is not None:
        return WriteDecision(None, found[0].id)
    worker = model.worker_of_gpu(gpu.uuid) or Worker(id=gpu_id(gpu.uuid), gpu=gpu)
    known = worker.gpu
    worker = replace(
        worker,
        gpu=Gpu(gpu.uuid, gpu.name or known.name, gpu.memory_bytes or known.memory_bytes),
    )
    lane = Lane(
        pod=assignment.pod,
        job=assignment.job,
        partition=assignment.partition,
        attempt=assignment.attempt,
        priority=lane_priority(assignment.proof_kind, assignment.priority_class),
        stage=stage,
        since=now,
        memory=memory,
    )
    worker = worker.with_lane(lane)
    return WriteDecision(_write(model.with_worker(worker), model, now), worker.id)


def decide_stage(
    status: Mapping[str, Any], assignment: Assignment, stage: str, now: datetime,
    memory: Memory | None = None,
) -> WriteDecision[bool]:
    """Move ``assignment``'s lane forward to ``stage`` (synthesizing or synth_done: the GPU
    phase and the commitment are set by ``acquire`` and ``release_gpu``); stale if the lane is
    gone, nothing to write if it is that far already."""
    if stage not in REPORTED_STAGES:
        names = ", ".join(str(s) for s in REPORTED_STAGES)
        msg = f"stage must be one of {names}, not {stage!r}"
        raise ValueError(msg)
    model = parse(status, now)
    found = _lane_of(model, assignment.pod_uid)
    if found is None:
        return _refuse(model, "stage", assignment, now)
    worker, lane = found
    if not _before(lane.stage, LaneStage(stage)):
        # A late or repeated report: a lane's stage only moves forward (a lane in its GPU
        # phase stays in stage gpu while it holds it).
        return WriteDecision(None, True)
    lane = replace(lane, stage=LaneStage(stage), since=now).measured(memory)
    return WriteDecision(_write(model.with_worker(worker.with_lane(lane)), model, now), True)


def decide_acquire(
    status: Mapping[str, Any], assignment: Assignment, now: datetime,
    memory: Memory | None = None,
) -> WriteDecision[Acquired]:
    """Make ``assignment``'s lane the holder of its GPU's phase if no lane holds it and no
    waiting lane comes before it; else mark it ready (``readyAt``) and let it wait, in stage
    ``synth_done`` (``lanes.ACQUIRE_STAGE``): its prover does not write that stage itself, so
    a lane granted at once goes from synthesizing to ``gpu`` in one write."""
    model = parse(status, now)
    found = _lane_of(model, assignment.pod_uid)
    if found is None:
        refused = _refuse(model, "acquire", assignment, now)
        return replace(refused, result=Acquired.GONE)
    worker, lane = found
    if worker.holder is not None and worker.holder.pod.uid == lane.pod.uid:
        return WriteDecision(None, Acquired.GRANTED)
    if lane.ready_at is None:
        lane = replace(lane, ready_at=now).measured(memory)
        if _before(lane.stage, ACQUIRE_STAGE):
            lane = replace(lane, stage=ACQUIRE_STAGE, since=now)
        worker = worker.with_lane(lane)
    queue = worker.queue()
    if worker.holder is None and queue and queue[0].pod.uid == lane.pod.uid:
        lane = replace(lane, stage=LaneStage.GPU, since=now, ready_at=None).measured(memory)
        worker = replace(worker.with_lane(lane), holder=Holder(lane.pod, now))
        return WriteDecision(_write(model.with_worker(worker), model, now), Acquired.GRANTED)
    if worker == found[0]:
        return WriteDecision(None, Acquired.WAITING)
    return WriteDecision(_write(model.with_worker(worker), model, now), Acquired.WAITING)


def decide_release_gpu(
    status: Mapping[str, Any], assignment: Assignment, now: datetime,
    memory: Memory | None = None,
) -> WriteDecision[bool]:
    """Give up the GPU phase ``assignment``'s lane holds; the lane goes on committing. Stale
    when the lane does not hold it (another lane does since, or the lane is gone)."""
    model = parse(status, now)
    found = _lane_of(model, assignment.pod_uid)
    if found is None or found[0].holder is None or found[0].holder.pod.uid != assignment.pod_uid:
        return _refuse(model, "GPU release", assignment, now)
    worker, lane = found
    lane = replace(lane, stage=LaneStage.COMMITTING, since=now).measured(memory)
    worker = replace(worker.with_lane(lane), holder=None)
    return WriteDecision(_write(model.with_worker(worker), model, now), True)


def _leave(worker: Worker, uid: str, outcome: WorkerOutcome) -> Worker:
    left = worker.without_lane(uid)
    return replace(left, completed=worker.completed + (outcome == "succeeded"))


def concerns(status: Mapping[str, Any] | None, uid: str) -> bool:
    """Whether the pod ``uid`` has a lane in a WorkerStatus's ``status``, or the sweep took its
    GPU phase from it (a finalizer release about it is stale there): where its finalizer
    release writes."""
    model = parse(status)
    return model.worker_of_pod(uid) is not None or any(
        uid in w.previous_pod_uids for w in model.workers)


def decide_release(
    status: Mapping[str, Any], who: Assignment | PodRef, outcome: WorkerOutcome, now: datetime
) -> WriteDecision[bool]:
    """Remove ``who``'s lane, and the GPU phase with it if it held it (``completed`` + 1 when
    the outcome is success). Without a lane: stale for an Assignment (the prover's ``leave``:
    it joined, so someone removed its lane), and for a PodRef (the finalizer's) when the
    sweep took the GPU phase from that pod; else the pod holds nothing and the release is a
    no-op."""
    model = parse(status, now)
    uid = (who if isinstance(who, PodRef) else who.pod).uid
    worker = model.worker_of_pod(uid)
    if worker is not None:
        model_after = model.with_worker(_leave(worker, uid, outcome))
        return WriteDecision(_write(model_after, model, now), True)
    if isinstance(who, Assignment) or any(uid in w.previous_pod_uids for w in model.workers):
        return _refuse(model, "release", who, now)
    return WriteDecision(
        None, False, notes=(f"{describe(who)} holds no lane: nothing to release",)
    )


def decide_leave(
    status: Mapping[str, Any], assignment: Assignment, outcome: WorkerOutcome, now: datetime
) -> WriteDecision[bool]:
    """The prover's own release of its lane (``decide_release`` by Assignment)."""
    return decide_release(status, assignment, outcome, now)


def in_scope(lane: Lane, scope: Collection[str]) -> bool:
    """Whether an operator handling the namespaces ``scope`` (empty: every namespace) is the
    one to sweep ``lane``: its job's namespace is one of them. A lane's job namespace is its
    pod's, so exactly one of several operators with disjoint namespaces sweeps each lane."""
    return not scope or lane.job.namespace in scope


def decide_sweep(
    status: Mapping[str, Any],
    live_pods: Mapping[str, WorkerOutcome | None],
    now: datetime,
    not_live: Mapping[str, datetime] | None = None,
    scope: Collection[str] = (),
) -> WriteDecision[list[Released]]:
    """Remove the lanes whose pod is gone ("lost") or ended without its finalizer release in
    charge, and mark whether each remaining lane's pod is live. ``live_pods`` maps the UID of
    each pod that exists to None while its lane is its own or its finalizer's to release
    (it runs, or it ended and still carries the finalizer), else to the outcome its end
    implies for its lane (``observe.worker_outcome``, the rule the finalizer's release uses
    too). ``not_live`` maps the UID of each running pod that is not live to since when
    (``api.pod_not_live_since``): its lane gets ``notLiveSince``, a lane whose pod is live
    again loses it. A lane removed while it held the GPU phase is remembered
    (``previousPodUIDs``). ``scope`` names the namespaces the sweeping operator handles
    (empty: every one): a lane whose job is in another is left as it is, neither marked nor
    released, since that operator knows none of its pods and would read it as lost
    (``in_scope``)."""
    model = parse(status, now)
    not_live = not_live or {}
    # First the marks, then the removals; the write accounts the time up to now by the mode
    # the object showed, so a GPU's not_live seconds start with its mark.
    after, marked = model, []
    for worker in model.workers:
        for lane in worker.lanes:
            if not in_scope(lane, scope):
                continue
            mark = not_live.get(lane.pod.uid)
            if live_pods.get(lane.pod.uid, "lost") is None and (
                    (mark is None) != (lane.not_live_since is None)):
                current = after.worker(worker.id) or worker
                after = after.with_worker(
                    current.with_lane(replace(lane, not_live_since=mark)))
                marked.append(f"{describe(lane.pod)} on {worker.id} is"
                              f" {'live again' if mark is None else 'not live'}")
    released: list[Released] = []
    for worker in list(after.workers):
        for lane in worker.lanes:
            if not in_scope(lane, scope):
                continue
            uid = lane.pod.uid
            outcome: WorkerOutcome | None = live_pods.get(uid, "lost")
            if outcome is None:
                continue
            released.append(Released(worker.id, lane.pod, outcome))
            current = after.worker(worker.id) or worker
            if current.holder is not None and current.holder.pod.uid == uid:
                current = current.remember(uid)
            after = after.with_worker(_leave(current, uid, outcome))
    if after == model:
        return WriteDecision(None, released)
    notes = tuple(
        f"sweep released {r.worker_id} from {describe(r.pod)} ({r.outcome})" for r in released
    )
    return WriteDecision(_write(after, model, now), released, notes=(*notes, *marked))
