"""The operator's clock never dies: a TTL and a deadline that fall due while kube-apiserver is
down both fire once it is back; with a transport that fails a third of the operator's
requests, no job is ever left without a scheduled look and every timer still fires; a job
deleted between the operator's read and its status write ends on one info line."""

from __future__ import annotations

import io
import logging
import random
import threading
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client

from kuzk.contract import api
from kuzk.operator.caches import Caches
from kuzk.operator.runtime import Runtime
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    InProcessOperator,
    Plan,
    apply_job,
    condition,
    get_job,
    proofjob,
    wait_job,
)

# Mostly waiting out API server outages and deadlines: on the long tests' worker
# (tests/conftest.py).
pytestmark = pytest.mark.worker("long")

OUTAGE_S = 10


def test_a_ttl_and_a_deadline_due_during_an_apiserver_outage_fire_after_it(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    operator = run_operator()
    plan.set(**{"held-p0-a1": {"hold": True}})
    apply_job(cluster, namespace, proofjob("held", "winning-post", circuitLog2=4,
                                           activeDeadlineSeconds=12))
    apply_job(cluster, namespace, proofjob("brief", "winning-post", circuitLog2=4,
                                           ttlSecondsAfterFinished=8))
    wait_job(cluster, namespace, "brief", "Succeeded", timeout=60)
    wait_for(lambda: "held-p0-a1" in plan.started(), 60, "the held partition running")

    with cluster.plane.apiserver_down():
        # Both fall due in here: the TTL 8 s after "brief" finished, the deadline 12 s after
        # "held" started. The outage itself is what is tested, so it simply lasts 10 s.
        time.sleep(OUTAGE_S)

    failed = wait_job(cluster, namespace, "held", "Failed", timeout=60)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "DeadlineExceeded"
    wait_for(lambda: get_job(cluster, namespace, "brief") is None, 60, "TTL deletes brief")
    assert "Traceback" not in operator.text()


class FlakyTransport:
    """Stands in for urllib3's PoolManager under the operator's Kubernetes client: it passes
    requests to the real transport, but fails ``rate`` of them before they are sent (a reset
    connection, a 500 or a 429 from API Priority and Fairness)."""

    def __init__(self, real: urllib3.PoolManager, rate: float, seed: int = 7) -> None:
        self.real, self.rate = real, rate
        self.random = random.Random(seed)
        self.injected = 0
        self.lock = threading.Lock()

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            fail = self.random.random() < self.rate
            kind = self.random.choice(("reset", 500, 429))
            self.injected += fail
        if not fail:
            return self.real.request(method, url, *args, **kwargs)
        if kind == "reset":
            raise urllib3.exceptions.ProtocolError("injected: connection reset by peer")
        body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d}' % kind
        return urllib3.HTTPResponse(body=io.BytesIO(body), status=kind, reason="Injected",
                                    headers={"Content-Type": "application/json"},
                                    preload_content=False)

    def clear(self) -> None:
        self.real.clear()


def test_no_job_is_left_without_a_look_when_a_third_of_the_requests_fail(
        cluster: Cluster, namespace: str, nodes, inprocess_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    operator: InProcessOperator = inprocess_operator()
    runtime = operator.runtime
    rest = runtime.controller.api_client.rest_client
    flaky = FlakyTransport(rest.pool_manager, rate=0.33)
    rest.pool_manager = flaky
    names = [f"flaky-{i}" for i in range(4)]
    for name in names:
        apply_job(cluster, namespace, proofjob(name, "porep-c2", partitions=2, circuitLog2=4,
                                               ttlSecondsAfterFinished=1))

    # A job the cache holds with no run in flight and no look on the clock, in two samples in
    # a row (one sample may fall between Kopf's index update and its event handler).
    unlooked: list[tuple[str, str]] = []
    previous: set[tuple[str, str]] = set()

    def sample() -> bool:
        nonlocal previous

        def check() -> set[tuple[str, str]]:
            return {key for key in runtime.caches.job_keys()
                    if not runtime.queue.scheduled(("job", *key))}
        now = operator.call(check)
        unlooked.extend(now & previous)
        previous = now
        return all(get_job(cluster, namespace, name) is None for name in names)

    wait_for(sample, 240, "every job finished and deleted by its TTL", interval=0.05)
    wait_for(lambda: not cluster.core.list_namespaced_pod(namespace).items, 60, "pods gone")
    assert flaky.injected > 10
    assert runtime.queue.failures_total > 0
    assert unlooked == []


def test_a_job_deleted_between_read_and_status_write_is_gone_on_one_info_line(
        kuzk_installed: Cluster, namespace: str, caplog: pytest.LogCaptureFixture) -> None:
    from kuzk.operator.controller import Controller, JobGone
    from kuzk.operator.decide.pods import PodSettings

    cluster = kuzk_installed
    custom = client.CustomObjectsApi(cluster.api)
    job = custom.create_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, proofjob("vanishing"))
    custom.delete_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, "vanishing")
    events: list[Any] = []
    controller = Controller(cluster.api, PodSettings(image="unused"),
                            lambda job, event: events.append(event))
    with pytest.raises(JobGone):
        controller.sync(job, [], [])

    import asyncio

    caches = Caches({(namespace, "vanishing"): [job]}, {}, {})
    runtime = Runtime(controller, caches)
    caplog.set_level(logging.INFO, logger="kuzk")

    async def one_sync() -> None:
        runtime.queue.kick(("job", namespace, "vanishing"))
        while runtime.queue.tracked():
            await asyncio.sleep(0.01)

    asyncio.run(one_sync())
    lines = [r for r in caplog.records if "vanishing" in r.getMessage()]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (logging.INFO, f"ProofJob {namespace}/vanishing is gone; settling its pods")
    ]
    assert not any(r.exc_info for r in caplog.records)
    assert runtime.jobs == {}
    assert events == []
