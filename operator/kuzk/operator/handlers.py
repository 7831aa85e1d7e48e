"""Kopf handlers: a few lines each, handing the work to ``kuzk.operator.runtime``.

Kopf watches the ProofJobs (and runs peering): an index keeps them in memory, and an event
handler tells the runtime what changed; a handler of the ProofJob CRD tells it when that
index is complete. kuzk's partition pods and WorkerStatuses come from the operator's own
streams (``kuzk.operator.streams``), which skip Kopf's per-event machinery and tell the runtime
the same. The runtime decides what is worth a sync and runs it on its own clock, so no handler
blocks, fails or is retried by Kopf. All state lives in one ``Runtime`` that the startup handler
has ``kuzk.operator.startup`` build and keep in Kopf's ``memo``.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from kuzk.contract import api
from kuzk.operator.caches import slim
from kuzk.operator.peering import PeerWatch
from kuzk.operator.runtime import Runtime
from kuzk.operator.startup import start
from kuzk.operator.streams import Streams


def _runtime(memo: kopf.Memo) -> Runtime:
    runtime = memo.get("runtime")
    if not isinstance(runtime, Runtime):
        msg = "kuzk's runtime is missing: start the operator with `kuzk operator`"
        raise kopf.PermanentError(msg)
    return runtime


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base: Kopf builds one (a deep copy of the whole object) on every watch event,
    for the create/update/resume handlers it would compare it with. kuzk has none of those
    (a unit test keeps it so), so no event pays for a copy: nothing is kept or written, and
    every event looks unchanged to Kopf."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **indices: Any) -> None:
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.persistence.diffbase_storage = NoDiffBase()
    start(memo, indices["kuzk_jobs"])


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    watch = memo.get("peer_watch")
    if isinstance(watch, PeerWatch):
        watch.stop()
    streams = memo.get("streams")
    if isinstance(streams, Streams):
        await streams.close()
    await _runtime(memo).close()


@kopf.index(api.GROUP, api.VERSION, api.PROOFJOB_PLURAL, id="kuzk_jobs")
async def kuzk_jobs(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): slim(body)}


@kopf.on.event(api.GROUP, api.VERSION, api.PROOFJOB_PLURAL)
async def proofjob_event(type: str | None, namespace: str | None, name: str, uid: str,
                         meta: kopf.Meta, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    _runtime(memo).on_job(type, namespace or "", name, uid, meta.get("resourceVersion"),
                          body if type == "DELETED" else None)


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions",
               field="metadata.name", value=f"{api.PROOFJOB_PLURAL}.{api.GROUP}")
async def proofjobs_indexed(memo: kopf.Memo, **_: Any) -> None:
    """Kopf calls no handler before every index of its has listed: the first event of the
    ProofJob CRD (which exists while the operator runs) says the ProofJob index is complete."""
    _runtime(memo).on_jobs_indexed()
