"""Kopf handlers: a few lines each, handing the work to ``kuzk.operator.runtime``.

Kopf watches the ProofJobs (and runs peering): an index keeps them in memory, and an event
handler tells the runtime what changed; a handler of the ProofJob CRD tells it when that
index is complete. kuzk's partition pods and WorkerStatuses
come from the operator's own streams (``kuzk.operator.streams``), started here, which skip
Kopf's per-event machinery and tell the runtime the same. The runtime decides what is worth
a sync and runs it on its own clock, so no handler blocks, fails or is retried by Kopf. All
state lives in one ``Runtime`` made at startup and kept in Kopf's ``memo``; ``configure``
makes the memo ``kopf.run`` starts with.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client

from kuzk.contract import api
from kuzk.contract.clock import SYSTEM
from kuzk.contract.kubeconfig import load_config
from kuzk.contract.listwatch import KubeClient
from kuzk.operator.caches import Caches, Index, pod_keys, slim, worker_status_keys
from kuzk.operator.controller import POD_CALLS_IN_FLIGHT, Controller
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.events import EventRecorder
from kuzk.operator.ledger_store import FoldQueue, LedgerStore
from kuzk.operator.metrics import OperatorMetrics
from kuzk.operator.peering import Peering, PeerWatch
from kuzk.operator.runtime import Runtime
from kuzk.operator.streams import Streams

log = logging.getLogger("kuzk.operator.handlers")
# Threads of the loop's default executor, where the runtime's blocking calls (syncs, sweeps,
# releases) run through asyncio.to_thread. A sync holds one for its status patch, so this
# bounds the syncs in flight; asyncio's own default, cpu_count + 4 (6 on two cores), queued
# the syncs of 200 jobs on 64 nodes behind one another and put job status seconds behind
# its pods. The work queue still runs one sync per job at a time.
CALL_THREADS = 32


@dataclass(frozen=True)
class Options:
    """What ``kuzk operator`` decided before Kopf starts."""

    settings: PodSettings
    peering: Peering | None = None
    ledger: tuple[str, str] | None = None  # the ledger's ConfigMap: namespace, name
    metrics: tuple[str, int] | None = None  # address and port of the operator's /metrics
    namespaces: tuple[str, ...] = ()  # the namespaces Kopf watches (none: all)


def configure(settings: PodSettings, peering: Peering | None = None,
              ledger: tuple[str, str] | None = None,
              metrics: tuple[str, int] | None = None,
              namespaces: tuple[str, ...] = ()) -> kopf.Memo:
    """Load the cluster configuration and return the memo to give ``kopf.run(memo=...)``
    (with the same ``namespaces``)."""
    load_config()
    return kopf.Memo(options=Options(settings, peering, ledger, metrics, namespaces))


def _runtime(memo: kopf.Memo) -> Runtime:
    runtime = memo.get("runtime")
    if not isinstance(runtime, Runtime):
        msg = "kuzk's runtime is missing: start the operator with `kuzk operator`"
        raise kopf.PermanentError(msg)
    return runtime


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base: Kopf builds one (a deep copy of the whole object) on every watch event,
    for the create/update/resume handlers it would compare it with. kuzk has none of those
    (a unit test keeps it so), and on a busy fleet the copies took a quarter of the event
    loop's CPU. Nothing is kept or written; every event looks unchanged to Kopf."""

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
    options = memo.get("options")
    if not isinstance(options, Options):
        msg = "kuzk.operator.handlers.configure() was not called before the operator started"
        raise kopf.PermanentError(msg)
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(CALL_THREADS, thread_name_prefix="kuzk-call"))
    # A connection for every call in flight: the pod calls' pool and the executor's threads
    # (the syncs, sweeps and releases) share this client. urllib3 otherwise drops the
    # connections past its pool (10 on two cores) and pays a TLS handshake for each.
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = POD_CALLS_IN_FLIGHT + CALL_THREADS
    api_client = client.ApiClient(configuration)
    metrics = OperatorMetrics() if options.metrics else None
    if metrics is not None:
        metrics.count_requests(api_client)
    instance = os.environ.get("POD_NAME") or socket.gethostname()
    clock = SYSTEM
    pods, worker_statuses = Index(pod_keys), Index(worker_status_keys)
    caches = Caches(indices["kuzk_jobs"], pods, worker_statuses)
    store = (LedgerStore(api_client, *options.ledger, caches.uids, clock) if options.ledger
             else None)
    controller = Controller(api_client, options.settings,
                            EventRecorder(api_client, instance, clock), store, clock)
    runtime = Runtime(controller, caches, FoldQueue(store) if store else None, metrics)
    runtime.hold(jobs=True)
    memo["runtime"] = runtime
    streams = Streams(KubeClient(configuration), runtime, pods=pods,
                      worker_statuses=worker_statuses, namespaces=options.namespaces,
                      metrics=metrics, clock=clock)
    memo["streams"] = streams
    if metrics is not None and options.metrics:
        metrics.follow(lambda: len(runtime.queue.tracked()), lambda: runtime.paused)
        address, port = options.metrics
        try:
            metrics.serve(port, address)
        except OSError as e:
            msg = f"cannot serve /metrics on {address}:{port}: {e.strerror or e}"
            raise kopf.PermanentError(msg) from None
        log.info("serving the operator's /metrics on %s:%d", address, port)
    if options.peering is None:
        streams.start()
        return

    def on_peering(paused: bool) -> None:
        # The watch's first answer starts the streams; a pause stops them, a resume lists.
        runtime.on_peering(paused)
        if paused:
            streams.stop()
        else:
            streams.start()

    watch = PeerWatch(controller.api_client, options.peering, on_peering, clock)
    watch.start()
    memo["peer_watch"] = watch


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
