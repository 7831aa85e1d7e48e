"""The operator's own ``/metrics`` (``kuzk operator --metrics-port``), from prometheus-client
with a registry of its own: how long its work takes and how often it fails, by kind (a job's
sync, an orphaned pod, a WorkerStatus's sweep); its API requests by method and status code
(the operator's own calls, not the watches); its streams' watch events by resource and type,
their lists and their restarts (``kuzk.operator.streams``); the keys on its clock;
whether a higher-priority peer has paused it; ``kuzk_build_info``; and the process's own.
What the fleet does is the status server's to export, not this one's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kuzk.contract import api

WORK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _Live(Collector):
    """Gauges read at scrape time from the running operator."""

    def __init__(self, queued: Callable[[], int], paused: Callable[[], bool]) -> None:
        self.queued, self.paused = queued, paused

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("kuzk_operator_queued_keys",
                                "Keys on the operator's clock: runs in flight or looks due.",
                                value=self.queued())
        yield GaugeMetricFamily("kuzk_operator_paused",
                                "1 while a higher-priority peer has paused this replica.",
                                value=float(self.paused()))
        build = GaugeMetricFamily("kuzk_build_info", "kuzk's version; always 1.",
                                  labels=["version"])
        build.add_metric([api.version()], 1)
        yield build


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.work_seconds = Histogram(
            "kuzk_operator_work_duration_seconds",
            "Runs of the operator's work by kind: job (a ProofJob's sync), pod (an orphaned"
            " pod), sweep (a WorkerStatus's sweep).",
            ["kind"], buckets=WORK_BUCKETS, registry=self.registry)
        self.work_errors = Counter(
            "kuzk_operator_work_errors", "Runs that failed (each is retried with backoff).",
            ["kind"], registry=self.registry)
        self.requests = Counter(
            "kuzk_operator_api_requests",
            "The operator's own API requests by HTTP method and status code (0: no answer).",
            ["method", "code"], registry=self.registry)
        self.watch_events = Counter(
            "kuzk_operator_watch_events",
            "Watch events the operator's own streams received, by resource (pods, workerstatuses,"
            " nodes) and type (ADDED, MODIFIED, DELETED; a list counts what it changed).",
            ["resource", "type"], registry=self.registry)
        self.watch_lists = Counter(
            "kuzk_operator_watch_lists",
            "Full lists by the operator's streams: one at start, one after each 410 Gone or"
            " peering pause.", ["resource"], registry=self.registry)
        self.watch_restarts = Counter(
            "kuzk_operator_watch_restarts",
            "Watches of the operator's streams that broke (an error, a lost connection, 410"
            " Gone) and resumed or listed again.", ["resource"], registry=self.registry)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)

    def observe(self, kind: str, seconds: float, failed: bool) -> None:
        self.work_seconds.labels(kind).observe(seconds)
        if failed:
            self.work_errors.labels(kind).inc()

    def follow(self, queued: Callable[[], int], paused: Callable[[], bool]) -> None:
        """Export the clock's keys and the peering pause, read when scraped."""
        self.registry.register(_Live(queued, paused))

    def count_requests(self, api_client: client.ApiClient) -> None:
        """Count every request ``api_client`` sends, by method and the status it got."""
        rest = api_client.rest_client
        send: Callable[..., Any] = rest.request

        def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            code = "0"
            try:
                answer = send(method, url, *args, **kwargs)
                code = str(getattr(answer, "status", 0))
                return answer
            except ApiException as e:
                code = str(e.status)
                raise
            finally:
                self.requests.labels(method, code).inc()

        rest.request = counted  # type: ignore[method-assign]  # the client has no hook

    def serve(self, port: int, address: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` on ``address:port`` from a thread of its own."""
        start_http_server(port, address, registry=self.registry)


class Timer:
    """``with Timer(metrics, kind):`` observes one run of ``kind`` (failed when it raises
    anything but ``ok``, the exceptions that end a run normally)."""

    def __init__(self, metrics: OperatorMetrics | None, kind: str,
                 ok: tuple[type[BaseException], ...] = ()) -> None:
        self.metrics, self.kind, self.ok = metrics, kind, ok
        self.started = 0.0

    def __enter__(self) -> Timer:
        self.started = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self.metrics is not None:
            failed = kind is not None and not issubclass(kind, self.ok)
            self.metrics.observe(self.kind, time.perf_counter() - self.started, failed)
