"""The operator's caches: read access to three ``@kopf.index`` indices of ProofJobs, kuzk's
partition pods and WorkerStatuses. Kopf fills them from its list and watch before any other
handler runs, so a restarted operator never decides from a half-listed world; a steady-state
sync reads only these and spends API calls on writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kuzk import api

Body = dict[str, Any]
JobKey = tuple[str, str]


class Caches:
    """Read access to the indices (views the watches keep current)."""

    def __init__(self, jobs: Mapping[Any, Iterable[Body]], pods: Mapping[Any, Iterable[Body]],
                 worker_statuses: Mapping[Any, Iterable[Body]]) -> None:
        self._jobs, self._pods, self._ws = jobs, pods, worker_statuses

    def job(self, namespace: str, name: str) -> Body | None:
        """The ProofJob; of namesakes (a ghost and its successor), the newest."""
        found = list(self._jobs.get((namespace, name), ()))
        if not found:
            return None
        return max(found, key=lambda j: (j.get("metadata") or {}).get("creationTimestamp", ""))

    def job_keys(self) -> list[JobKey]:
        """(namespace, name) of every ProofJob in the cache."""
        return list(self._jobs)

    def job_pods(self, namespace: str, name: str) -> list[Body]:
        return list(self._pods.get(("job", namespace, api.job_label_value(name)), ()))

    def pod(self, namespace: str, name: str) -> Body | None:
        return next(iter(self._pods.get(("pod", namespace, name), ())), None)

    def node_pods(self, node: str) -> list[Body]:
        return list(self._pods.get(("node", node), ()))

    def worker_status(self, node: str | None) -> Body | None:
        return next(iter(self._ws.get(node, ()))) if node in self._ws else None

    def worker_statuses(self) -> list[Body]:
        return [ws for node in list(self._ws) for ws in self._ws.get(node, ())]

    def uids(self) -> set[str]:
        """The UIDs of every ProofJob and WorkerStatus in the cache."""
        bodies = [*(j for key in list(self._jobs) for j in self._jobs.get(key, ())),
                  *self.worker_statuses()]
        return {(b.get("metadata") or {}).get("uid", "") for b in bodies}


def slim(body: Mapping[str, Any]) -> Body:
    """The object as the caches keep it: without managedFields, which nothing reads."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {**body, "metadata": meta}


def pod_keys(pod: Mapping[str, Any]) -> dict[tuple[str, ...], Body]:
    """Where a pod is filed in the pod index: by job label, by name and by node."""
    meta = pod.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    body = slim(pod)
    keys: dict[tuple[str, ...], Body] = {
        ("job", ns, (meta.get("labels") or {}).get(api.LABEL_JOB, "")): body,
        ("pod", ns, name): body,
    }
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        keys[("node", node)] = body
    return keys
