"""Finalizers and orphans: what the operator gives back when a partition pod ends or its job goes.

A partition pod carries the ``kuzk.io/release-worker`` finalizer so that its lane on its GPU's
WorkerStatus is released (the guarded write of ``kuzk.contract.workerstatus.writes``) before the
pod and its identity are gone. ``Reclaimer.release`` makes that write and drops the finalizer;
``settle_orphan`` deletes and releases a pod whose ProofJob is gone; ``sweep`` releases the
lanes of pods that ended without it and retires a per-node WorkerStatus of an earlier release.
Blocking calls, run in worker threads; ``kuzk.operator.controller.Controller`` holds one (its
``reclaimer``) and releases through it the pods its decisions name.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk.contract import api
from kuzk.contract.clock import SYSTEM, Clock
from kuzk.contract.rawjson import JSON_PATCH, METADATA_ONLY, call
from kuzk.contract.workerstatus import decisions, writes
from kuzk.operator.caches import decode_pod
from kuzk.operator.decide.actions import ReleaseWorker
from kuzk.operator.decide.observe import controller_of, is_deleting, release_action, worker_outcome

log = logging.getLogger("kuzk.operator.reclaim")
ORPHAN_LOOK_SECONDS = 30.0
CONFLICT_TRIES = 3
Body = dict[str, Any]


class Conflict(Exception):
    """The object kept changing between read and write (a ProofJob's status, a pod's
    finalizers); the next sync tries again."""


class Reclaimer:
    """The finalizer release, orphaned pods and the WorkerStatus sweep, over one API client.
    ``namespaces`` are those the operator handles (empty: every one): its sweep touches only
    the lanes of their jobs, since its cache holds only their pods (one of several shards)."""

    def __init__(self, api_client: client.ApiClient, clock: Clock = SYSTEM,
                 namespaces: Collection[str] = ()) -> None:
        self.api_client = api_client
        self.clock = clock
        self.namespaces = frozenset(namespaces)

    # --- the finalizer -------------------------------------------------------------------
    def release(
        self,
        ns: str,
        action: ReleaseWorker,
        pod: Body | None = None,
        homes: Sequence[str] | None = None,
    ) -> Body | None:
        """The finalizer write: release the worker (guarded), then drop the finalizer.

        ``pod`` comes from the caller's cache; without it, it is read. ``homes`` are the
        WorkerStatuses the caller's cache shows concerning the pod (``decisions.concerns``: its
        lane, or the sweep's record of it): the release is a guarded write to each, and none
        when the cache shows none (the lane left with its prover). A cache that lags behind
        the pod's join misses nothing for long: the join's own event sweeps that GPU within
        ``runtime.SWEEP_SECONDS``, and the sweep releases the lane of an ended pod once its
        finalizer is gone. Without ``homes`` (no cache: orphans, the uninstall hook) the
        node's WorkerStatuses are listed. Returns the pod as the finalizer patch left it
        (None when no patch was made)."""
        if pod is None:
            pod = self.read_pod(ns, action.pod_name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != action.pod_uid:
            return None
        if action.node:
            outcome = worker_outcome(pod)
            ref = decisions.PodRef(action.pod_name, action.pod_uid)
            if homes is None:
                released = writes.release(self.api_client, action.node, ref, outcome,
                                                 clock=self.clock)
            else:
                released = any([writes.release_at(self.api_client, name, ref, outcome,
                                                         clock=self.clock) for name in homes])
            log.info(
                "finalizer release of %s/%s on %s (%s): %s",
                ns, action.pod_name, action.node, outcome,
                "applied" if released else "nothing held it",
            )
        return self._drop_finalizer(ns, pod)

    def read_pod(self, ns: str, name: str) -> Body | None:
        try:
            return call(self.api_client, "GET", api.pods_path(ns, name), decode=decode_pod)
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
                return call(self.api_client, "PATCH", api.pods_path(ns, meta["name"]), patch,
                            content_type=JSON_PATCH, decode=decode_pod)
            except ApiException as e:
                if e.status == 404:
                    return None
                if e.status not in (409, 422):
                    raise
            fresh = self.read_pod(ns, meta.get("name", ""))
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
            opts = {"preconditions": {"uid": meta["uid"]}}
            try:
                pod = call(self.api_client, "DELETE", api.pods_path(ns, name), opts,
                           decode=decode_pod)
            except ApiException as e:
                if e.status in (404, 409):
                    return None
                raise
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
            job = call(self.api_client, "GET", api.proofjob_path(ns, owner.get("name", "")),
                       accept=METADATA_ONLY)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return bool(job.get("metadata", {}).get("uid") == owner.get("uid"))

    # --- workers -----------------------------------------------------------------------
    def sweep(
        self, name: str, live: Mapping[str, api.WorkerOutcome | None],
        worker_status: Body | None, not_live: Mapping[str, datetime] | None = None,
    ) -> list[decisions.Released]:
        """Release the lanes of WorkerStatus ``name`` whose pod is gone, or ended with its
        finalizer gone, and mark its lanes whose pod is not live (periodic, and on a change
        of a pod's liveness); then retire it if it is a legacy one no lane is on.

        ``live`` maps the UIDs of kuzk's pods on its node to ``observe.sweep_outcome``,
        ``not_live`` those of running pods that are not live to since when (both from the
        cache, so only of this operator's namespaces: the lanes of other namespaces' jobs
        are left to the operator of theirs); the guarded write is made only when the cached
        WorkerStatus shows something to change."""
        now = self.clock.now()
        cached = worker_status or {}
        released = []
        decided = decisions.decide_sweep(cached.get("status") or {}, live, now, not_live,
                                         self.namespaces)
        if decided.status is not None:
            released = writes.sweep(self.api_client, name, live, now, not_live,
                                     scope=self.namespaces, clock=self.clock)
            for item in released:
                log.info("sweep released %s on %s", item, name)
        elif writes.retire_legacy(self.api_client, cached):
            log.info("retired WorkerStatus %s of the per-node kind: no lane is on it; its"
                     " counters go to the ledger", name)
        return released
