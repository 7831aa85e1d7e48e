"""``kuzk release-finalizers``, the uninstall hook: no partition pod is left undeletable once
the operator is gone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from kubernetes import client

from kuzk.contract import api
from kuzk.operator.decide.actions import ReleaseWorker
from kuzk.operator.decide.observe import controller_of
from kuzk.operator.reclaim import Reclaimer


def release_finalizers(api_client: client.ApiClient, namespaces: Sequence[str]) -> int:
    """Release the worker of every partition pod that a ProofJob of ``namespaces`` (empty:
    all) controls and drop its finalizer. Another pod that carries the label and the
    finalizer (some other tool's, or a copy) is left alone. Returns how many it released."""
    reclaimer = Reclaimer(api_client)
    selector = f"{api.LABEL_MANAGED_BY}={api.MANAGER}"
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    scopes: list[str | None] = list(namespaces) or [None]
    jobs: set[str] = set()
    for ns in scopes:
        listed = cast(dict[str, Any], (
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
            pod: dict[str, Any] = api_client.sanitize_for_serialization(item)  # type: ignore[no-untyped-call]
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            if (controller_of(pod) or {}).get("uid") not in jobs:
                continue
            if api.FINALIZER in (meta.get("finalizers") or []):
                action = ReleaseWorker(meta["name"], meta["uid"], spec.get("nodeName"))
                reclaimer.release(meta["namespace"], action, pod)
                done += 1
    return done
