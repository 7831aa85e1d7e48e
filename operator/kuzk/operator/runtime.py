"""The running operator's state: one object, made at startup and kept in Kopf's ``memo``.

It reads from memory fed by the watches (``kuzk.operator.caches``: Kopf's index of ProofJobs and the
operator's own streams of pods and WorkerStatuses, ``kuzk.operator.streams``), decides which
events matter, and drives the work queue (``kuzk.operator.workqueue.WorkQueue``) whose
runs call the blocking ``Controller`` in a thread. A steady-state sync makes no LIST and no
GET: it spends API calls on writes, and a 409 tells it the cache was stale.

Keys of the work queue: ``("job", ns, name)`` syncs a ProofJob; ``("pod", ns, name)`` settles a
partition pod whose ProofJob is gone; ``("sweep", name)`` is the sweep of a WorkerStatus
(one GPU; a legacy one of a whole node is retired there once no lane is on it): periodic,
and soon after a partition pod of its node stops or starts again being live (its Ready
condition: ``api.pod_not_live_since``), so that the WorkerStatus marks a hung lane within a
second of its pod's readiness probe failing. Per-job state (what a sync wrote or created
before the watches delivered it) is dropped when the job is deleted or the watch catches up,
so memory does not grow with the number of jobs ever seen.

No work runs until every stream has listed (``hold``, then ``on_listed``: at start and after
a peering pause) and, at start, until Kopf's index of ProofJobs is complete
(``on_jobs_indexed``); then every object is looked at once. A stream's list replaces what it held,
so an object deleted while it was stopped is delivered as deleted. Kopf keeps a ProofJob in
its index until it sees its DELETED event, so after Kopf lists again a job deleted in between
can linger: writes about such a ghost get 404 and are settled as gone; decisions never depend
on a pod existing beyond its job's recorded attempt (``kuzk.operator.decide.partitions`` keeps that
watermark), and an orphaned pod is deleted only after one read confirms its job is gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kuzk.contract import api, ledger, workerstatus
from kuzk.contract.workerstatus.lanes import LaneView, lane_views
from kuzk.operator.caches import Caches, JobKey, slim
from kuzk.operator.controller import Body, Controller, JobGone, SyncFailed, pods_of
from kuzk.operator.decide.observe import (
    awaits_release,
    controlled_by,
    controller_of,
    is_deleting,
    sweep_outcome,
)
from kuzk.operator.ledger_store import FoldQueue
from kuzk.operator.metrics import OperatorMetrics, Timer
from kuzk.operator.workqueue import Gone, WorkQueue

log = logging.getLogger("kuzk.operator.runtime")
SWEEP_SECONDS = 30.0
# A pod or WorkerStatus event syncs its job this long after it, so the events of a burst
# (a pod's phase, its worker's stages, other partitions finishing) share one sync and one
# status write; the Job controller batches pod events the same way (syncJobBatchPeriod, 1 s).
# A ProofJob's own events (created, spec changed, deleted) are handled at once.
BATCH_SECONDS = 1.0


def changed_jobs(old: Mapping[str, LaneView], new: Mapping[str, LaneView]) -> set[JobKey]:
    """The jobs with a lane that came, went or moved between two views of a WorkerStatus
    (``lanes.lane_views``). A lane's new stage alone syncs no job: the job's status takes it
    with its next write (``controller.STAGE_SECONDS``)."""
    jobs: set[JobKey] = set()
    for pod in old.keys() | new.keys():
        before, after = old.get(pod), new.get(pod)
        if _placed(before) == _placed(after):
            continue
        for view in (before, after):
            if view is not None and view.job_namespace and view.job_name:
                jobs.add((view.job_namespace, view.job_name))
    return jobs


def _placed(view: LaneView | None) -> tuple[str, str, str, str] | None:
    return None if view is None else (view.node, view.worker, view.job_namespace, view.job_name)


@dataclass
class JobState:
    """What this operator wrote about a job that its cache may not show yet."""

    # (the resourceVersions its writes replaced, the job after the last)
    written: tuple[tuple[str, ...], Body] | None = None
    created: dict[str, Body] = field(default_factory=dict)  # pod name → the pod as created
    # pod name → (resourceVersion it replaced, the pod after its finalizer was dropped)
    released: dict[str, tuple[str, Body]] = field(default_factory=dict)

    def job(self, cached: Body) -> Body:
        rv = (cached.get("metadata") or {}).get("resourceVersion")
        if self.written is not None and rv in self.written[0]:
            return self.written[1]
        self.written = None  # the watch has caught up (or someone else wrote after us)
        return cached

    def pods(self, cached: list[Body]) -> list[Body]:
        names = {(p.get("metadata") or {}).get("name") for p in cached}
        for name in [n for n in self.created if n in names]:
            del self.created[name]
        pods = []
        for pod in cached:
            meta = pod.get("metadata") or {}
            replaced, after = self.released.get(meta.get("name", ""), (None, pod))
            if replaced == meta.get("resourceVersion"):
                pods.append(after)  # the watch has not delivered the patch yet
            else:
                self.released.pop(meta.get("name", ""), None)
                pods.append(pod)
        for name in [n for n in self.released if n not in names]:
            del self.released[name]  # gone from the cache: deleted
        return [*pods, *self.created.values()]

    @property
    def empty(self) -> bool:
        return self.written is None and not self.created and not self.released


class Runtime:
    """See the module docstring. Handlers call the ``on_*`` methods; nothing else writes."""

    def __init__(self, controller: Controller, caches: Caches,
                 folds: FoldQueue | None = None, metrics: OperatorMetrics | None = None) -> None:
        self.controller = controller
        self.caches = caches
        self.folds = folds
        self.metrics = metrics
        self.queue = WorkQueue(self._work, describe=_describe, clock=controller.clock)
        self.jobs: dict[JobKey, JobState] = {}
        self.gpu_lanes: dict[str, Mapping[str, LaneView]] = {}  # WorkerStatus → its lanes
        self.paused = False  # by a higher-priority peer
        self.listed = True  # every stream has listed since the last hold
        self.jobs_indexed = True  # Kopf's index of ProofJobs has listed once
        self._replay: Callable[[], None] | None = None
        # pod UID → since when it is not live, as its last event showed (live pods: absent)
        self.not_live: dict[str, datetime] = {}

    def hold(self, *, jobs: bool = False) -> None:
        """Run no work until ``on_listed`` (the streams are starting, or starting again after
        a pause) and, with ``jobs``, until ``on_jobs_indexed`` (Kopf is starting)."""
        self.listed = False
        if jobs:
            self.jobs_indexed = False
        self.queue.pause()

    def on_listed(self, replay: Callable[[], None]) -> None:
        """Every stream has listed. ``replay`` delivers every object the streams hold to the
        ``on_*`` methods; it runs when work may run again."""
        self.listed, self._replay = True, replay
        self._open()

    def on_jobs_indexed(self) -> None:
        """Kopf's index of ProofJobs is complete: until then every partition pod would look
        like an orphan, and settling each would cost a read of its job."""
        if not self.jobs_indexed:
            self.jobs_indexed = True
            self._open()

    def _open(self) -> None:
        """Run work again and look at everything once, when nothing holds it any more."""
        if self.paused or not self.listed or not self.jobs_indexed or self._replay is None:
            return
        replay, self._replay = self._replay, None
        self.gpu_lanes.clear()
        self.not_live.clear()  # the replay shows each pod's liveness again
        self.queue.resume()
        replay()
        for namespace, name in self.caches.job_keys():
            self.queue.kick(("job", namespace, name))

    # --- events --------------------------------------------------------------------------
    def on_job(self, event: str | None, namespace: str, name: str, uid: str,
               resource_version: str | None = None, body: Mapping[str, Any] | None = None
               ) -> None:
        if event != "DELETED":
            if not self._own_write(namespace, name, resource_version):
                self.queue.kick(("job", namespace, name))
            return
        self._forget_job(namespace, name)
        self.controller.forget_job(uid)
        if body is not None and self.folds is not None:
            self.folds.add(uid, ledger.proofjob_tally(body))
        # A ProofJob deleted with any propagation policy: its pods are settled as orphans.
        for pod in pods_of(self.caches.job_pods(namespace, name), uid):
            self.queue.kick(("pod", namespace, (pod.get("metadata") or {}).get("name", "")))

    def _own_write(self, namespace: str, name: str, resource_version: str | None) -> bool:
        """Whether a job event only shows this operator's own status write coming back: the
        sync that wrote it decided from everything the write changed, so it needs no other."""
        state = self.jobs.get((namespace, name))
        if state is None or state.written is None or resource_version is None:
            return False
        return bool((state.written[1].get("metadata") or {}).get("resourceVersion")
                    == resource_version)

    def on_pod(self, event: str | None, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        self._watch_liveness(event, pod)
        owner = controller_of(pod)
        job = self.caches.job(ns, owner["name"]) if owner else None
        if owner and job and controlled_by(pod, (job.get("metadata") or {}).get("uid", "")):
            self.queue.later(("job", ns, owner["name"]), BATCH_SECONDS)
        elif event == "DELETED":
            self.queue.forget(("pod", ns, name))
        else:
            self.queue.kick(("pod", ns, name))

    def _watch_liveness(self, event: str | None, pod: Mapping[str, Any]) -> None:
        """Sweep the WorkerStatuses of the pod's node soon when the pod stopped, or started
        again, being live: the sweep of the one with its lane marks it (one write per change
        of liveness, none otherwise)."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        before = self.not_live.pop(uid, None)
        if event == "DELETED":
            return
        since = api.pod_not_live_since(pod)
        if since is not None:
            self.not_live[uid] = since
        node = (pod.get("spec") or {}).get("nodeName")
        if node and since != before:
            for ws in self.caches.node_worker_statuses(node):
                self.queue.later(("sweep", (ws.get("metadata") or {}).get("name", "")),
                                 BATCH_SECONDS)

    def on_worker_status(self, event: str | None, name: str, body: Mapping[str, Any]) -> None:
        old = self.gpu_lanes.pop(name, {})
        new = lane_views(body) if event != "DELETED" else {}
        if event == "DELETED":
            self.queue.forget(("sweep", name))
            if self.folds is not None:
                uid = (body.get("metadata") or {}).get("uid", "")
                self.folds.add(uid, ledger.workerstatus_tally(body))
        else:
            self.gpu_lanes[name] = new
            self.queue.later(("sweep", name), SWEEP_SECONDS)
        for namespace, job in sorted(changed_jobs(old, new)):
            if self.caches.job(namespace, job) is not None:
                self.queue.later(("job", namespace, job), BATCH_SECONDS)

    def on_peering(self, paused: bool) -> None:
        """A higher-priority peer paused this replica, or let it go: the caller stops the
        streams, or starts them, and work runs again once they have listed."""
        was, self.paused = self.paused, paused
        if paused:
            log.info("paused by a higher-priority peer: timers, syncs and streams stop")
            self.hold()
            self.jobs.clear()
        elif was:
            log.info("resumed: the streams list again, then every object gets a look")

    # --- the queue's work ----------------------------------------------------------------
    async def _work(self, key: Hashable) -> float | None:
        assert isinstance(key, tuple)
        kind, *rest = key
        with Timer(self.metrics, str(kind), ok=(Gone,)):
            if kind == "job":
                return await self._sync_job(*rest)
            if kind == "pod":
                return await self._settle_pod(*rest)
            return await self._sweep(*rest)

    async def _sync_job(self, namespace: str, name: str) -> float | None:
        cached = self.caches.job(namespace, name)
        if cached is None:
            self._forget_job(namespace, name)
            raise Gone
        state = self.jobs.setdefault((namespace, name), JobState())
        job = state.job(cached)
        pods = state.pods(self.caches.job_pods(namespace, name))
        statuses = self._sync_worker_statuses(namespace, name, pods)
        try:
            synced = await asyncio.to_thread(self.controller.sync, job, pods, statuses)
        except SyncFailed as failure:
            # its retry must know the pods it made, or it sends them again
            for pod in failure.created:
                state.created[pod["metadata"]["name"]] = slim(pod)
            raise failure.__cause__ or failure from None
        except JobGone:
            uid = (job.get("metadata") or {}).get("uid", "")
            log.info("ProofJob %s/%s is gone; settling its pods", namespace, name)
            self.on_job("DELETED", namespace, name, uid)
            raise Gone from None
        if synced.job is not None:
            # the cached version it started from, and every version its writes replaced
            versions = (job["metadata"]["resourceVersion"], *synced.replaced)
            state.written = (versions, synced.job)
        for pod in synced.created:
            state.created[pod["metadata"]["name"]] = slim(pod)
        for replaced, pod in synced.released:
            state.released[pod["metadata"]["name"]] = (replaced, slim(pod))
        if state.empty:
            self.jobs.pop((namespace, name), None)
        return synced.requeue_after

    async def _settle_pod(self, namespace: str, name: str) -> float | None:
        pod = self.caches.pod(namespace, name)
        if pod is None:
            raise Gone
        owner = controller_of(pod)
        job = self.caches.job(namespace, owner["name"]) if owner else None
        if owner and job and controlled_by(pod, (job.get("metadata") or {}).get("uid", "")):
            self.queue.kick(("job", namespace, owner["name"]))
            raise Gone
        delay = await asyncio.to_thread(self.controller.reclaimer.settle_orphan, pod)
        if delay is None and owner and not is_deleting(pod):
            # Its job exists after all (the cache had not seen it yet): the job's sync owns it.
            self.queue.kick(("job", namespace, owner["name"]))
        return delay

    async def _sweep(self, name: str) -> float | None:
        ws = self.caches.worker_status(name)
        if ws is None:
            raise Gone
        pods = self.caches.node_pods(workerstatus.node_of(ws))
        live = {(p.get("metadata") or {}).get("uid", ""): sweep_outcome(p) for p in pods}
        not_live = {(p.get("metadata") or {}).get("uid", ""): since for p in pods
                    if (since := api.pod_not_live_since(p)) is not None}
        await asyncio.to_thread(self.controller.reclaimer.sweep, name, live, ws, not_live)
        return SWEEP_SECONDS

    def _sync_worker_statuses(self, namespace: str, name: str, pods: list[Body]) -> list[Body]:
        """What a sync of the job reads of the WorkerStatuses: those with a lane of the job
        (its claims), and those of the nodes where a pod of it may be released now (the
        finalizer release writes where the cache shows the pod's lane, or the sweep's
        record of it)."""
        found = {(ws.get("metadata") or {}).get("name", ""): ws
                 for ws in self.caches.job_worker_statuses(namespace, name)}
        for node in {(pod.get("spec") or {}).get("nodeName") for pod in pods
                     if awaits_release(pod)} - {None}:
            for ws in self.caches.node_worker_statuses(str(node)):
                found.setdefault((ws.get("metadata") or {}).get("name", ""), ws)
        return list(found.values())

    def _forget_job(self, namespace: str, name: str) -> None:
        self.queue.forget(("job", namespace, name))
        self.jobs.pop((namespace, name), None)

    async def close(self) -> None:
        await self.queue.close()
        if self.folds is not None:
            await self.folds.close()


def _describe(key: Hashable) -> str:
    if isinstance(key, tuple) and len(key) == 3:
        kind = {"job": "sync of ProofJob", "pod": "settling pod"}.get(str(key[0]), str(key[0]))
        return f"{kind} {key[1]}/{key[2]}"
    if isinstance(key, tuple) and len(key) == 2:
        kind = {"sweep": "sweep of WorkerStatus"}.get(str(key[0]), "")
        return f"{kind} {key[1]}"
    return str(key)
