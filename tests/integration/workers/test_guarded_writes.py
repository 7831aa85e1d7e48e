"""The guarded write's edges against the API server: missing objects never stick a finalizer,
stale stage writes are refused and counted, continuous conflict gives up with a
clear error, worker IDs are stable per GPU, lanes of one GPU share its worker, the CRD refuses
a status that breaks the lanes' rules, the sweep frees what no pod holds, and a node's
WorkerStatus goes with its Node."""

from __future__ import annotations

import copy
import itertools
import logging
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk import api as kapi
from kuzk.workers import (
    Assignment,
    Gpu,
    PodRef,
    Released,
    WorkerStatusMissing,
    WorkerWriteConflict,
    WriteDecision,
    acquire,
    claim,
    decide_release_gpu,
    ensure_worker_status,
    guarded_write,
    join,
    release,
    release_gpu,
    stage,
    sweep,
)
from tests.integration.workers.conftest import read_worker_status
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for

GPUS = [Gpu(f"GPU-{uuid.uuid4()}", "NVIDIA H200", 143_771_942_912) for _ in range(3)]


def workers(api: client.ApiClient, node: str) -> dict[str, dict[str, Any]]:
    status = read_worker_status(api, node).get("status") or {}
    return {w["id"]: w for w in status.get("workers") or []}


def test_missing_object_claim_raises_release_and_sweep_do_nothing(
    admin: client.ApiClient, make_assignment: Callable[..., Assignment]
) -> None:
    node = f"gone-{uuid.uuid4().hex[:8]}"
    a = make_assignment()
    with pytest.raises(WorkerStatusMissing, match=node):
        claim(admin, node, GPUS[0], a)
    with pytest.raises(WorkerStatusMissing):
        stage(admin, node, a, "synth_done")
    assert release(admin, node, a, "succeeded") is False
    assert release(admin, node, a.pod, "failed") is False
    assert sweep(admin, node, {}, datetime.now(UTC)) == []


def test_stale_stage_writes_are_refused_and_counted(
    caplog: pytest.LogCaptureFixture,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    caplog.set_level(logging.INFO, logger="kuzk.workers")
    node = worker_status()
    a, b = make_assignment(partition=1), make_assignment(partition=2)
    join(admin, node, GPUS[0], a)
    assert stage(admin, node, a, "synthesizing") is True
    assert release(admin, node, a, "succeeded") is True
    join(admin, node, GPUS[0], b)
    assert stage(admin, node, a, "synth_done") is False
    assert release_gpu(admin, node, a) is False
    assert stage(admin, node, b, "synth_done") is True
    w0 = workers(admin, node)["W0"]
    assert [(lane["pod"]["uid"], lane["stage"]) for lane in w0["lanes"]] == [
        (b.pod_uid, "synth_done")]
    assert w0["completed"] == 1
    assert read_worker_status(admin, node)["status"]["staleWritesRejected"] == 2
    refused = [r.getMessage() for r in caplog.records if "refused stale" in r.getMessage()]
    assert [m.split("refused stale ")[1].split()[0] for m in refused] == [
        "stage", "GPU"]


def test_worker_ids_are_stable_per_gpu(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    ids = []
    for round_ in range(2):
        for gpu in (GPUS[1], GPUS[0]):
            a = make_assignment(partition=round_)
            ids.append(claim(admin, node, gpu, a))
            assert release(admin, node, a, "succeeded") is True
    assert ids == ["W0", "W1", "W0", "W1"]
    got = workers(admin, node)
    assert {w["gpu"]["uuid"] for w in got.values()} == {GPUS[0].uuid, GPUS[1].uuid}
    assert got["W0"]["gpu"] == {
        "uuid": GPUS[1].uuid,
        "name": "NVIDIA H200",
        "memoryBytes": 143_771_942_912,
    }
    assert [w["completed"] for w in got.values()] == [2, 2]


def test_lanes_of_one_gpu_share_its_worker_and_joining_twice_writes_nothing(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    a, b, c = (make_assignment(partition=k) for k in range(3))
    assert [join(admin, node, GPUS[0], x) for x in (a, b)] + [join(admin, node, GPUS[1], c)] == [
        "W0", "W0", "W1"]
    version = read_worker_status(admin, node)["metadata"]["resourceVersion"]
    assert join(admin, node, GPUS[0], b) == "W0"
    assert read_worker_status(admin, node)["metadata"]["resourceVersion"] == version
    status = read_worker_status(admin, node)["status"]
    got = {w["id"]: w for w in status["workers"]}
    assert [x["pod"]["uid"] for x in got["W0"]["lanes"]] == [a.pod_uid, b.pod_uid]
    assert (status["lanes"], status["workerCount"], status["proving"]) == (3, 2, 0)
    assert [got[w]["state"] for w in ("W0", "W1")] == ["waiting", "waiting"]


def _holding_b(status: dict[str, Any]) -> None:
    status["workers"][0]["holder"]["pod"] = {"name": "b", "uid": "uid-not-a-lane"}


def _idle_with_lanes(status: dict[str, Any]) -> None:
    del status["workers"][0]["holder"]
    status["workers"][0]["state"] = "idle"
    status["proving"] = 0


def _two_lanes_of_one_pod(status: dict[str, Any]) -> None:
    lanes = status["workers"][0]["lanes"]
    lanes.append(copy.deepcopy(lanes[0]) | {"stage": "starting"})
    status["lanes"] += 1


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (_holding_b, "the holder of the GPU phase must be one of the worker's lanes"),
        (_idle_with_lanes, "state must be gpu with a holder, waiting with lanes and no holder"),
        (_two_lanes_of_one_pod, "a pod has at most one lane on a GPU"),
    ],
    ids=["holder-not-a-lane", "state", "pod-twice"],
)
def test_the_crd_refuses_a_status_that_breaks_the_lanes_rules(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
    break_it: Callable[[dict[str, Any]], None],
    message: str,
) -> None:
    node = worker_status()
    a = make_assignment()
    claim(admin, node, GPUS[0], a)
    before = read_worker_status(admin, node)

    def broken(status: Any) -> WriteDecision[None]:
        changed = copy.deepcopy(dict(status))
        break_it(changed)
        return WriteDecision(changed, None)

    with pytest.raises(ApiException) as refused:
        guarded_write(admin, node, broken)
    assert refused.value.status == 422
    assert message in str(refused.value.body)
    after = read_worker_status(admin, node)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert acquire(admin, node, a, wait_s=0) == "granted", "the lane still holds"


class BumpingClient(client.ApiClient):
    """Before each of its PUTs, another writer changes the object: every write conflicts."""

    def __init__(self, configuration: client.Configuration, bump: Callable[[], None]) -> None:
        super().__init__(configuration)
        self.bump = bump
        self.puts = 0

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if method == "PUT":
            self.puts += 1
            self.bump()
        return super().call_api(method, url, *args, **kwargs)


def test_continuous_conflict_gives_up_with_a_clear_error(
    cluster: Cluster,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    a = make_assignment()
    claim(admin, node, GPUS[0], a)
    configuration = cluster.api.configuration
    marks = itertools.cycle([{a.pod_uid: datetime.now(UTC)}, {}])
    # Another writer (the operator's sweep, marking the lane not live and live again).
    bumping = BumpingClient(
        configuration, lambda: sweep(admin, node, {a.pod_uid: None}, datetime.now(UTC),
                                     next(marks)))
    with pytest.raises(WorkerWriteConflict, match=f"WorkerStatus {node}: still conflicting"):
        guarded_write(bumping, node, lambda s: decide_release_gpu(s, a, datetime.now(UTC)),
                      budget_s=0.5)
    assert bumping.puts >= 3, "it retried before giving up"


def test_sweep_releases_workers_whose_pod_is_gone_or_ended_and_marks_hung_ones(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    running, finished, gone = (make_assignment(partition=i) for i in range(3))
    for gpu, a in zip(GPUS, (running, finished, gone), strict=True):
        claim(admin, node, gpu, a)
    live: dict[str, kapi.WorkerOutcome | None] = {
        running.pod_uid: None, finished.pod_uid: "succeeded"}
    now = datetime.now(UTC)
    hung = {running.pod_uid: now - timedelta(seconds=5)}
    assert sweep(admin, node, live, now, hung) == [
        Released("W1", finished.pod, "succeeded"), Released("W2", gone.pod, "lost")]
    version = read_worker_status(admin, node)["metadata"]["resourceVersion"]
    assert sweep(admin, node, live, now, hung) == []
    assert read_worker_status(admin, node)["metadata"]["resourceVersion"] == version, (
        "a sweep with nothing to change writes nothing")
    got = workers(admin, node)
    assert [got[w]["state"] for w in ("W0", "W1", "W2")] == ["gpu", "idle", "idle"]
    assert got["W0"]["lanes"][0]["notLiveSince"] == kapi.format_time(
        now - timedelta(seconds=5), millis=True)
    assert [got[w]["completed"] for w in ("W0", "W1", "W2")] == [0, 1, 0]
    # The sweep took the GPU phase from a pod it found gone: should that pod turn out to be
    # alive, its finalizer's release shows the takeover as a refused stale write.
    assert got["W2"]["previousPodUIDs"] == [gone.pod_uid]
    assert release(admin, node, PodRef(gone.pod_name, gone.pod_uid), "failed") is False
    assert read_worker_status(admin, node)["status"]["staleWritesRejected"] == 1
    # The finished pod's lane was swept while it held its GPU phase too.
    assert release(admin, node, finished.pod, "succeeded") is False
    assert read_worker_status(admin, node)["status"]["staleWritesRejected"] == 2


@pytest.fixture
def node_object(admin: client.ApiClient) -> Iterator[client.V1Node]:
    core = client.CoreV1Api(admin)
    name = f"ws-owner-{uuid.uuid4().hex[:8]}"
    node = core.create_node({"metadata": {"name": name}})
    yield node
    for delete in (
        lambda: core.delete_node(name),
        lambda: client.CustomObjectsApi(admin).delete_cluster_custom_object(
            kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, name
        ),
    ):
        try:
            delete()
        except ApiException as error:
            if error.status != 404:
                raise


def test_worker_status_is_created_once_and_deleted_with_its_node(
    admin: client.ApiClient, node_object: client.V1Node
) -> None:
    name, uid = node_object.metadata.name, node_object.metadata.uid
    assert ensure_worker_status(admin, name, uid) is True
    assert ensure_worker_status(admin, name, uid) is False
    created = read_worker_status(admin, name)
    assert created["spec"] == {"nodeName": name}
    assert created["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uid}
    ]
    client.CoreV1Api(admin).delete_node(name)

    def gone() -> bool:
        try:
            read_worker_status(admin, name)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(gone, 60, f"garbage collection of WorkerStatus {name}")
