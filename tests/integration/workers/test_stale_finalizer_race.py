"""The bug kuzk exists to prevent, reproduced deterministically against the API server, on the
normal path of lanes.

Lane A holds its GPU's phase. A late write about A (a retried release of its GPU phase, or the
operator's finalizer release of its pod) reads the WorkerStatus while A still holds it, then
is held before its write until A has given the GPU phase up and lane B has acquired it. The
compare-and-swap makes the late write conflict; read again, the GPU release is about a GPU
phase A no longer holds, so it is refused and counted; the finalizer's release finds A's
lane gone (its prover left) and does nothing, or, while A's lane still commits, removes that
lane and only it (not stale: the pod is released). Every way the GPU's WorkerStatus shows B
holding its GPU phase. A retried attempt of the same job and partition is told apart by its pod UID.

Beside it, what is not a race: a partition pod preempted before its prover joined a lane. The
operator's finalizer release for it finds a pod without a lane; it writes nothing and counts
nothing.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from kuzk.contract import api as kapi
from kuzk.contract.workerstatus import gpu_id, worker_status_name
from kuzk.contract.workerstatus.decisions import Acquired, Assignment, Gpu
from kuzk.contract.workerstatus.writes import acquire, claim, join, leave, release, release_gpu
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.helpers import read_pod
from tests.integration.operator.conftest import Plan, apply_job, job_pods, proofjob, wait_job
from tests.integration.workers.conftest import read_worker_status

GPU = Gpu("GPU-0b6f8d5e-7f0c-4a55-9d1e-1c0ffee00000", "NVIDIA H200", 143_771_942_912)
W0 = gpu_id(GPU.uuid)


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
    configuration = cluster.api.configuration
    return HeldClient(configuration, hold)


def worker(status: dict[str, Any], worker_id: str) -> dict[str, Any]:
    return next(w for w in status["workers"] if w["id"] == worker_id)


@pytest.mark.parametrize("retry", [False, True], ids=["next-partition", "retried-attempt"])
@pytest.mark.parametrize(
    "late_write", ["gpu-release", "finalizer-after-leave", "finalizer-while-committing"]
)
def test_a_late_write_about_the_previous_holder_leaves_the_next_one_alone(
    cluster: Cluster,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
    retry: bool,
    late_write: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kuzk.contract.workerstatus.writes")
    node = worker_status()
    name = worker_status_name(node, GPU.uuid)
    a = make_assignment("snap-1", partition=3, attempt=1)
    b = (
        make_assignment("snap-1", partition=3, attempt=2)
        if retry
        else make_assignment("snap-1", partition=4)
    )
    by_pod_ref = late_write != "gpu-release"
    assert claim(admin, node, GPU, a) == name
    assert join(admin, node, GPU, b) == name

    a_has_read, b_holds = threading.Event(), threading.Event()

    def hold() -> None:
        a_has_read.set()
        assert b_holds.wait(30), "B never acquired the GPU phase"

    writer = held_client(cluster, hold)
    with ThreadPoolExecutor(1) as pool:
        if by_pod_ref:
            late = pool.submit(release, writer, node, a.pod, "succeeded")
        else:
            late = pool.submit(release_gpu, writer, name, a)
        assert a_has_read.wait(30), "the late write never read the object"
        assert release_gpu(admin, name, a) is True
        if late_write == "finalizer-after-leave":
            assert leave(admin, name, a, "succeeded") is True
        assert acquire(admin, name, b, wait_s=10) is Acquired.GRANTED
        b_holds.set()
        # Only the finalizer's release while A's lane is still there removes something.
        assert late.result(timeout=30) is (late_write == "finalizer-while-committing")

    assert writer.puts[0] == 409, "the late write must lose the compare-and-swap"
    status = read_worker_status(admin, name)["status"]
    w0 = worker(status, W0)
    assert (w0["state"], w0["holder"]["pod"]) == ("gpu", {"name": b.pod_name, "uid": b.pod_uid})
    held = next(lane for lane in w0["lanes"] if lane["pod"]["uid"] == b.pod_uid)
    assert (held["job"]["name"], held["partition"], held["attempt"], held["stage"]) == (
        "snap-1", b.partition, b.attempt, "gpu")
    assert (status["proving"], status["workerCount"]) == (1, 1)
    assert [x["pod"]["uid"] for x in w0["lanes"]] == (
        [b.pod_uid] if by_pod_ref else [a.pod_uid, b.pod_uid]), "A's lane goes with its pod"
    refused = [r.getMessage() for r in caplog.records if "refused stale" in r.getMessage()]
    if by_pod_ref:
        # A's prover left, and the finalizer's release has nothing to do; or A's lane still
        # committed, and the release removes it. Either way nothing is stale.
        assert (status["staleWritesRejected"], refused) == (0, [])
        assert w0["completed"] == 1
        if late_write == "finalizer-after-leave":
            assert writer.puts == [409], "nothing to do: it does not write again"
        else:
            assert writer.puts == [409, 200]
        # The finalizer once more (the operator retried): nothing to do, nothing counted.
        assert release(admin, node, a.pod, "succeeded") is False
        again = read_worker_status(admin, name)["status"]
        assert (again["staleWritesRejected"], worker(again, W0)["holder"]["pod"]["uid"]) == (
            0, b.pod_uid)
    else:
        assert writer.puts == [409, 200], "the refusal is counted: written again"
        assert status["staleWritesRejected"] == 1
        assert len(refused) == 1
        assert a.pod_uid in refused[0] and b.pod_uid in refused[0], "both lanes are logged"
        assert "GPU phase held by" in refused[0]


def test_the_finalizer_after_the_provers_own_leave_is_not_stale(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    """The operator's finalizer release after the prover's own leave is done already, before
    and after the next lane holds the GPU phase: it leaves that lane and the count alone."""
    node = worker_status()
    name = worker_status_name(node, GPU.uuid)
    a, b = make_assignment(), make_assignment(partition=1)
    claim(admin, node, GPU, a)
    assert leave(admin, name, a, "succeeded") is True
    assert release(admin, node, a.pod, "succeeded") is False
    status = read_worker_status(admin, name)["status"]
    assert (worker(status, W0)["completed"], worker(status, W0)["state"]) == (1, "idle")
    assert status["staleWritesRejected"] == 0

    assert claim(admin, node, GPU, b) == name
    assert release(admin, node, a.pod, "succeeded") is False
    status = read_worker_status(admin, name)["status"]
    w0 = worker(status, W0)
    assert (w0["state"], w0["holder"]["pod"]["uid"], w0["completed"]) == ("gpu", b.pod_uid, 1)
    assert status["staleWritesRejected"] == 0


def test_a_pod_preempted_before_it_joins_is_not_a_stale_write(
    cluster: Cluster, namespace: str, nodes: Any, run_operator: Any, plan: Plan
) -> None:
    """The stand-in prover never joins a lane. The GPU last carried another pod's lane (idle
    now), a snap partition runs on the node's one GPU without joining, a winning-post job
    preempts it, and the operator's finalizer release of the preempted pod must leave the
    count alone."""
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    gpu = Gpu(kubelet.nodes[node].gpu_uuids()[0])
    plan.set(**{"snap-p0-a1": {"hold": True}, "*": {"seconds": 0.2}})
    operator = run_operator()
    apply_job(cluster, namespace, proofjob("snap", partitions=1))
    wait_for(lambda: plan.started() == ["snap-p0-a1"], 60, "the snap partition running")
    (victim,) = job_pods(cluster, namespace, "snap")
    assert kapi.FINALIZER in (victim.metadata.finalizers or []), "its release is the operator's"

    earlier = Assignment(namespace, "earlier", "uid-earlier", "snap-update", 0, 1, "e", "uid-e")
    name = worker_status_name(node, gpu.uuid)
    assert claim(cluster.api, node, gpu, earlier) == name
    assert leave(cluster.api, name, earlier, "succeeded") is True

    apply_job(cluster, namespace, proofjob("winning", "winning-post"))
    wait_job(cluster, namespace, "winning", "Succeeded", timeout=90)
    wait_for(
        lambda: read_pod(cluster.core, namespace, victim.metadata.name) is None,
        60,
        "the preempted pod released by the operator and gone",
    )
    wait_job(cluster, namespace, "snap", "Succeeded", timeout=90)

    status = read_worker_status(cluster.api, name)["status"]
    assert status["staleWritesRejected"] == 0
    (w0,) = status["workers"]
    assert (w0["state"], w0["lanes"], w0["completed"]) == ("idle", [], 1)
    log = operator.text()
    assert "refused stale release" not in log
    # The release ran and found the preempted pod holding nothing on its node's GPUs.
    released = f"finalizer release of {namespace}/{victim.metadata.name} on {node} ("
    assert any(line.endswith("): nothing held it") for line in log.splitlines()
               if released in line), log
