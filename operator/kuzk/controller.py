"""Applies reconcile decisions to the API server: the thin, blocking layer under the handlers.

Everything here runs in a worker thread (the ``kubernetes`` client blocks). One call of
``Controller.sync`` reads the ProofJob, its pods and the WorkerStatuses fresh, asks the pure
``reconcile`` what to do, writes the status with the resourceVersion it read (a concurrent
writer makes it 409, and the caller simply syncs again) and then applies the actions, each
idempotent, so a crash between any two steps is repaired by the next sync.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from kuzk import api, workers
from kuzk.actions import CreatePod, Decision, DeleteJob, DeletePod, Event, ReleaseWorker
from kuzk.pods import PodSettings
from kuzk.reconcile import reconcile

log = logging.getLogger("kuzk.controller")
RESYNC_SECONDS = 10.0
POD_CALLS_IN_FLIGHT = 16
Poster = Callable[[dict[str, Any], Event], None]


def load_config() -> None:
    """In a pod, its ServiceAccount; elsewhere, the kubeconfig (KUBECONFIG or ~/.kube)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


def _outcome(pod: client.V1Pod) -> workers.Outcome:
    if pod.status.phase == "Succeeded":
        return "succeeded"
    disrupted = any(
        c.type == "DisruptionTarget" and c.status == "True" for c in pod.status.conditions or []
    )
    return "disrupted" if disrupted or pod.metadata.deletion_timestamp else "failed"


class Conflict(Exception):
    """The ProofJob changed between read and status write; sync again."""


@dataclass
class Controller:
    api_client: client.ApiClient
    settings: PodSettings
    post_event: Poster

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self._pool = ThreadPoolExecutor(max_workers=POD_CALLS_IN_FLIGHT,
                                        thread_name_prefix="kuzk-pods")

    # --- reads -------------------------------------------------------------------------
    def _job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                self.custom.get_namespaced_custom_object(
                    api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, name
                )
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _pods(self, namespace: str, name: str) -> list[dict[str, Any]]:
        pods = self.core.list_namespaced_pod(namespace, label_selector=api.job_selector(name))
        return [self.api_client.sanitize_for_serialization(p) for p in pods.items]

    def _workers(self) -> list[dict[str, Any]]:
        listing = self.custom.list_cluster_custom_object(
            api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL
        )
        return list(listing.get("items", []))

    # --- sync --------------------------------------------------------------------------
    def sync(self, namespace: str, name: str) -> float | None:
        """Reconcile one ProofJob once; return seconds until it needs another look (at most
        RESYNC_SECONDS while it runs; None once it is finished and has no TTL to wait for)."""
        # The three reads are independent: one round trip of latency instead of three.
        job_f = self._pool.submit(self._job, namespace, name)
        pods_f = self._pool.submit(self._pods, namespace, name)
        workers_f = self._pool.submit(self._workers)
        job, pods, workers_now = job_f.result(), pods_f.result(), workers_f.result()
        if job is None:
            return None
        try:
            decision = reconcile(job, pods, workers_now, datetime.now(UTC), settings=self.settings)
        except ValueError as e:
            # The API server's schema rejects bad specs; this only happens for objects stored
            # before a schema change. Say so on the object instead of crashing the loop.
            self.post_event(job, Event("Warning", "InvalidSpec", str(e)))
            return None
        self._write_status(job, decision.status)
        self._apply(job, decision)
        if decision.status.get("phase") in ("Succeeded", "Failed"):
            return decision.requeue_after
        return min(decision.requeue_after or RESYNC_SECONDS, RESYNC_SECONDS)

    def _write_status(self, job: dict[str, Any], status: dict[str, Any]) -> None:
        if status == job.get("status"):
            return
        md = job["metadata"]
        body = {"metadata": {"resourceVersion": md["resourceVersion"]}, "status": status}
        try:
            self.custom.patch_namespaced_custom_object_status(
                api.GROUP, api.VERSION, md["namespace"], api.PROOFJOB_PLURAL, md["name"], body
            )
        except ApiException as e:
            if e.status == 409:
                raise Conflict(md["name"]) from e
            raise

    def _apply(self, job: dict[str, Any], decision: Decision) -> None:
        ns = job["metadata"]["namespace"]
        # Pod creates and deletes are independent of each other: send them concurrently, as
        # the Job controller does, instead of one round trip after another.
        pod_calls = [
            (self._create if isinstance(a, CreatePod) else self._delete, a)
            for a in decision.actions if isinstance(a, CreatePod | DeletePod)
        ]
        for future in [self._pool.submit(call, ns, a) for call, a in pod_calls]:
            future.result()
        for action in decision.actions:
            if isinstance(action, ReleaseWorker):
                self.release(ns, action)
            elif isinstance(action, Event):
                self.post_event(job, action)
            elif isinstance(action, DeleteJob):
                self._delete_job(job, action)

    def _create(self, ns: str, action: CreatePod) -> None:
        try:
            self.core.create_namespaced_pod(ns, action.manifest)
        except ApiException as e:
            if e.status != 409:  # AlreadyExists: an earlier sync (or replica) created it
                raise

    def _delete(self, ns: str, action: DeletePod) -> None:
        opts = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=action.uid))
        try:
            self.core.delete_namespaced_pod(action.name, ns, body=opts)
        except ApiException as e:
            if e.status not in (404, 409):  # gone, or a namesake with another uid
                raise

    def release(self, ns: str, action: ReleaseWorker) -> None:
        """The finalizer write: release the worker (guarded), then drop the finalizer."""
        try:
            pod = self.core.read_namespaced_pod(action.pod_name, ns)
        except ApiException as e:
            if e.status == 404:
                return
            raise
        if pod.metadata.uid != action.pod_uid:
            return
        if action.node:
            outcome = _outcome(pod)
            ref = workers.PodRef(action.pod_name, action.pod_uid)
            released = workers.release(self.api_client, action.node, ref, outcome)
            log.info(
                "finalizer release of %s/%s on %s (%s): %s",
                ns,
                action.pod_name,
                action.node,
                outcome,
                "applied" if released else "nothing held it",
            )
        self._drop_finalizer(ns, pod)

    def _drop_finalizer(self, ns: str, pod: client.V1Pod) -> None:
        finalizers = pod.metadata.finalizers or []
        if api.FINALIZER not in finalizers:
            return
        i = finalizers.index(api.FINALIZER)
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": pod.metadata.resource_version,
            },
            {"op": "remove", "path": f"/metadata/finalizers/{i}"},
        ]
        try:
            self.core.patch_namespaced_pod(pod.metadata.name, ns, patch)
        except ApiException as e:
            if e.status == 404:
                return
            if e.status in (409, 422):  # changed meanwhile: the next sync retries
                raise Conflict(pod.metadata.name) from e
            raise

    def _delete_job(self, job: dict[str, Any], action: DeleteJob) -> None:
        md = job["metadata"]
        log.info("deleting ProofJob %s/%s: %s", md["namespace"], md["name"], action.reason)
        opts = client.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=client.V1Preconditions(uid=md["uid"]),
        )
        try:
            self.custom.delete_namespaced_custom_object(
                api.GROUP,
                api.VERSION,
                md["namespace"],
                api.PROOFJOB_PLURAL,
                md["name"],
                body=opts,
            )
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    # --- nodes and workers ---------------------------------------------------------------
    def ensure_worker_status(self, node: dict[str, Any]) -> None:
        capacity = (node.get("status") or {}).get("capacity") or {}
        if int(capacity.get(self.settings.gpu_resource, 0) or 0) <= 0:
            return
        md = node["metadata"]
        workers.ensure_worker_status(self.api_client, md["name"], md["uid"])

    def sweep(self, node_name: str) -> None:
        """Release workers whose pod is gone or silent and not running (periodic safety net)."""
        pods = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node_name}",
            label_selector=f"{api.LABEL_MANAGED_BY}={api.MANAGER}",
        )
        live = {p.metadata.uid: p.status.phase for p in pods.items}
        released = workers.sweep(self.api_client, node_name, live, datetime.now(UTC))
        for item in released:
            log.info("sweep released %s on %s", item, node_name)
