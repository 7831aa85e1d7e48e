"""Kopf handlers: a few lines each, handing the work to ``kuzk.controller``.

Any event of a ProofJob, or of a pod labelled with its ``kuzk.io/job``, syncs that job; a
resync scheduled after each sync is the safety net and the clock. Syncs of one job are
serialized by a lock per job, and the blocking client calls run in a thread so the event
loop stays free.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Coroutine
from typing import Any

import kopf
from kubernetes import client

from kuzk import api
from kuzk.actions import Event
from kuzk.controller import Conflict, Controller, load_config
from kuzk.pods import PodSettings

log = logging.getLogger("kuzk.handlers")
CONTROLLER: Controller | None = None
LOCKS: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)
DIRTY: set[tuple[str, str]] = set()
NAMESPACES: set[str] = set()
LATER: dict[tuple[str, ...], asyncio.TimerHandle] = {}
SWEEP_SECONDS = 30.0
TASKS: set[asyncio.Task[None]] = set()


def configure(settings: PodSettings, namespaces: Collection[str] = ()) -> None:
    """Called by ``kuzk operator`` before Kopf starts; ``namespaces`` empty means all."""
    global CONTROLLER
    NAMESPACES.update(namespaces)
    load_config()
    CONTROLLER = Controller(client.ApiClient(), settings, _post_event)


def _post_event(job: dict[str, Any], event: Event) -> None:
    kopf.event(job, type=event.type, reason=event.reason, message=event.message)


def _controller() -> Controller:
    if CONTROLLER is None:
        msg = "kuzk.handlers.configure() was not called before the operator started"
        raise kopf.PermanentError(msg)
    return CONTROLLER


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 8


async def sync(namespace: str, name: str) -> None:
    """Sync one job. Events that arrive while a sync of the job runs are coalesced into one
    more sync after it, so a burst of pod events costs two syncs, not one per event."""
    key = (namespace, name)
    lock = LOCKS[key]
    if lock.locked():
        DIRTY.add(key)
        return
    async with lock:
        while True:
            DIRTY.discard(key)
            delay = await _sync_once(namespace, name)
            if key not in DIRTY:
                break
    if delay is None:
        _cancel(("job", *key))
    else:
        _later(("job", *key), delay, lambda: sync(namespace, name))


async def _sync_once(namespace: str, name: str) -> float | None:
    ctl = _controller()
    for _ in range(5):
        try:
            return await asyncio.to_thread(ctl.sync, namespace, name)
        except Conflict:
            continue
    msg = f"{namespace}/{name} kept changing under the operator; retrying"
    raise kopf.TemporaryError(msg, delay=1)


async def sweep(node: str) -> None:
    await asyncio.to_thread(_controller().sweep, node)
    _later(("sweep", node), SWEEP_SECONDS, lambda: sweep(node))


def _cancel(key: tuple[str, ...]) -> None:
    old = LATER.pop(key, None)
    if old is not None:
        old.cancel()


def _later(key: tuple[str, ...], delay: float,
           work: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``work`` after ``delay`` seconds, replacing what was scheduled under ``key``.

    This is the safety net and the clock (deadlines, TTLs, grace periods, the worker sweep).
    Kopf timers would do it, but they put a finalizer on every object, which would leave
    ProofJobs and WorkerStatuses undeletable once the operator is uninstalled.
    """
    _cancel(key)

    def fire() -> None:
        LATER.pop(key, None)
        task = asyncio.ensure_future(work())
        TASKS.add(task)
        task.add_done_callback(TASKS.discard)

    LATER[key] = asyncio.get_running_loop().call_later(max(delay, 0.1), fire)


@kopf.on.event(api.GROUP, api.VERSION, api.PROOFJOB_PLURAL)
async def proofjob_event(type: str, namespace: str, name: str, **_: Any) -> None:
    if type == "DELETED":
        _cancel(("job", namespace, name))
    else:
        await sync(namespace, name)


@kopf.on.event(
    "", "v1", "pods", labels={api.LABEL_MANAGED_BY: api.MANAGER, api.LABEL_JOB: kopf.PRESENT}
)
async def pod_event(namespace: str, meta: kopf.Meta, **_: Any) -> None:
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == api.PROOFJOB_KIND and owner.get("controller"):
            await sync(namespace, owner["name"])


@kopf.on.event("", "v1", "nodes")
async def node_event(type: str, body: kopf.Body, **_: Any) -> None:
    if type != "DELETED":
        await asyncio.to_thread(_controller().ensure_worker_status, dict(body))


@kopf.on.event(api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL)
async def workerstatus_event(type: str, spec: kopf.Spec, status: kopf.Status,
                             **_: Any) -> None:
    key = ("sweep", spec["nodeName"])
    if type == "DELETED":
        _cancel(key)
        return
    if key not in LATER:
        _later(key, SWEEP_SECONDS, lambda: sweep(spec["nodeName"]))
    # A worker's stage is part of its job's status: sync the jobs the workers are about.
    jobs = {(w["job"]["namespace"], w["job"]["name"]) for w in status.get("workers") or []
            if w.get("job", {}).get("namespace") and w["job"].get("name")}
    for namespace, name in sorted(jobs):
        if not NAMESPACES or namespace in NAMESPACES:
            await sync(namespace, name)
