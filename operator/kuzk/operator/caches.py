"""The operator's caches: read access to the indices of ProofJobs (Kopf's ``@kopf.index``),
kuzk's partition pods and WorkerStatuses (``Index``es the operator's own streams fill,
``operator.streams``). The runtime runs no work before every stream has listed (and Kopf runs no
handler before its index has), so a restarted operator never decides from a half-listed
world; a steady-state sync reads only these and spends API calls on writes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, TypedDict

import msgspec

from kuzk.contract import api, workerstatus
from kuzk.contract.listwatch import Shape
from kuzk.contract.workerstatus.lanes import lane_views

Body = dict[str, Any]
JobKey = tuple[str, str]


class Index(Mapping[Hashable, Iterable[Body]]):
    """Objects filed under the keys ``keys(body)`` names (several per object), shaped like a
    Kopf index: key to the objects filed there. ``put`` refiles an object, ``remove`` drops
    it; an object is named by its identity (namespace, name)."""

    def __init__(self, keys: Callable[[Body], Mapping[Hashable, Body]]) -> None:
        self._keys = keys
        self._filed: dict[Hashable, dict[Hashable, Body]] = {}
        self._where: dict[Hashable, list[Hashable]] = {}  # identity -> keys it is filed under

    def put(self, identity: Hashable, body: Body) -> None:
        self.remove(identity)
        filed = self._keys(body)
        for key, value in filed.items():
            self._filed.setdefault(key, {})[identity] = value
        self._where[identity] = list(filed)

    def remove(self, identity: Hashable) -> None:
        for key in self._where.pop(identity, ()):
            bucket = self._filed.get(key)
            if bucket is not None:
                bucket.pop(identity, None)
                if not bucket:
                    del self._filed[key]

    def __getitem__(self, key: Hashable) -> Iterable[Body]:
        return self._filed[key].values()

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._filed)

    def __len__(self) -> int:
        return len(self._filed)


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

    def worker_status(self, name: str | None) -> Body | None:
        return next(iter(self._ws.get(("ws", name), ())), None)

    def worker_statuses(self) -> list[Body]:
        return [ws for key in list(self._ws) if key[0] == "ws" for ws in self._ws.get(key, ())]

    def node_worker_statuses(self, node: str) -> list[Body]:
        """The WorkerStatuses of ``node``: its GPUs', and a legacy one of its own."""
        return list(self._ws.get(("node", node), ()))

    def job_worker_statuses(self, namespace: str, name: str) -> list[Body]:
        """The WorkerStatuses with a lane of the ProofJob: all a sync of it reads of them,
        so its cost follows the job's lanes, not the fleet's GPUs."""
        return list(self._ws.get(("job", namespace, name), ()))

    def uids(self) -> set[str]:
        """The UIDs of every ProofJob and WorkerStatus in the cache."""
        bodies = [*(j for key in list(self._jobs) for j in self._jobs.get(key, ())),
                  *self.worker_statuses()]
        return {(b.get("metadata") or {}).get("uid", "") for b in bodies}


def slim(body: Mapping[str, Any]) -> Body:
    """The object as the caches keep it: without managedFields, which nothing reads."""
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    return {**body, "metadata": meta}


class PodMetadata(TypedDict, total=False):
    """What the operator reads of a partition pod's metadata: all of it but managedFields."""

    name: Any
    generateName: Any
    namespace: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any


class PodSpec(TypedDict, total=False):
    """What the operator reads of a partition pod's spec: where it was scheduled. Nothing
    decides on the containers the operator wrote (the pod's name says its attempt)."""

    nodeName: Any


class Pod(TypedDict, total=False):
    apiVersion: Any
    kind: Any
    metadata: PodMetadata
    spec: PodSpec
    status: Any


class PodEvent(TypedDict, total=False):
    type: Any
    object: Pod


class PodList(TypedDict, total=False):
    metadata: Any
    items: list[Pod]


# The partition pods as the pod streams read them: only what the operator reads (``Pod``).
# msgspec reads past the rest without building it: a pod's managedFields and container specs
# are two thirds of its 9 kB, and decoding them whole cost 180 us of CPU an event in the
# operator (0.55 s of its 3.9 s at 16 x 8 x 3), against 28 us read this way.
POD_SHAPE = Shape(msgspec.json.Decoder(PodEvent).decode, msgspec.json.Decoder(PodList).decode)
# A pod an API call answers with (created, patched, read, deleted), read the same way.
decode_pod = msgspec.json.Decoder(Pod).decode


def worker_status_keys(body: Body) -> dict[Hashable, Body]:
    """Where a WorkerStatus is filed, whatever its shape: by name, by node, and by the job of
    each of its lanes."""
    keys: dict[Hashable, Body] = {
        ("ws", (body.get("metadata") or {}).get("name", "")): body,
        ("node", workerstatus.node_of(body)): body,
    }
    for view in lane_views(body).values():
        keys[("job", view.job_namespace, view.job_name)] = body
    return keys


def pod_keys(pod: Mapping[str, Any]) -> dict[Hashable, Body]:
    """Where a pod is filed in the pod index: by job label, by name and by node. Its stream
    hands it in as the caches keep it (``slim``)."""
    meta = pod.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    body = dict(pod)
    keys: dict[Hashable, Body] = {
        ("job", ns, (meta.get("labels") or {}).get(api.LABEL_JOB, "")): body,
        ("pod", ns, name): body,
    }
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        keys[("node", node)] = body
    return keys
