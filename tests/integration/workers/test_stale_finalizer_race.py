"""The bug kuzk exists to prevent, reproduced deterministically against the API server.

Pod A holds W0. A's late finalizer release reads the WorkerStatus while A still holds W0, then
is held before its write until pod B has claimed W0. The compare-and-swap makes A's write
conflict; read again, it is about an assignment W0 has left, so it is refused and counted,
and W0 shows B proving. A retried attempt of the same job and partition is told apart by its
pod UID.

Beside it, what is not a race: a partition pod preempted before its prover claimed a worker.
The operator's finalizer release for it finds a pod no worker ever held; it writes nothing and
counts nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client, config

from kuzk import api as kapi
from kuzk.workers import Assignment, Gpu, PodRef, claim, release
from tests.integration.helpers import read_pod
from tests.integration.operator.conftest import Plan, apply_job, job_pods, proofjob, wait_job
from tests.integration.workers.conftest import read_worker_status
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for

GPU = Gpu("GPU-0b6f8d5e-7f0c-4a55-9d1e-1c0ffee00000", "NVIDIA H200", 143_771_942_912)


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
    """The operator's finalizer release after the prover's own release is done already, before
    and after the next pod has claimed the GPU (at once, on a busy node): it leaves the next
    pod's worker and the count alone."""
    node = worker_status()
    a, b = make_assignment(), make_assignment(partition=1)
    claim(admin, node, GPU, a)
    assert release(admin, node, a, "succeeded") is True
    assert release(admin, node, a.pod, "succeeded") is False
    status = read_worker_status(admin, node)["status"]
    assert worker(status, "W0")["completed"] == 1
    assert worker(status, "W0")["state"] == "idle"
    assert status["staleWritesRejected"] == 0

    assert claim(admin, node, GPU, b) == "W0"
    assert release(admin, node, a.pod, "succeeded") is False
    status = read_worker_status(admin, node)["status"]
    w0 = worker(status, "W0")
    assert (w0["state"], w0["pod"]["uid"], w0["completed"]) == ("proving", b.pod_uid, 1)
    assert status["staleWritesRejected"] == 0


def test_a_pod_preempted_before_it_claims_is_not_a_stale_write(
    cluster: Cluster, namespace: str, nodes: Any, run_operator: Any, plan: Plan
) -> None:
    """The stand-in prover never claims a worker. W0 last held another pod (idle), a snap
    partition runs on the node's one GPU without claiming, a winning-post job preempts it, and
    the operator's finalizer release of the preempted pod must leave the count alone."""
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    gpu = Gpu(kubelet.nodes[node].gpu_uuids()[0])
    plan.set(**{"snap-p0-a1": {"hold": True}, "*": {"seconds": 0.2}})
    operator = run_operator()
    apply_job(cluster, namespace, proofjob("snap", partitions=1))
    wait_for(lambda: plan.started() == ["snap-p0-a1"], 60, "the snap partition running")
    (victim,) = job_pods(cluster, namespace, "snap")
    assert kapi.FINALIZER in (victim.metadata.finalizers or []), "its release is the operator's"

    def worker_status_exists() -> bool:
        try:
            read_worker_status(cluster.api, node)
        except client.ApiException:
            return False
        return True

    wait_for(worker_status_exists, 30, f"the operator's WorkerStatus {node}")
    earlier = Assignment(namespace, "earlier", "uid-earlier", "snap-update", 0, 1, "e", "uid-e")
    assert claim(cluster.api, node, gpu, earlier) == "W0"
    assert release(cluster.api, node, earlier, "succeeded") is True

    apply_job(cluster, namespace, proofjob("winning", "winning-post"))
    wait_job(cluster, namespace, "winning", "Succeeded", timeout=90)
    wait_for(
        lambda: read_pod(cluster.core, namespace, victim.metadata.name) is None,
        60,
        "the preempted pod released by the operator and gone",
    )
    wait_job(cluster, namespace, "snap", "Succeeded", timeout=90)

    status = read_worker_status(cluster.api, node)["status"]
    assert status["staleWritesRejected"] == 0
    (w0,) = status["workers"]
    assert (w0["state"], w0["pod"]["uid"], w0["completed"]) == ("idle", "uid-e", 1)
    log = operator.text()
    assert "refused stale release" not in log
    assert f"{victim.metadata.name} ({victim.metadata.uid}) holds no worker" in log
