"""Kopf handlers: a few lines each, handing the work to ``kuzk.controller``.

Any event of a ProofJob, or of a pod labelled with its ``kuzk.io/job``, syncs that job; a
timer per job is the safety net. Syncs of one job are serialized by a lock per job, and the
blocking client calls run in a thread so the event loop stays free.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any

import kopf
from kubernetes import client, config

from kuzk import api
from kuzk.actions import Event
from kuzk.controller import Conflict, Controller
from kuzk.pods import PodSettings

log = logging.getLogger("kuzk.handlers")
CONTROLLER: Controller | None = None
LOCKS: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)
REQUEUES: dict[tuple[str, str], asyncio.TimerHandle] = {}
TASKS: set[asyncio.Task[None]] = set()


def configure(settings: PodSettings) -> None:
    """Called by ``kuzk operator`` before Kopf starts."""
    global CONTROLLER
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
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
    key = (namespace, name)
    async with LOCKS[key]:
        ctl = _controller()
        for _ in range(5):
            try:
                delay = await asyncio.to_thread(ctl.sync, namespace, name)
                break
            except Conflict:
                continue
        else:
            msg = f"{namespace}/{name} kept changing under the operator; retrying"
            raise kopf.TemporaryError(msg, delay=1)
    if delay is not None:
        _requeue(key, delay)


def _requeue(key: tuple[str, str], delay: float) -> None:
    """Look at the job again after ``delay`` seconds (a deadline, a TTL, a grace period)."""
    old = REQUEUES.pop(key, None)
    if old is not None:
        old.cancel()

    def fire() -> None:
        REQUEUES.pop(key, None)
        task = asyncio.ensure_future(sync(*key))
        TASKS.add(task)
        task.add_done_callback(TASKS.discard)

    REQUEUES[key] = asyncio.get_running_loop().call_later(max(delay, 0.1), fire)


@kopf.on.event(api.GROUP, api.VERSION, api.PROOFJOB_PLURAL)
async def proofjob_event(type: str, namespace: str, name: str, **_: Any) -> None:
    if type != "DELETED":
        await sync(namespace, name)


@kopf.on.event(
    "", "v1", "pods", labels={api.LABEL_MANAGED_BY: api.MANAGER, api.LABEL_JOB: kopf.PRESENT}
)
async def pod_event(namespace: str, meta: kopf.Meta, **_: Any) -> None:
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == api.PROOFJOB_KIND and owner.get("controller"):
            await sync(namespace, owner["name"])


@kopf.timer(api.GROUP, api.VERSION, api.PROOFJOB_PLURAL, interval=10, idle=0)
async def proofjob_timer(namespace: str, name: str, **_: Any) -> None:
    await sync(namespace, name)


@kopf.on.event("", "v1", "nodes")
async def node_event(type: str, body: kopf.Body, **_: Any) -> None:
    if type != "DELETED":
        await asyncio.to_thread(_controller().ensure_worker_status, dict(body))


@kopf.timer(api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, interval=30)
async def worker_sweep(spec: kopf.Spec, **_: Any) -> None:
    await asyncio.to_thread(_controller().sweep, spec["nodeName"])
