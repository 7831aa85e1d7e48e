"""Start-up, in one place: what ``kuzk operator`` decides before Kopf starts (``configure``: the
cluster configuration, the Kopf handlers, the memo), how it runs Kopf (``run``, with peering
or standalone), and what Kopf's startup handler builds (``start``: the API client, the
controller, the runtime, the streams, the operator's ``/metrics`` and the peering watch).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import random
import secrets
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client, config

from kuzk.contract import logs
from kuzk.contract.clock import SYSTEM
from kuzk.contract.kubeconfig import load_config, no_configuration
from kuzk.contract.listwatch import KubeClient
from kuzk.operator.caches import Caches, Index, pod_keys, worker_status_keys
from kuzk.operator.controller import POD_CALLS_IN_FLIGHT, Controller
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.events import EventRecorder
from kuzk.operator.ledger_store import FoldQueue, LedgerStore
from kuzk.operator.metrics import OperatorMetrics
from kuzk.operator.peering import Peering, PeeringError, PeerWatch, ensure_peering
from kuzk.operator.runtime import Runtime
from kuzk.operator.streams import Streams

log = logging.getLogger("kuzk.operator.startup")
# Threads of the loop's default executor, where the runtime's blocking calls (syncs, sweeps,
# releases) run through asyncio.to_thread. A sync holds one for its status patch, so this
# bounds the syncs in flight; it is well above asyncio's own default (cpu_count + 4), so that a
# job's status never waits behind other jobs' syncs. The work queue still runs one sync per job
# at a time.
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
    """Load the cluster configuration, register Kopf's handlers (``kuzk.operator.handlers``)
    and return the memo to give ``kopf.run(memo=...)`` (with the same ``namespaces``)."""
    importlib.import_module("kuzk.operator.handlers")
    load_config()
    return kopf.Memo(options=Options(settings, peering, ledger, metrics, namespaces))


def run(args: argparse.Namespace) -> int:
    """``kuzk operator``: configure, then run Kopf with the memo ``configure`` made."""
    kopf.configure(verbose=args.verbose)
    logs.configure(args.log_format, logging.DEBUG if args.verbose else logging.INFO)
    logging.getLogger("kuzk").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if not args.verbose:
        # Kopf logs "Handler '...' succeeded." for every watch event at INFO: about a hundred
        # lines a second on a busy fleet, and a measurable share of the operator's CPU. Its
        # warnings and errors stay; kuzk logs what it does itself.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    namespaces = list(args.namespace)
    peering: Peering | None = None
    if not args.standalone:
        # An explicit peering name makes peering mandatory: replicas wait for the peering
        # CRD rather than silently acting alone. kuzk's clock follows the same peering, so
        # it needs the identity Kopf uses.
        priority = args.priority if args.priority is not None else random.randint(1, 2**30)
        identity = os.environ.get("POD_ID") or (
            f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"
        )
        peering = Peering(args.peering, identity, priority, tuple(namespaces))
    try:
        memo = configure(
            PodSettings(
                image=args.prover_image,
                command=tuple(args.prover_command),
                gpu_resource=args.gpu_resource,
                service_account_name=args.prover_service_account,
                kernel_cache_host_path=args.prover_kernel_cache_host_path,
                allowed_images=tuple(args.allowed_prover_image),
                allowed_priority_classes=tuple(args.allowed_priority_class),
                log_format=args.log_format,
                image_pull_secrets=tuple(dict.fromkeys(args.prover_image_pull_secret)),
                filecoin_command=tuple(args.filecoin_prover_command),
                filecoin_parameters_host_path=args.filecoin_parameters_host_path,
                probes=args.prover_probes,
            ),
            peering,
            args.ledger,
            (args.metrics_address, args.metrics_port) if args.metrics_port else None,
            tuple(namespaces),
        )
    except (config.ConfigException, OSError) as e:
        return no_configuration(e)
    if peering is not None:
        try:
            ensure_peering(client.ApiClient(), args.peering, namespaces)
        except PeeringError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    settings = kopf.OperatorSettings()
    settings.peering.lifetime = args.peering_lifetime
    kopf.run(
        settings=settings,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness_endpoint,
        memo=memo,
        standalone=peering is None,
        peering_name=peering.name if peering else None,
        priority=peering.priority if peering else None,
        identity=peering.identity if peering else None,  # type: ignore[arg-type]
    )
    return 0


def start(memo: kopf.Memo, jobs: Any) -> None:
    """Build the runtime Kopf's startup handler keeps in ``memo``, on the ProofJob index
    ``jobs``, and start the streams (with peering: once the peering watch first answers)."""
    options = memo.get("options")
    if not isinstance(options, Options):
        msg = "kuzk.operator.startup.configure() was not called before the operator started"
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
    caches = Caches(jobs, pods, worker_statuses)
    store = (LedgerStore(api_client, *options.ledger, caches.uids, clock) if options.ledger
             else None)
    controller = Controller(api_client, options.settings,
                            EventRecorder(api_client, instance, clock), store, clock,
                            options.namespaces)
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

