"""The bug kuzk exists to prevent, reproduced deterministically against the API server.

Pod A holds W0. A's late finalizer release reads the WorkerStatus while A still holds W0, then
is held before its write until pod B has claimed W0. The compare-and-swap makes A's write
conflict; read again, it is about an assignment W0 has left, so it is refused and counted,
and W0 shows B proving. A retried attempt of the same job and partition is told apart by its
pod UID.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client, config
from prometheus_client import REGISTRY

from kuzk.workers import Assignment, Gpu, PodRef, claim, release
from tests.integration.workers.conftest import read_worker_status
from tests.testenv.cluster import Cluster

GPU = Gpu("GPU-0b6f8d5e-7f0c-4a55-9d1e-1c0ffee00000", "NVIDIA H200", 143_771_942_912)


def stale_count(operation: str) -> float:
    value = REGISTRY.get_sample_value(
        "kuzk_stale_worker_writes_rejected_total", {"operation": operation}
    )
    return value or 0.0


class HeldClient(client.ApiClient):
    """The real client, except that its first PUT waits in ``hold()`` before it is sent; the
    status of every PUT is recorded."""

    def __init__(self, configuration: client.Configuration, hold: Callable[[], None]) -> None:
        super().__init__(configuration)
        self.hold: Callable[[], None] | None = hold
        self.puts: list[int] = []

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PUT" and self.hold is not None:
            hold, self.hold = self.hold, None
            hold()
        response = super().call_api(method, url, *args, **kwargs)
        if method == "PUT":
            self.puts.append(int(response.status))
        return response


def held_client(cluster: Cluster, hold: Callable[[], None]) -> HeldClient:
    configuration = client.Configuration()
    config.load_kube_config(str(cluster.kubeconfig), client_configuration=configuration)
    return HeldClient(configuration, hold)


def worker(status: dict[str, Any], worker_id: str) -> dict[str, Any]:
    return next(w for w in status["workers"] if w["id"] == worker_id)


@pytest.mark.parametrize("retry", [False, True], ids=["next-partition", "retried-attempt"])
@pytest.mark.parametrize("by_pod_ref", [False, True], ids=["prover", "finalizer"])
def test_late_release_is_refused_and_counted(
    cluster: Cluster,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
    retry: bool,
    by_pod_ref: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kuzk.workers")
    node = worker_status()
    a = make_assignment("snap-1", partition=3, attempt=1)
    b = (
        make_assignment("snap-1", partition=3, attempt=2)
        if retry
        else make_assignment("snap-1", partition=4)
    )
    assert claim(admin, node, GPU, a) == "W0"

    a_has_read, b_has_claimed = threading.Event(), threading.Event()

    def hold() -> None:
        a_has_read.set()
        assert b_has_claimed.wait(30), "B's claim never came"

    late = held_client(cluster, hold)
    who: Assignment | PodRef = a.pod if by_pod_ref else a
    before = stale_count("release")
    with ThreadPoolExecutor(1) as pool:
        a_release = pool.submit(release, late, node, who, "succeeded")
        assert a_has_read.wait(30), "A's release never read the object"
        assert claim(admin, node, GPU, b) == "W0"
        b_has_claimed.set()
        assert a_release.result(timeout=30) is False

    assert late.puts[0] == 409, "A's first write must lose the compare-and-swap"
    status = read_worker_status(admin, node)["status"]
    w0 = worker(status, "W0")
    assert w0["state"] == "proving"
    assert w0["pod"] == {"name": b.pod_name, "uid": b.pod_uid}
    assert (w0["job"]["name"], w0["partition"], w0["attempt"]) == (
        "snap-1",
        b.partition,
        b.attempt,
    )
    assert w0["completed"] == 0
    assert status["staleWritesRejected"] == 1
    assert (status["proving"], status["workerCount"]) == (1, 1)
    assert stale_count("release") - before == 1
    refused = [r.getMessage() for r in caplog.records if "refused stale release" in r.getMessage()]
    assert len(refused) == 1
    assert a.pod_uid in refused[0] and b.pod_uid in refused[0], "both assignments are logged"
    replaced = [r.getMessage() for r in caplog.records if "replaces" in r.getMessage()]
    assert len(replaced) == 1
    assert a.pod_uid in replaced[0] and b.pod_uid in replaced[0]


def test_the_finalizer_after_the_provers_own_release_is_not_stale(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    a = make_assignment()
    claim(admin, node, GPU, a)
    assert release(admin, node, a, "succeeded") is True
    before = stale_count("release")
    assert release(admin, node, a.pod, "succeeded") is False
    status = read_worker_status(admin, node)["status"]
    assert worker(status, "W0")["completed"] == 1
    assert worker(status, "W0")["state"] == "idle"
    assert status["staleWritesRejected"] == 0
    assert stale_count("release") == before
