"""The operator's own list+watch streams of kuzk's partition pods and WorkerStatuses.

Kopf runs one watch per resource and passes every event through its per-event machinery
(about 4 ms of CPU each, some 20 events per partition); the operator needs none of it for
these two: it keeps them in memory and tells ``kuzk.operator.runtime`` what changed. So each is a
lean ``contract.listwatch`` loop (bookmarks, resume from the last resourceVersion, a new list on
410 Gone) into an ``kuzk.operator.caches.Index``, and only the ProofJobs (and peering) stay Kopf's.

What arrives is selected by the API server: partition pods by the labels
``kuzk.operator.decide.pods`` puts on them (``POD_SELECTOR``; per watched namespace, as Kopf's
scope), and every WorkerStatus. The operator watches no Nodes: a GPU's WorkerStatus is made
by its first lane, and the garbage collector deletes it with its Node.

A list replaces what its stream held: objects that changed or are new are delivered as
events, objects gone (deleted while the stream was stopped or broken) as DELETED, so no ghost
lingers. ``Streams`` tells ``on_listed`` once every stream has listed since it started; the
runtime runs no work before that. ``stop`` (a higher-priority peer paused this replica)
cancels every loop; ``start`` lists again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kuzk.contract import api
from kuzk.contract.clock import SYSTEM, Clock
from kuzk.contract.listwatch import WHOLE, KubeClient, Shape, list_and_watch, params
from kuzk.operator.caches import POD_SHAPE, Body, Index, slim
from kuzk.operator.metrics import OperatorMetrics

log = logging.getLogger("kuzk.operator.streams")

PODS, WORKERSTATUSES = "pods", "workerstatuses"
RESOURCES = (PODS, WORKERSTATUSES)
POD_SELECTOR = f"{api.LABEL_MANAGED_BY}={api.MANAGER},{api.LABEL_JOB}"
Deliver = Callable[[str, Body], None]
Identity = tuple[str, str]


class Receiver(Protocol):
    """What the streams tell (``kuzk.operator.runtime.Runtime``)."""

    def on_pod(self, event: str | None, pod: Mapping[str, Any]) -> None: ...

    def on_worker_status(self, event: str | None, name: str,
                         body: Mapping[str, Any]) -> None: ...

    def on_listed(self, replay: Callable[[], None]) -> None: ...


def identity(body: Mapping[str, Any]) -> Identity:
    meta = body.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


@dataclass
class Stream:
    """One resource in one scope: what it holds, and what it delivers to the runtime."""

    resource: str
    path: str
    query: dict[str, str]
    index: Index
    deliver: Deliver
    namespace: str | None = None
    shape: Shape = WHOLE
    metrics: OperatorMetrics | None = None
    on_first_list: Callable[[], None] = lambda: None
    listed_once: bool = False
    objects: dict[Identity, Body] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.resource}@{self.namespace}" if self.namespace else self.resource

    # --- listwatch.Sink ---------------------------------------------------------------------
    def listed(self, items: list[Body]) -> None:
        fresh = {identity(item): slim(item) for item in items}
        gone = [key for key in self.objects if key not in fresh]
        for key in gone:
            self._count("DELETED")
            self._delete(key)
        for key, body in fresh.items():
            old = self.objects.get(key)
            if old is not None and _version(old) == _version(body):
                continue
            self._count("ADDED" if old is None else "MODIFIED")
            self._put(key, body, "ADDED" if old is None else "MODIFIED")
        if self.metrics is not None:
            self.metrics.watch_lists.labels(self.resource).inc()
        if not self.listed_once:
            self.listed_once = True
            self.on_first_list()

    def event(self, kind: str, item: Body) -> None:
        self._count(kind)
        key = identity(item)
        if kind == "DELETED":
            self.objects[key] = slim(item)
            self._delete(key)
        else:
            self._put(key, slim(item), kind)

    def connected(self) -> None:
        return None

    def lost(self) -> None:
        if self.metrics is not None:
            self.metrics.watch_restarts.labels(self.resource).inc()

    # --- the index ------------------------------------------------------------------------
    def _put(self, key: Identity, body: Body, kind: str) -> None:
        self.objects[key] = body
        self.index.put(key, body)
        self.deliver(kind, body)

    def _delete(self, key: Identity) -> None:
        body = self.objects.pop(key)
        self.index.remove(key)
        self.deliver("DELETED", body)

    def _count(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.watch_events.labels(self.resource, kind).inc()

    def replay(self) -> None:
        """Deliver everything held, as if just added."""
        for body in list(self.objects.values()):
            self.deliver("ADDED", body)


class Streams:
    """The running streams of one operator; see the module docstring. They file pods and
    WorkerStatuses into the indices given (``kuzk.operator.caches.Caches`` reads them) and tell
    ``runtime`` every change."""

    def __init__(self, kube: KubeClient, runtime: Receiver, *, pods: Index,
                 worker_statuses: Index, namespaces: tuple[str, ...] = (),
                 metrics: OperatorMetrics | None = None,
                 clock: Clock = SYSTEM) -> None:
        self.kube = kube
        self.clock = clock
        self.runtime = runtime
        self._tasks: list[asyncio.Task[None]] = []
        self._announced = False
        pod_scopes: list[str | None] = list(namespaces) or [None]

        def stream(resource: str, path: str, index: Index, deliver: Deliver,
                   query: dict[str, str], **more: Any) -> Stream:
            return Stream(resource, path, query, index, deliver, metrics=metrics,
                          on_first_list=self._check, **more)

        def on_worker_status(event: str, body: Body) -> None:
            runtime.on_worker_status(event, (body.get("metadata") or {}).get("name", ""), body)

        self.streams = [
            *(stream(PODS, api.pods_path(ns) if ns else "/api/v1/pods",
                     pods, runtime.on_pod, params(POD_SELECTOR), namespace=ns,
                     shape=POD_SHAPE)
              for ns in pod_scopes),
            stream(WORKERSTATUSES, api.WORKERSTATUSES_PATH, worker_statuses,
                   on_worker_status, {}),
        ]

    @property
    def listed(self) -> bool:
        """Whether every stream has listed since the last ``start``."""
        return all(s.listed_once for s in self.streams)

    def start(self) -> None:
        """List and watch every resource (again, after ``stop``)."""
        self.stop()
        self._tasks = [
            asyncio.get_running_loop().create_task(
                list_and_watch(self.kube, s.path, s.query, s, self.clock.wait, s.name, s.shape),
                name=f"kuzk stream {s.name}")
            for s in self.streams
        ]

    def stop(self) -> None:
        """Cancel every loop; what they hold stays until the next list replaces it."""
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        for s in self.streams:
            s.listed_once = False
        self._announced = False

    async def close(self) -> None:
        tasks = self._tasks
        self.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.kube.close()

    def replay(self) -> None:
        """Deliver every object held to the runtime, as if just added."""
        for s in self.streams:
            s.replay()

    def _check(self) -> None:
        if self.listed and not self._announced:
            self._announced = True
            log.info("listed %s; syncs may run", ", ".join(
                f"{len(s.objects)} {s.name}" for s in self.streams))
            self.runtime.on_listed(self.replay)


def _version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion", ""))
