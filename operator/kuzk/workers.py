"""The WorkerStatus write protocol: every write about a GPU worker is a compare-and-swap.

The engine kuzk replaces kept worker state in memory, and a late finalizer marked a worker idle
while it was proving the next partition. Here a worker's state lives in its node's
WorkerStatus, and every write names the assignment (pod UID) it is about and is made the same
way: GET the object, decide from what it says (pure ``decide_*`` functions, unit-tested
without a cluster), then replace ``/status`` carrying the ``resourceVersion`` that was read; on
409 read and decide again. A write about an assignment the worker no longer holds is stale: it
is refused, logged, and counted in the WorkerStatus's ``status.staleWritesRejected``, which
the status server sums into ``kuzk_stale_worker_writes_rejected_total`` on its ``/metrics``.

The prover's side (its env, credentials, heartbeat thread and retries through API outages)
is ``kuzk_prover.reporter.ProverReporter``; this module is what both sides share.

Choices the callers rely on:

* ``claim`` sets ``state: proving`` without a ``stage``; the prover's first ``on_stage`` sets
  it. A worker is the worker of one GPU UUID (``W<k>``, the lowest free k, kept for good).
* An idle worker keeps the ``pod`` it last released, so the operator's finalizer release after
  the prover's own release is recognised as already done rather than counted as stale.
* Only a write about an assignment a worker held and has since left is stale. The prover
  releases (by ``Assignment``) only what it claimed, so its release of an assignment no
  worker holds is stale. The operator's finalizer release (by ``PodRef``) knows nothing of
  claims: a worker remembers the pods a claim took it from while they still held it
  (``previousPodUIDs``, newest first, at most PREVIOUS_PODS), and a finalizer release is
  stale only for one of those. For any other pod it is nothing to do, neither written nor
  counted: one preempted before its prover claimed, or one released (by its prover or the
  sweep) before the next pod claimed its worker, which on a busy node is most of them.
* A missing WorkerStatus makes ``claim``, ``stage`` and ``heartbeat`` raise
  ``WorkerStatusMissing`` (the prover waits for the operator to create it); ``release`` and
  ``sweep`` treat it as nothing to do, so a pod's finalizer never sticks.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk import api as kapi
from kuzk.api import WORKER_STAGES, WorkerOutcome

log = logging.getLogger("kuzk.workers")

T = TypeVar("T")

CONFLICT_BUDGET_S = 2.0
BACKOFF_BASE_S = 0.005
BACKOFF_CAP_S = 0.25
# A write gives up on a connection the API server never accepts after 10 s, and on an answer
# only after 2 min (answers are slow under load, and a write that times out may have landed).
_TIMEOUTS = (10.0, 120.0)
HEARTBEAT_INTERVAL_S = 10.0
PREVIOUS_PODS = 8
SWEEP_MISSED_HEARTBEATS = 3

class WorkerStatusMissing(LookupError):
    """The node's WorkerStatus does not exist (not created yet, or its node is gone)."""


class WorkerWriteConflict(RuntimeError):
    """The object kept changing under the write (409 Conflict) for the whole retry budget."""


@dataclass(frozen=True)
class Gpu:
    """The GPU a worker drives; the UUID is its identity."""

    uuid: str
    name: str = ""
    memory_bytes: int | None = None

    def as_status(self) -> dict[str, Any]:
        gpu: dict[str, Any] = {"uuid": self.uuid}
        if self.name:
            gpu["name"] = self.name
        if self.memory_bytes is not None:
            gpu["memoryBytes"] = self.memory_bytes
        return gpu


@dataclass(frozen=True)
class PodRef:
    """A partition pod: what the operator knows of an assignment when its pod terminates."""

    name: str
    uid: str


@dataclass(frozen=True)
class Assignment:
    """One attempt of one partition, on one pod. The pod UID is the identity: a retried
    partition (same job and partition, next attempt) is a different assignment."""

    job_namespace: str
    job_name: str
    job_uid: str
    proof_kind: str
    partition: int
    attempt: int
    pod_name: str
    pod_uid: str

    @property
    def pod(self) -> PodRef:
        return PodRef(self.pod_name, self.pod_uid)


@dataclass(frozen=True)
class Released:
    """A worker freed by a sweep."""

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


# --- pure decisions ----------------------------------------------------------------------
def describe(who: Assignment | PodRef) -> str:
    """An assignment or pod as a log line names it."""
    if isinstance(who, PodRef):
        return f"pod {who.name} ({who.uid})"
    return (
        f"{who.job_namespace}/{who.job_name} partition {who.partition} attempt {who.attempt}"
        f" pod {who.pod_name} ({who.pod_uid})"
    )


def _describe_worker(worker: Mapping[str, Any]) -> str:
    pod = worker.get("pod") or {}
    if worker.get("state") != "proving":
        return f"{worker.get('id')} idle"
    job = worker.get("job") or {}
    return (
        f"{worker.get('id')} proving {job.get('namespace')}/{job.get('name')} partition"
        f" {worker.get('partition')} attempt {worker.get('attempt')}"
        f" pod {pod.get('name')} ({pod.get('uid')})"
    )


def _holders(workers: list[dict[str, Any]], pod_uid: str) -> list[dict[str, Any]]:
    return [
        w
        for w in workers
        if w.get("state") == "proving" and (w.get("pod") or {}).get("uid") == pod_uid
    ]


def _held_before(workers: list[dict[str, Any]], pod_uid: str) -> bool:
    return any(pod_uid in (w.get("previousPodUIDs") or []) for w in workers)


def _remember(worker: dict[str, Any], pod_uid: str) -> None:
    """Before ``pod_uid`` takes ``worker``, put the pod that still held it (proving) into
    previousPodUIDs. A pod the worker was released from is not remembered: its assignment
    ended, and a later finalizer release of it is done already, not stale."""
    held = (worker.get("pod") or {}).get("uid")
    if not held or held == pod_uid or worker.get("state") != "proving":
        return
    previous = [u for u in worker.get("previousPodUIDs") or [] if u not in (held, pod_uid)]
    worker["previousPodUIDs"] = [held, *previous][:PREVIOUS_PODS]


def _new_status(
    old: Mapping[str, Any], workers: list[dict[str, Any]], now: datetime, stale: int = 0
) -> dict[str, Any]:
    status = {k: v for k, v in old.items() if k not in ("workers", "proving", "workerCount")}
    status["workers"] = workers
    status["proving"] = sum(1 for w in workers if w.get("state") == "proving")
    status["workerCount"] = len(workers)
    status["staleWritesRejected"] = int(old.get("staleWritesRejected") or 0) + stale
    status["updatedAt"] = kapi.format_time(now, millis=True)
    return status


def _refuse(
    status: Mapping[str, Any], operation: str, who: Assignment | PodRef, now: datetime
) -> WriteDecision[bool]:
    workers = copy.deepcopy(status.get("workers") or [])
    held = "; ".join(_describe_worker(w) for w in workers) or "no workers"
    note = f"refused stale {operation} of {describe(who)}: the node's workers hold: {held}"
    return WriteDecision(_new_status(status, workers, now, stale=1), False, operation, (note,))


def decide_claim(
    status: Mapping[str, Any], gpu: Gpu, assignment: Assignment, now: datetime
) -> WriteDecision[str]:
    """Mark the worker of ``gpu`` proving ``assignment``; add the worker if it is new."""
    workers = copy.deepcopy(status.get("workers") or [])
    worker = next((w for w in workers if (w.get("gpu") or {}).get("uuid") == gpu.uuid), None)
    if worker is None:
        used = {str(w.get("id")) for w in workers}
        free = next(k for k in range(len(workers) + 1) if f"W{k}" not in used)
        worker = {"id": f"W{free}", "completed": 0}
        workers.append(worker)
    elif (
        worker.get("state") == "proving"
        and (worker.get("pod") or {}).get("uid") == assignment.pod_uid
    ):
        return WriteDecision(None, str(worker["id"]))
    notes: tuple[str, ...] = ()
    if worker.get("state") == "proving":
        # One GPU, one pod: the kubelet gave this GPU to the claimant, so the holder is over.
        notes = (f"{describe(assignment)} replaces {_describe_worker(worker)}",)
    _remember(worker, assignment.pod_uid)
    moment = kapi.format_time(now, millis=True)
    worker.update(
        gpu={**(worker.get("gpu") or {}), **gpu.as_status()},
        state="proving",
        job={
            "namespace": assignment.job_namespace,
            "name": assignment.job_name,
            "uid": assignment.job_uid,
            "proofKind": assignment.proof_kind,
        },
        partition=assignment.partition,
        attempt=assignment.attempt,
        pod={"name": assignment.pod_name, "uid": assignment.pod_uid},
        since=moment,
        heartbeat=moment,
    )
    worker.pop("stage", None)
    return WriteDecision(_new_status(status, workers, now), str(worker["id"]), notes=notes)


def decide_stage(
    status: Mapping[str, Any], assignment: Assignment, stage: str, now: datetime
) -> WriteDecision[bool]:
    """Set the stage of the worker holding ``assignment``; stale if none holds it."""
    if stage not in WORKER_STAGES:
        msg = f"stage must be one of {', '.join(WORKER_STAGES)}, not {stage!r}"
        raise ValueError(msg)
    workers = copy.deepcopy(status.get("workers") or [])
    holders = _holders(workers, assignment.pod_uid)
    if not holders:
        return _refuse(status, "stage", assignment, now)
    moment = kapi.format_time(now, millis=True)
    for worker in holders:
        worker.update(stage=stage, since=moment, heartbeat=moment)
    return WriteDecision(_new_status(status, workers, now), True)


def decide_heartbeat(
    status: Mapping[str, Any], assignment: Assignment, now: datetime
) -> WriteDecision[bool]:
    """Refresh the heartbeat of the worker holding ``assignment``; stale if none holds it."""
    workers = copy.deepcopy(status.get("workers") or [])
    holders = _holders(workers, assignment.pod_uid)
    if not holders:
        return _refuse(status, "heartbeat", assignment, now)
    for worker in holders:
        worker["heartbeat"] = kapi.format_time(now, millis=True)
    return WriteDecision(_new_status(status, workers, now), True)


def _set_idle(worker: dict[str, Any], outcome: WorkerOutcome, now: datetime) -> None:
    pod = worker.get("pod") or {}
    for key in ("stage", "job", "partition", "attempt", "heartbeat"):
        worker.pop(key, None)
    worker.update(
        state="idle",
        pod={k: pod[k] for k in ("name", "uid") if k in pod},
        since=kapi.format_time(now, millis=True),
        completed=int(worker.get("completed") or 0) + (outcome == "succeeded"),
    )


def decide_release(
    status: Mapping[str, Any], who: Assignment | PodRef, outcome: WorkerOutcome, now: datetime
) -> WriteDecision[bool]:
    """Set idle every worker that still holds ``who``'s pod UID (``completed`` + 1 when the
    outcome is success). A pod already released is a no-op. Otherwise the release is stale
    when ``who`` held a worker: always for an Assignment (the prover's, which claimed), for a
    PodRef (the finalizer's) when a claim took a worker from the pod; else the pod holds no
    worker (it never did, or it was released before the next claim) and the release is a
    no-op."""
    workers = copy.deepcopy(status.get("workers") or [])
    uid = (who if isinstance(who, PodRef) else who.pod).uid
    holders = _holders(workers, uid)
    if holders:
        for worker in holders:
            _set_idle(worker, outcome, now)
        return WriteDecision(_new_status(status, workers, now), True)
    if any((w.get("pod") or {}).get("uid") == uid for w in workers):
        return WriteDecision(None, False)
    if isinstance(who, Assignment) or _held_before(workers, uid):
        return _refuse(status, "release", who, now)
    return WriteDecision(
        None, False, notes=(f"{describe(who)} holds no worker: nothing to release",)
    )


def decide_sweep(
    status: Mapping[str, Any],
    live_pods: Mapping[str, WorkerOutcome | None],
    now: datetime,
    heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
) -> WriteDecision[list[Released]]:
    """Release workers whose pod is gone ("lost"), or whose heartbeat is older than three
    intervals while their pod is not running. ``live_pods`` maps the UID of each pod that
    exists to None while it runs, else to the outcome its end implies for its worker
    (``observe.worker_outcome``, the rule the finalizer's release uses too)."""
    workers = copy.deepcopy(status.get("workers") or [])
    limit = now - timedelta(seconds=SWEEP_MISSED_HEARTBEATS * heartbeat_interval)
    released: list[Released] = []
    for worker in workers:
        pod = worker.get("pod") or {}
        if worker.get("state") != "proving":
            continue
        uid = pod.get("uid", "")
        last = worker.get("heartbeat") or worker.get("since")
        silent = last is None or kapi.parse_time(last) < limit
        # Gone: lost. Ended and silent: how it ended. Running, or ended but still heard from:
        # kept (its release is the finalizer's).
        outcome: WorkerOutcome | None = (
            "lost" if uid not in live_pods else live_pods[uid] if silent else None
        )
        if outcome is not None:
            ref = PodRef(pod.get("name", ""), uid)
            released.append(Released(str(worker["id"]), ref, outcome))
            _set_idle(worker, outcome, now)
    if not released:
        return WriteDecision(None, released)
    notes = tuple(
        f"sweep released {r.worker_id} from {describe(r.pod)} ({r.outcome})" for r in released
    )
    return WriteDecision(_new_status(status, workers, now), released, notes=notes)


# --- guarded writes ----------------------------------------------------------------------
def _now() -> datetime:
    return datetime.now(UTC)


def guarded_write(
    api: client.ApiClient,
    node: str,
    decide: Callable[[Mapping[str, Any]], WriteDecision[T]],
    *,
    budget_s: float = CONFLICT_BUDGET_S,
) -> T:
    """The one way kuzk writes a WorkerStatus: GET, ``decide(status)``, replace ``/status``
    with the resourceVersion that was read; on 409 Conflict back off (full jitter) and start
    over, until ``budget_s`` seconds of continuous conflict raise WorkerWriteConflict."""
    objects = client.CustomObjectsApi(api)
    where = (kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, node)
    conflicts, deadline = 0, 0.0
    while True:
        try:
            current = cast(
                dict[str, Any],
                objects.get_cluster_custom_object(*where, _request_timeout=_TIMEOUTS),
            )
            decision = decide(current.get("status") or {})
            if decision.status is not None:
                objects.replace_cluster_custom_object_status(
                    *where,
                    {**current, "status": decision.status},
                    _request_timeout=_TIMEOUTS,
                )
        except ApiException as error:
            if error.status == 404:
                msg = f"WorkerStatus {node} does not exist"
                raise WorkerStatusMissing(msg) from None
            if error.status != 409:
                raise
            conflicts += 1
            if conflicts == 1:
                deadline = time.monotonic() + budget_s
            elif time.monotonic() >= deadline:
                msg = f"WorkerStatus {node}: still conflicting after {conflicts} tries"
                raise WorkerWriteConflict(msg) from None
            time.sleep(random.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**conflicts)))
            continue
        for note in decision.notes:
            log.info("WorkerStatus %s: %s", node, note)
        return decision.result


def claim(api: client.ApiClient, node: str, gpu: Gpu, assignment: Assignment) -> str:
    """Mark the worker of ``gpu`` on ``node`` proving ``assignment``; return its ID.

    Raises WorkerStatusMissing when the node's WorkerStatus does not exist yet."""
    return guarded_write(api, node, lambda s: decide_claim(s, gpu, assignment, _now()))


def stage(api: client.ApiClient, node: str, assignment: Assignment, stage: str) -> bool:
    """Set the stage of the worker holding ``assignment``; False when the write is stale."""
    return guarded_write(api, node, lambda s: decide_stage(s, assignment, stage, _now()))


def heartbeat(api: client.ApiClient, node: str, assignment: Assignment) -> bool:
    """Refresh the heartbeat of the worker holding ``assignment``; False when stale. Callers
    keep to one every HEARTBEAT_INTERVAL_S (kuzk_prover.reporter.ProverReporter does)."""
    return guarded_write(api, node, lambda s: decide_heartbeat(s, assignment, _now()))


def release(
    api: client.ApiClient, node: str, who: Assignment | PodRef, outcome: WorkerOutcome
) -> bool:
    """Set idle the worker on ``node`` that still holds ``who``'s pod UID; True if it did.

    False when it was already released, when the write is stale (refused and counted), or
    when the WorkerStatus is gone: then there is nothing to release and a finalizer may go."""
    try:
        return guarded_write(api, node, lambda s: decide_release(s, who, outcome, _now()))
    except WorkerStatusMissing:
        log.info("no WorkerStatus %s: nothing to release for %s", node, describe(who))
        return False


def sweep(
    api: client.ApiClient,
    node: str,
    live_pods: Mapping[str, WorkerOutcome | None],
    now: datetime,
    heartbeat_interval: float = HEARTBEAT_INTERVAL_S,
) -> list[Released]:
    """Release (guarded) the workers of ``node`` as ``decide_sweep`` says: those whose pod is
    gone, or silent for three heartbeat intervals while their pod is not running."""
    try:
        return guarded_write(
            api, node, lambda s: decide_sweep(s, live_pods, now, heartbeat_interval)
        )
    except WorkerStatusMissing:
        return []


def ensure_worker_status(api: client.ApiClient, node_name: str, node_uid: str) -> bool:
    """Create ``node_name``'s WorkerStatus, owned by the Node (so the garbage collector
    deletes it with the node), if absent. True if this call created it."""
    body = {
        "apiVersion": kapi.API_VERSION,
        "kind": kapi.WORKERSTATUS_KIND,
        "metadata": {
            "name": node_name,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
        },
        "spec": {"nodeName": node_name},
    }
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, body
        )
    except ApiException as error:
        if error.status == 409:
            return False
        raise
    return True
