"""Applies reconcile decisions to the API server: the thin, blocking layer under the handlers.

Everything here runs in a worker thread (the ``kubernetes`` client blocks) and spends API
calls on writes only: the caller (``kuzk.operator.runtime``) hands in the ProofJob, its pods and the
WorkerStatuses from the operator's watch caches. ``Controller.sync`` asks the pure
``reconcile`` what to do, writes the status with the resourceVersion it was given (a 409 means
the cache was stale: it reads that one job again and decides again), then applies the actions,
each idempotent, so a crash between any two steps is repaired by the next sync. A 404 on a
write about the job means the job is gone (``JobGone``): its pods are then settled as orphans.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kuzk.contract import api, worker_writes, workers
from kuzk.contract.clock import SYSTEM, Clock
from kuzk.contract.ledger import proofjob_tally
from kuzk.operator.actions import (
    CreatePod,
    Decision,
    DeleteJob,
    DeletePod,
    Event,
    Refusal,
    ReleaseWorker,
)
from kuzk.operator.ledger_store import LedgerStore
from kuzk.operator.observe import (
    controlled_by,
    controller_of,
    is_deleting,
    release_action,
    worker_outcome,
)
from kuzk.operator.partitions import POD_REFUSED, refusal_backoff
from kuzk.operator.pods import PodSettings
from kuzk.operator.reconcile import reconcile

log = logging.getLogger("kuzk.operator.controller")
RESYNC_SECONDS = 10.0
ORPHAN_LOOK_SECONDS = 30.0
STALE_RESYNC_SECONDS = 1.0
POD_CALLS_IN_FLIGHT = 16
CONFLICT_TRIES = 3
EVENT_COMPONENT = "kuzk-operator"
NOT_READY = "not yet ready to handle request"
EVENT_MESSAGE_MAX = 1024
Poster = Callable[[dict[str, Any], Event], None]
Body = dict[str, Any]


class Conflict(Exception):
    """The ProofJob kept changing between read and status write; sync again."""


class JobGone(Exception):
    """A write about the ProofJob got 404: it no longer exists."""


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
    api_client: client.ApiClient
    settings: PodSettings
    post_event: Poster
    ledger: LedgerStore | None = None
    clock: Clock = SYSTEM

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self._pool = ThreadPoolExecutor(max_workers=POD_CALLS_IN_FLIGHT,
                                        thread_name_prefix="kuzk-pods")

    @staticmethod
    def _body(response: Any) -> Body:
        """The object a call made with ``_preload_content=False`` returned, as plain JSON: the
        client's typed models cost milliseconds of CPU per pod to build and to convert back."""
        return cast(Body, json.loads(response.data))

    # --- one job -------------------------------------------------------------------------
    def sync(
        self,
        job: Body,
        pods: list[Body],
        worker_statuses: list[Body],
        now: datetime | None = None,
    ) -> Synced:
        """Reconcile one ProofJob once from the given (cached) objects."""
        moment = now or self.clock.now()
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
                    job, pods, worker_statuses, moment, refused)
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
            made, freed, refused, stale = self._apply(job, decision, by_name, early)
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
                early = {a.name: self._pool.submit(self._create, ns, a)
                         for a in decision.of_type(CreatePod)}
            try:
                return decision, job, self._write_status(job, decision.status), early
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
        return [pod for name in unseen if (pod := self._read_pod(ns, name)) is not None]

    def _read_job(self, job: Body) -> Body:
        """The 409 path: the cached job was stale; read that one object again."""
        md = job["metadata"]
        try:
            fresh = self.custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, md["namespace"], api.PROOFJOB_PLURAL, md["name"]
            )
        except ApiException as e:
            if e.status == 404:
                raise JobGone(_name(job)) from None
            raise
        return cast(Body, fresh)

    def _write_status(self, job: Body, status: dict[str, Any]) -> Body | None:
        # The API server prunes the nulls a merge patch uses to clear fields: compare without.
        if without_nulls(status) == job.get("status"):
            return None
        md = job["metadata"]
        body = {"metadata": {"resourceVersion": md["resourceVersion"]}, "status": status}
        try:
            answer = self.custom.patch_namespaced_custom_object_status(
                api.GROUP, api.VERSION, md["namespace"], api.PROOFJOB_PLURAL, md["name"], body
            )
        except ApiException as e:
            if e.status == 409:
                raise Conflict(md["name"]) from None
            if e.status == 404:
                raise JobGone(_name(job)) from None
            raise
        return cast(Body, answer)

    def _apply(
        self,
        job: Body,
        decision: Decision,
        pods: Mapping[str | None, Body],
        early: Mapping[str, Future[Body | Refusal | None]],
    ) -> tuple[list[Body], list[tuple[str, Body]], dict[int, Refusal], bool]:
        """Apply the actions; returns the pods created, the pods released (keyed by the
        resourceVersion they replaced), the refused creates by partition, and whether an object
        to delete had changed since the decision (a pod replaced by a namesake, the job
        changed: its precondition failed)."""
        ns = job["metadata"]["namespace"]
        # Pod creates and deletes are independent of each other: send them concurrently, as
        # the Job controller does, instead of one round trip after another.
        wanted = decision.of_type(CreatePod)
        creates = {a.partition: early.get(a.name) or self._pool.submit(self._create, ns, a)
                   for a in wanted}
        deletes = [self._pool.submit(self._delete, ns, a) for a in decision.of_type(DeletePod)]
        created: list[Body] = []
        refused: dict[int, Refusal] = {}
        for partition, future in creates.items():
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
                after = self.release(ns, action, pod)
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
            return self._body(self.core.create_namespaced_pod(
                ns, action.manifest, _preload_content=False))  # type: ignore[arg-type]
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
        opts = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=action.uid))
        try:
            self.core.delete_namespaced_pod(action.name, ns, body=opts)
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
        opts = client.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=client.V1Preconditions(uid=md["uid"],
                                                 resource_version=md.get("resourceVersion")),
        )
        try:
            self.custom.delete_namespaced_custom_object(
                api.GROUP, api.VERSION, md["namespace"], api.PROOFJOB_PLURAL, md["name"],
                body=opts,
            )
        except ApiException as e:
            if e.status == 409:
                log.info("ProofJob %s/%s changed before its delete (%s); deciding again",
                         md["namespace"], md["name"], action.reason)
                return False
            if e.status != 404:
                raise
        return True

    # --- the finalizer -------------------------------------------------------------------
    def release(
        self,
        ns: str,
        action: ReleaseWorker,
        pod: Body | None = None,
    ) -> Body | None:
        """The finalizer write: release the worker (guarded), then drop the finalizer.

        ``pod`` comes from the caller's cache; without it, it is read. The guarded write is
        made whatever a cached WorkerStatus shows: a cache that lags behind the pod's join
        would otherwise leave its lane (and the GPU phase, if it held it) to the sweep. A pod
        without a lane costs the GET only. Returns the pod as the finalizer patch left it
        (None when no patch was made)."""
        if pod is None:
            pod = self._read_pod(ns, action.pod_name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != action.pod_uid:
            return None
        if action.node:
            outcome = worker_outcome(pod)
            ref = workers.PodRef(action.pod_name, action.pod_uid)
            released = worker_writes.release(self.api_client, action.node, ref, outcome,
                                       clock=self.clock)
            log.info(
                "finalizer release of %s/%s on %s (%s): %s",
                ns, action.pod_name, action.node, outcome,
                "applied" if released else "nothing held it",
            )
        return self._drop_finalizer(ns, pod)

    def _read_pod(self, ns: str, name: str) -> Body | None:
        try:
            return self._body(self.core.read_namespaced_pod(name, ns, _preload_content=False))
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _drop_finalizer(self, ns: str, pod: Body) -> Body | None:
        """Remove ``kuzk.io/release-worker``, checking it is still where the pod had it, so
        the patch never removes another finalizer; if it moved, read the pod once more.
        Returns the patched pod, or None when there was nothing to patch."""
        for _ in range(CONFLICT_TRIES):
            meta = pod.get("metadata") or {}
            finalizers = meta.get("finalizers") or []
            if api.FINALIZER not in finalizers:
                return None
            path = f"/metadata/finalizers/{finalizers.index(api.FINALIZER)}"
            patch: list[dict[str, Any]] = [
                {"op": "test", "path": "/metadata/uid", "value": meta.get("uid")},
                {"op": "test", "path": path, "value": api.FINALIZER},
                {"op": "remove", "path": path},
            ]
            try:
                return self._body(self.core.patch_namespaced_pod(
                    meta["name"], ns, patch, _preload_content=False))
            except ApiException as e:
                if e.status == 404:
                    return None
                if e.status not in (409, 422):
                    raise
            fresh = self._read_pod(ns, meta.get("name", ""))
            if fresh is None or (fresh.get("metadata") or {}).get("uid") != meta.get("uid"):
                return None
            pod = fresh
        msg = f"pod {ns}/{(pod.get('metadata') or {}).get('name')} kept changing"
        raise Conflict(msg)

    # --- pods without their job ------------------------------------------------------------
    def settle_orphan(self, pod: Body, now: datetime | None = None) -> float | None:
        """A partition pod whose ProofJob is gone (deleted with any propagation policy, or
        the pod orphaned with --cascade=orphan): kuzk adopts nothing, so the pod is deleted,
        its worker released (guarded) once its container has stopped, and its finalizer
        dropped. Returns seconds until it needs another look (its grace period), or None.
        Raises nothing when the job turns out to exist: the caller syncs the job then."""
        moment = now or self.clock.now()
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        if not is_deleting(pod):
            owner = controller_of(pod)
            if owner is not None and self._job_exists(ns, owner):
                return None
            log.info("deleting partition pod %s/%s: its ProofJob is gone", ns, name)
            opts = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=meta["uid"]))
            try:
                deleted = self.core.delete_namespaced_pod(name, ns, body=opts,
                                                          _preload_content=False)
            except ApiException as e:
                if e.status in (404, 409):
                    return None
                raise
            pod = self._body(deleted)
        action = release_action(pod, moment)
        if action is not None:
            self.release(ns, action, pod)
            return None
        if api.FINALIZER not in ((pod.get("metadata") or {}).get("finalizers") or []):
            return None
        stamp = (pod.get("metadata") or {}).get("deletionTimestamp")
        left = (api.parse_time(stamp) - moment).total_seconds() if stamp else 0.0
        return min(max(left, 0.0) + 0.5, ORPHAN_LOOK_SECONDS)

    def _job_exists(self, ns: str, owner: Mapping[str, Any]) -> bool:
        """Whether the pod's owner still exists: one read, only for a pod about to be deleted
        because the cache does not know its job."""
        try:
            job = self.custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PROOFJOB_PLURAL, owner.get("name", "")
            )
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return bool(cast(Body, job).get("metadata", {}).get("uid") == owner.get("uid"))

    # --- workers -----------------------------------------------------------------------
    def sweep(
        self, name: str, live: Mapping[str, api.WorkerOutcome | None],
        worker_status: Body | None, not_live: Mapping[str, datetime] | None = None,
    ) -> list[workers.Released]:
        """Release the lanes of WorkerStatus ``name`` whose pod is gone, or ended with its
        finalizer gone, and mark its lanes whose pod is not live (periodic, and on a change
        of a pod's liveness); then retire it if it is a legacy one no lane is on.

        ``live`` maps the UIDs of kuzk's pods on its node to ``observe.sweep_outcome``,
        ``not_live`` those of running pods that are not live to since when (both from the
        cache); the guarded write is made only when the cached WorkerStatus shows
        something to change."""
        now = self.clock.now()
        cached = worker_status or {}
        released = []
        if workers.decide_sweep(cached.get("status") or {}, live, now, not_live).status is not None:
            released = worker_writes.sweep(self.api_client, name, live, now, not_live,
                                     clock=self.clock)
            for item in released:
                log.info("sweep released %s on %s", item, name)
        elif worker_writes.retire_legacy(self.api_client, cached):
            log.info("retired WorkerStatus %s of the per-node kind: no lane is on it; its"
                     " counters go to the ledger", name)
        return released


class EventRecorder:
    """Posts the decisions' Events on their ProofJob as ``kuzk-operator`` (source and
    reporting component; the reporting instance is the operator's pod), the way a Kubernetes
    controller's recorder does, not as Kopf's generic poster would (``kopf``, instance
    ``dev``). Posting is fire-and-forget on threads of its own: an Event that cannot be
    posted is logged, never retried, and never holds up a sync."""

    def __init__(self, api_client: client.ApiClient, instance: str,
                 clock: Clock = SYSTEM) -> None:
        self.core = client.CoreV1Api(api_client)
        self.instance = instance
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kuzk-events")

    def __call__(self, job: Body, event: Event) -> None:
        self._pool.submit(self.post, job, event)

    def post(self, job: Body, event: Event) -> None:
        md = job.get("metadata") or {}
        stamp = api.format_time(self.clock.now())
        body: Body = {
            "metadata": {"generateName": f"{md.get('name')}.", "namespace": md.get("namespace")},
            "involvedObject": {
                "apiVersion": api.API_VERSION, "kind": api.PROOFJOB_KIND,
                "name": md.get("name"), "namespace": md.get("namespace"), "uid": md.get("uid"),
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:EVENT_MESSAGE_MAX],
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(str(md.get("namespace")), body)  # type: ignore[arg-type]
        except (ApiException, HTTPError, OSError) as error:
            log.warning("could not post the Event %s on ProofJob %s: %s", event.reason,
                        _name(job), getattr(error, "reason", None) or error)


def release_finalizers(api_client: client.ApiClient, namespaces: Sequence[str]) -> int:
    """``kuzk release-finalizers`` (the uninstall hook): release the worker of every partition
    pod that a ProofJob of ``namespaces`` (empty: all) controls and drop its finalizer, so no
    pod is left undeletable once the operator is gone. Another pod that carries the label and
    the finalizer (some other tool's, or a copy) is left alone. Returns how many it released."""
    ctl = Controller(api_client, PodSettings(image=""), lambda job, event: None)
    selector = f"{api.LABEL_MANAGED_BY}={api.MANAGER}"
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    scopes: list[str | None] = list(namespaces) or [None]
    jobs: set[str] = set()
    for ns in scopes:
        listed = cast(Body, (
            custom.list_namespaced_custom_object(api.GROUP, api.VERSION, ns, api.PROOFJOB_PLURAL)
            if ns else
            custom.list_cluster_custom_object(api.GROUP, api.VERSION, api.PROOFJOB_PLURAL)
        ))
        jobs |= {job["metadata"]["uid"] for job in listed["items"]}
    done = 0
    for ns in scopes:
        listing = (core.list_namespaced_pod(ns, label_selector=selector) if ns
                   else core.list_pod_for_all_namespaces(label_selector=selector))
        for item in listing.items:
            pod: Body = api_client.sanitize_for_serialization(item)  # type: ignore[no-untyped-call]
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            if (controller_of(pod) or {}).get("uid") not in jobs:
                continue
            if api.FINALIZER in (meta.get("finalizers") or []):
                action = ReleaseWorker(meta["name"], meta["uid"], spec.get("nodeName"))
                ctl.release(meta["namespace"], action, pod)
                done += 1
    return done


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


def refusal(status: int, message: str) -> Refusal | None:
    """The Refusal an error answer to a pod create is (400 and 422 invalid, 403 forbidden: Pod
    Security admission, a ResourceQuota, RBAC), or None for an outage to retry at once. A
    restarting API server answers 403 "not yet ready to handle request" until its admission
    plugins have synced: that is an outage."""
    if status in (400, 403, 422) and NOT_READY not in message:
        return Refusal(status, message)
    return None


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


def _name(job: Mapping[str, Any]) -> str:
    md = job.get("metadata") or {}
    return f"{md.get('namespace')}/{md.get('name')}"
