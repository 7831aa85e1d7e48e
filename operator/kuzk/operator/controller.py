"""Applies reconcile decisions to the API server: the thin, blocking layer under the handlers.

Everything here runs in a worker thread (the ``kubernetes`` client blocks) and spends API
calls on writes only: the caller (``kuzk.operator.runtime``) hands in the ProofJob, its pods and the
WorkerStatuses from the operator's watch caches. ``Controller.sync`` asks the pure
``reconcile`` what to do, writes the status with the resourceVersion it was given (a 409 means
the cache was stale: it reads that one job again and decides again), then applies the actions,
each idempotent, so a crash between any two steps is repaired by the next sync. A 404 on a
write about the job means the job is gone (``JobGone``): its pods are then settled as orphans.
The finalizer release, orphans and the sweep are its ``reclaimer``'s (``kuzk.operator.reclaim``);
the Events go through the poster it is given (``kuzk.operator.events``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk.contract import api, workerstatus
from kuzk.contract.clock import SYSTEM, Clock
from kuzk.contract.ledger import proofjob_tally
from kuzk.contract.rawjson import MERGE_PATCH, call, unread
from kuzk.contract.workerstatus import decisions
from kuzk.operator.caches import decode_pod
from kuzk.operator.decide.actions import (
    CreatePod,
    Decision,
    DeleteJob,
    DeletePod,
    Event,
    Refusal,
    ReleaseWorker,
)
from kuzk.operator.decide.observe import controlled_by
from kuzk.operator.decide.partitions import progress_only
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.decide.policies.refused import POD_REFUSED, refusal, refusal_backoff
from kuzk.operator.decide.reconcile import reconcile
from kuzk.operator.events import Poster
from kuzk.operator.ledger_store import LedgerStore
from kuzk.operator.reclaim import CONFLICT_TRIES, Conflict, Reclaimer

log = logging.getLogger("kuzk.operator.controller")
RESYNC_SECONDS = 10.0
# How long a sync leaves a job's status alone when the only news is the progress of its live
# partitions (``partitions.progress_only``: a lane's stage, an attempt's node, worker or start;
# a new job's first status while it is only Pending), which the pods and WorkerStatuses
# already say: such news is written with the next write the job needs (a partition ended,
# failed or retried, a count, the phase, a condition) or by the first sync this long after the
# job's last write (or its creation); unfinished jobs sync every RESYNC_SECONDS, so the status
# trails the lanes by at most their sum. Without it every lane's every stage was a status
# write (issue 41: 2.02 a partition attempt, against 0.42 for a Job).
STAGE_SECONDS = 20.0
STALE_RESYNC_SECONDS = 1.0
POD_CALLS_IN_FLIGHT = 16
Body = dict[str, Any]


class JobGone(Exception):
    """A write about the ProofJob got 404: it no longer exists."""


class SyncFailed(Exception):
    """A sync failed after some of its pod creates had gone through: ``created`` holds them,
    for the caller's cache to overlay (a retry that did not know of them would send them
    again, each answered 409); the error is the ``__cause__``."""

    def __init__(self, created: list[Body]) -> None:
        super().__init__(f"{len(created)} pods created before the sync failed")
        self.created = created


@dataclass
class _Creates:
    """The pod creates one sync sent, on the controller's pool."""

    pool: ThreadPoolExecutor
    create: Callable[[str, CreatePod], Body | Refusal | None]
    sent: list[Future[Body | Refusal | None]] = field(default_factory=list)

    def submit(self, ns: str, action: CreatePod) -> Future[Body | Refusal | None]:
        future = self.pool.submit(self.create, ns, action)
        self.sent.append(future)
        return future

    def made(self) -> list[Body]:
        """The pods those creates made, once each has answered (a failed one made none)."""
        done = [f.exception() is None and f.result() for f in self.sent]
        return [answer for answer in done if isinstance(answer, dict)]


@dataclass(frozen=True)
class Synced:
    """What one sync did: when to look again, the job as its status write returned it (None
    when nothing was written), the pods it created and the pods whose finalizer it dropped
    (as the API server returned them, keyed by the resourceVersion they replaced), for the
    caller's cache to overlay until the watches deliver them."""

    requeue_after: float | None
    job: Body | None = None
    # the resourceVersions this sync's status writes replaced (two when a refusal was written)
    replaced: tuple[str, ...] = ()
    created: list[Body] = field(default_factory=list)
    released: list[tuple[str, Body]] = field(default_factory=list)


@dataclass
class Controller:
    """Syncs ProofJobs: decides with ``reconcile`` and applies the decision; its ``reclaimer``
    releases finalizers and settles orphaned pods and lanes over the same API client."""

    api_client: client.ApiClient
    settings: PodSettings
    post_event: Poster
    ledger: LedgerStore | None = None
    clock: Clock = SYSTEM
    namespaces: tuple[str, ...] = ()  # those the operator handles (none: all), for the sweep

    def __post_init__(self) -> None:
        self.reclaimer = Reclaimer(self.api_client, self.clock, self.namespaces)
        self._pool = ThreadPoolExecutor(max_workers=POD_CALLS_IN_FLIGHT,
                                        thread_name_prefix="kuzk-pods")
        # job UID -> when this operator last wrote the job's status (STAGE_SECONDS)
        self._written_at: dict[str, datetime] = {}

    def forget_job(self, uid: str) -> None:
        """Drop what was kept about a job that is gone."""
        self._written_at.pop(uid, None)

    # --- one job -------------------------------------------------------------------------
    def sync(
        self,
        job: Body,
        pods: list[Body],
        worker_statuses: list[Body],
        now: datetime | None = None,
    ) -> Synced:
        """Reconcile one ProofJob once from the given (cached) objects. A failure after
        pods were created raises SyncFailed with them (from the error)."""
        creates = _Creates(self._pool, self._create)
        try:
            return self._sync(job, pods, worker_statuses, now or self.clock.now(), creates)
        except JobGone:
            raise
        except Exception as error:
            made = creates.made()
            if made:
                raise SyncFailed(made) from error
            raise

    def _sync(
        self,
        job: Body,
        pods: list[Body],
        worker_statuses: list[Body],
        moment: datetime,
        creates: _Creates,
    ) -> Synced:
        pods = [*pods, *self._unseen_pods(job, pods)]
        written: Body | None = None
        refused: dict[int, Refusal] = {}
        replaced: list[str] = []
        created: list[Body] = []
        released: list[tuple[str, Body]] = []
        decided_on_stale = False
        # A second pass only when the API server refused a pod: it records the refusal in the
        # status (and with it the backoff before the pod is asked for again).
        for _ in range(2):
            try:
                decision, decided_on, wrote, early = self._decide(
                    job, pods, worker_statuses, moment, refused, creates)
            except ValueError as e:
                # The API server's schema rejects bad specs; this only happens for objects
                # stored before a schema change. Say so on the object instead of looping.
                self.post_event(job, Event("Warning", "InvalidSpec", str(e)))
                return Synced(None)
            if wrote is not None:
                replaced.append(decided_on["metadata"]["resourceVersion"])
                written = job = wrote
            if refused:
                _log_refusals(job, refused, decision.status)
            by_name = {(p.get("metadata") or {}).get("name"): p for p in pods}
            made, freed, refused, stale = self._apply(job, decision, by_name, early,
                                                      worker_statuses, creates)
            decided_on_stale |= stale
            created += made
            released += freed
            pods = [*pods, *made]
            if not refused:
                break
        if decision.ttl_expired:
            requeue: float | None = RESYNC_SECONDS  # until the watch shows the job deleted
        elif decision.status.get("phase") in api.FINISHED_PHASES:
            requeue = decision.requeue_after
        else:
            requeue = min(decision.requeue_after or RESYNC_SECONDS, RESYNC_SECONDS)
        if decided_on_stale:
            # A pod it deleted had been replaced by a namesake, or the job changed before its
            # delete: decide again on what exists once the watch shows it.
            requeue = min(requeue or STALE_RESYNC_SECONDS, STALE_RESYNC_SECONDS)
        return Synced(requeue, written, tuple(replaced), created, released)

    def _decide(
        self,
        job: Body,
        pods: list[Body],
        worker_statuses: list[Body],
        moment: datetime,
        refused: Mapping[int, Refusal],
        creates: _Creates,
    ) -> tuple[Decision, Body, Body | None, dict[str, Future[Body | Refusal | None]]]:
        """Reconcile and write the status (reading the job again on a 409). Returns the
        decision, the job it was made on, the job as the write returned it (None when nothing
        was written) and the pod creates already sent."""
        early: dict[str, Future[Body | Refusal | None]] = {}
        for _ in range(CONFLICT_TRIES):
            decision = reconcile(job, pods, worker_statuses, moment, settings=self.settings,
                                 refused=refused)
            if not job.get("status") and not early:
                # A job never synced: its first pods need no status to be safe (their names
                # are deterministic and a lost status is rebuilt from them), so they are sent
                # alongside the first status write instead of after it.
                ns = job["metadata"]["namespace"]
                early = {a.name: creates.submit(ns, a)
                         for a in decision.of_type(CreatePod)}
            try:
                return decision, job, self._write_status(job, decision.status, moment), early
            except Conflict:
                job = self._read_job(job)
        msg = f"{_name(job)} kept changing under the operator"
        raise Conflict(msg)

    def _unseen_pods(self, job: Body, pods: list[Body]) -> list[Body]:
        """The pods the job's status shows running that the cache does not hold, read from
        the API server. A cache can lag it (a replica that has just resumed lists every
        resource again, the pods perhaps after the jobs), and reconcile would take a running
        pod missing from it for one that disappeared and start its partition again. One GET
        per such pod; none in steady state, when the cache holds every pod it should."""
        names = {(p.get("metadata") or {}).get("name") for p in pods}
        unseen = [entry["pod"] for entry in (job.get("status") or {}).get("partitions") or []
                  if entry.get("state") in api.STARTED_STATES and entry.get("pod")
                  and entry["pod"] not in names]
        ns = job["metadata"]["namespace"]
        return [pod for name in unseen if (pod := self.reclaimer.read_pod(ns, name)) is not None]

    def _read_job(self, job: Body) -> Body:
        """The 409 path: the cached job was stale; read that one object again."""
        md = job["metadata"]
        try:
            return call(self.api_client, "GET", _job_path(md))
        except ApiException as e:
            if e.status == 404:
                raise JobGone(_name(job)) from None
            raise

    def _write_status(self, job: Body, status: dict[str, Any], moment: datetime) -> Body | None:
        """Write ``status`` unless the job shows it already, or it only brings progress that
        may wait (``STAGE_SECONDS``). The job as the write returned it, or None."""
        # The API server prunes the nulls a merge patch uses to clear fields: compare without.
        stored, wanted = job.get("status") or {}, without_nulls(status)
        if wanted == stored:
            return None
        md = job["metadata"]
        # since this operator's last write of it, or, for a job never written, its creation
        last = self._written_at.get(md.get("uid", ""))
        if last is None and not stored and md.get("creationTimestamp"):
            last = api.parse_time(md["creationTimestamp"])
        if (last is not None and (moment - last).total_seconds() < STAGE_SECONDS
                and progress_only(stored, wanted)):
            return None
        body = {"metadata": {"resourceVersion": md["resourceVersion"]}, "status": status}
        try:
            answer = call(self.api_client, "PATCH", _job_path(md) + "/status", body,
                          content_type=MERGE_PATCH)
        except ApiException as e:
            if e.status == 409:
                raise Conflict(md["name"]) from None
            if e.status == 404:
                raise JobGone(_name(job)) from None
            raise
        if status.get("phase") in api.FINISHED_PHASES:
            self._written_at.pop(md.get("uid", ""), None)
        else:
            self._written_at[md.get("uid", "")] = moment
        return answer

    def _apply(
        self,
        job: Body,
        decision: Decision,
        pods: Mapping[str | None, Body],
        early: Mapping[str, Future[Body | Refusal | None]],
        worker_statuses: list[Body],
        creates: _Creates,
    ) -> tuple[list[Body], list[tuple[str, Body]], dict[int, Refusal], bool]:
        """Apply the actions; returns the pods created, the pods released (keyed by the
        resourceVersion they replaced), the refused creates by partition, and whether an object
        to delete had changed since the decision (a pod replaced by a namesake, the job
        changed: its precondition failed). A finalizer release writes to the cached
        WorkerStatuses of the pod's node that concern it."""
        ns = job["metadata"]["namespace"]
        # Pod creates and deletes are independent of each other: send them concurrently, as
        # the Job controller does, instead of one round trip after another.
        wanted = decision.of_type(CreatePod)
        answers = {a.partition: early.get(a.name) or creates.submit(ns, a) for a in wanted}
        deletes = [self._pool.submit(self._delete, ns, a) for a in decision.of_type(DeletePod)]
        created: list[Body] = []
        refused: dict[int, Refusal] = {}
        for partition, future in answers.items():
            answer = future.result()
            if isinstance(answer, Refusal):
                refused[partition] = answer
            elif answer is not None:
                created.append(answer)
        stale = not all([deleted.result() for deleted in deletes])
        released: list[tuple[str, Body]] = []
        for action in decision.actions:
            if isinstance(action, ReleaseWorker):
                pod = pods.get(action.pod_name)
                homes = [str((ws.get("metadata") or {}).get("name", ""))
                         for ws in worker_statuses
                         if workerstatus.node_of(ws) == action.node
                         and decisions.concerns(ws.get("status"), action.pod_uid)]
                after = self.reclaimer.release(ns, action, pod, homes)
                if pod is not None and after is not None:
                    released.append(((pod.get("metadata") or {}).get("resourceVersion", ""), after))
            elif isinstance(action, Event):
                self.post_event(job, action)
            elif isinstance(action, DeleteJob):
                stale |= not self._delete_job(job, action)
        return created, released, refused, stale

    def _create(self, ns: str, action: CreatePod) -> Body | Refusal | None:
        """Create the pod: the pod, None when it exists already (an earlier sync or replica
        created it), or the Refusal when the API server refuses it (400 and 422 invalid,
        403 forbidden: Pod Security admission, a ResourceQuota, RBAC)."""
        try:
            return call(self.api_client, "POST", api.pods_path(ns), action.manifest,
                        decode=decode_pod)
        except ApiException as e:
            if e.status == 409:
                return None
            refused = refusal(e.status, api_message(e))
            if refused is None:
                raise
            return refused

    def _delete(self, ns: str, action: DeletePod) -> bool:
        """Delete the pod decided on, and only it (its UID is the precondition); False when
        a namesake has replaced it (409): the decision was made on a pod that is gone."""
        opts = {"preconditions": {"uid": action.uid}}
        try:
            call(self.api_client, "DELETE", api.pods_path(ns, action.name), opts, decode=unread)
        except ApiException as e:
            if e.status == 409:
                log.info("pod %s/%s was replaced before its delete (%s); deciding again",
                         ns, action.name, action.reason)
                return False
            if e.status != 404:  # 404: gone already
                raise
        return True

    def _delete_job(self, job: Body, action: DeleteJob) -> bool:
        """Delete the job as it was decided on: its UID and resourceVersion are the
        preconditions. False when it changed since (409: a new TTL, a namesake): the decision
        is made again on what exists."""
        md = job["metadata"]
        if self.ledger is not None:
            # What it counted stays counted (kuzk.contract.ledger), before it can be gone.
            self.ledger.fold([(md["uid"], proofjob_tally(job))])
        log.info("deleting ProofJob %s/%s: %s", md["namespace"], md["name"], action.reason)
        opts = {"propagationPolicy": "Background",
                "preconditions": {"uid": md["uid"], "resourceVersion": md.get("resourceVersion")}}
        try:
            call(self.api_client, "DELETE", _job_path(md), opts, decode=unread)
        except ApiException as e:
            if e.status == 409:
                log.info("ProofJob %s/%s changed before its delete (%s); deciding again",
                         md["namespace"], md["name"], action.reason)
                return False
            if e.status != 404:
                raise
        return True


def pods_of(pods: Iterable[Body], uid: str) -> list[Body]:
    """The pods controlled by the job with this UID."""
    return [p for p in pods if controlled_by(p, uid)]


def without_nulls(value: Any) -> Any:
    """``value`` as the API server stores it: object fields that are null left out."""
    if isinstance(value, Mapping):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def api_message(error: ApiException) -> str:
    """The message of the API server's Status in an error answer (its reason otherwise)."""
    return str(api.error_status(error.body).get("message") or error.reason)


def _log_refusals(job: Body, refused: Mapping[int, Refusal], status: Mapping[str, Any]) -> None:
    """One log line per refused pod, saying what happens next."""
    entries = {entry.get("index"): entry for entry in status.get("partitions") or []}
    for index in sorted(refused):
        entry = entries.get(index) or {}
        if entry.get("reason") == POD_REFUSED:
            then = f"asking again in {refusal_backoff(entry.get('refusals') or 1):.0f}s"
        else:
            then = "the partition fails"
        log.warning("ProofJob %s partition %d attempt %s: %s; %s", _name(job), index,
                    entry.get("attempt"), entry.get("message") or refused[index].message, then)


def _job_path(md: Mapping[str, Any]) -> str:
    return api.proofjob_path(md["namespace"], md["name"])


def _name(job: Mapping[str, Any]) -> str:
    md = job.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"
