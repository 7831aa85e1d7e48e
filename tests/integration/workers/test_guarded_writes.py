"""The guarded write's edges against the API server: missing objects never stick a finalizer,
stale stage writes are refused and counted, continuous conflict gives up with a
clear error, each GPU has a WorkerStatus of its own (created by its first lane, named after
node and GPU, owned by the Node, gone with it), lanes of one GPU share it, the CRD refuses a
status that breaks the lanes' rules, the finalizer release finds the pod's GPU, and the sweep
frees what no pod holds."""

from __future__ import annotations

import copy
import itertools
import json
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk.contract import api as kapi
from kuzk.contract.workerstatus import gpu_id, worker_status_name
from kuzk.contract.workerstatus.decisions import (
    Assignment,
    Gpu,
    PodRef,
    Released,
    WriteDecision,
    decide_release_gpu,
)
from kuzk.contract.workerstatus.writes import (
    WorkerStatusMissing,
    WorkerWriteConflict,
    acquire,
    claim,
    create_worker_status,
    guarded_write,
    join,
    leave,
    release,
    release_gpu,
    stage,
    sweep,
)
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.workers.conftest import read_worker_status

GPUS = [Gpu(f"GPU-{uuid.uuid4()}", "NVIDIA H200", 143_771_942_912) for _ in range(3)]


def worker(api: client.ApiClient, node: str, gpu: Gpu) -> dict[str, Any]:
    """The one worker of ``gpu``'s WorkerStatus on ``node``."""
    (only,) = read_worker_status(api, worker_status_name(node, gpu.uuid))["status"]["workers"]
    return dict(only)


def stale_count(api: client.ApiClient, node: str, gpu: Gpu) -> int:
    ws = read_worker_status(api, worker_status_name(node, gpu.uuid))
    return int(ws["status"].get("staleWritesRejected", 0))


def test_missing_node_claim_raises_release_and_sweep_do_nothing(
    admin: client.ApiClient, make_assignment: Callable[..., Assignment]
) -> None:
    node = f"gone-{uuid.uuid4().hex[:8]}"
    a = make_assignment()
    with pytest.raises(WorkerStatusMissing, match=node):
        claim(admin, node, GPUS[0], a)
    name = worker_status_name(node, GPUS[0].uuid)
    with pytest.raises(WorkerStatusMissing):
        stage(admin, name, a, "synth_done")
    assert leave(admin, name, a, "succeeded") is False
    assert release(admin, node, a.pod, "failed") is False
    assert sweep(admin, name, {}, datetime.now(UTC)) == []


def test_stale_stage_writes_are_refused_and_counted(
    caplog: pytest.LogCaptureFixture,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    caplog.set_level(logging.INFO, logger="kuzk.contract.workerstatus.writes")
    node = worker_status()
    a, b = make_assignment(partition=1), make_assignment(partition=2)
    name = join(admin, node, GPUS[0], a)
    assert stage(admin, name, a, "synthesizing") is True
    assert leave(admin, name, a, "succeeded") is True
    assert join(admin, node, GPUS[0], b) == name
    assert stage(admin, name, a, "synth_done") is False
    assert release_gpu(admin, name, a) is False
    assert stage(admin, name, b, "synth_done") is True
    w0 = worker(admin, node, GPUS[0])
    assert [(lane["pod"]["uid"], lane["stage"]) for lane in w0["lanes"]] == [
        (b.pod_uid, "synth_done")]
    assert w0["completed"] == 1
    assert stale_count(admin, node, GPUS[0]) == 2
    refused = [r.getMessage() for r in caplog.records if "refused stale" in r.getMessage()]
    assert [m.split("refused stale ")[1].split()[0] for m in refused] == [
        "stage", "GPU"]


def test_each_gpu_has_a_worker_status_of_its_own_made_by_its_first_lane(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    names = []
    for round_ in range(2):
        for gpu in (GPUS[1], GPUS[0]):
            a = make_assignment(partition=round_)
            names.append(claim(admin, node, gpu, a))
            assert leave(admin, names[-1], a, "succeeded") is True
    first, second = (worker_status_name(node, g.uuid) for g in (GPUS[1], GPUS[0]))
    assert names == [first, second, first, second]
    assert first == f"{node}-{gpu_id(GPUS[1].uuid)}" != second
    made = read_worker_status(admin, first)
    node_uid = client.CoreV1Api(admin).read_node(node).metadata.uid
    assert made["spec"] == {"nodeName": node, "gpu": {
        "uuid": GPUS[1].uuid, "name": "NVIDIA H200", "memoryBytes": 143_771_942_912}}
    assert made["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    assert [w["id"] for w in made["status"]["workers"]] == [gpu_id(GPUS[1].uuid)]
    assert [worker(admin, node, g)["completed"] for g in (GPUS[0], GPUS[1])] == [2, 2]
    assert create_worker_status(admin, node, GPUS[1]) is False, "made once"


def test_lanes_of_one_gpu_share_its_worker_and_joining_twice_writes_nothing(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    a, b, c = (make_assignment(partition=k) for k in range(3))
    names = [join(admin, node, GPUS[0], x) for x in (a, b)] + [join(admin, node, GPUS[1], c)]
    zero, one = (worker_status_name(node, g.uuid) for g in GPUS[:2])
    assert names == [zero, zero, one]
    version = read_worker_status(admin, zero)["metadata"]["resourceVersion"]
    assert join(admin, node, GPUS[0], b) == zero
    assert read_worker_status(admin, zero)["metadata"]["resourceVersion"] == version
    status = read_worker_status(admin, zero)["status"]
    assert [x["pod"]["uid"] for x in status["workers"][0]["lanes"]] == [a.pod_uid, b.pod_uid]
    assert (status["lanes"], status["workerCount"], status["proving"]) == (2, 1, 0)
    assert [worker(admin, node, g)["state"] for g in GPUS[:2]] == ["waiting", "waiting"]


def _holding_b(status: dict[str, Any]) -> None:
    status["workers"][0]["holder"]["pod"] = {"name": "b", "uid": "uid-not-a-lane"}


def _two_holders(status: dict[str, Any]) -> None:
    lanes = status["workers"][0]["lanes"]
    lanes.append(copy.deepcopy(lanes[0]) | {"pod": {"name": "b", "uid": "uid-b"}})
    status["lanes"] += 1


def _holder_committing(status: dict[str, Any]) -> None:
    status["workers"][0]["lanes"][0]["stage"] = "committing"


def _another_gpu(status: dict[str, Any]) -> None:
    other = copy.deepcopy(status["workers"][0]) | {"id": "other"}
    status["workers"].append(other | {"gpu": {"uuid": "GPU-other"}})
    status["workerCount"], status["proving"], status["lanes"] = 2, 2, 2


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
        (_holding_b, "status.workers[0].holder: Invalid value: holder must be one"
                     " of the worker's lanes"),
        (_two_holders, "status.workers[0].lanes: Invalid value: a lane in stage gpu"
                       " must be the holder"),
        (_holder_committing, "status.workers[0].holder: Invalid value: holder's"
                             " lane must be in stage gpu"),
        (_another_gpu, "status.workers: Invalid value: a WorkerStatus is one GPU:"
                       " status.workers holds at most one worker"),
        (_idle_with_lanes, "state must be gpu with a holder, waiting with lanes and no holder"),
        (_two_lanes_of_one_pod, "a pod has at most one lane on a GPU"),
    ],
    ids=["holder-not-a-lane", "two-holders", "holder-committing", "another-gpu", "state",
         "pod-twice"],
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
    name = claim(admin, node, GPUS[0], a)
    before = read_worker_status(admin, name)

    def broken(status: Any) -> WriteDecision[None]:
        changed = copy.deepcopy(dict(status))
        break_it(changed)
        return WriteDecision(changed, None)

    with pytest.raises(ApiException) as refused:
        guarded_write(admin, name, broken)
    assert refused.value.status == 422
    assert message in json.loads(refused.value.body)["message"]
    after = read_worker_status(admin, name)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert acquire(admin, name, a, wait_s=0) == "granted", "the lane still holds"


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
    name = claim(admin, node, GPUS[0], a)
    configuration = cluster.api.configuration
    marks = itertools.cycle([{a.pod_uid: datetime.now(UTC)}, {}])
    # Another writer (the operator's sweep, marking the lane not live and live again).
    bumping = BumpingClient(
        configuration, lambda: sweep(admin, name, {a.pod_uid: None}, datetime.now(UTC),
                                     next(marks)))
    with pytest.raises(WorkerWriteConflict, match=f"WorkerStatus {name}: still conflicting"):
        guarded_write(bumping, name, lambda s: decide_release_gpu(s, a, datetime.now(UTC)),
                      budget_s=0.5)
    assert bumping.puts >= 3, "it retried before giving up"


def test_sweep_releases_workers_whose_pod_is_gone_or_ended_and_marks_hung_ones(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    running, finished, gone = (make_assignment(partition=i) for i in range(3))
    names = [claim(admin, node, gpu, a)
             for gpu, a in zip(GPUS, (running, finished, gone), strict=True)]
    live: dict[str, kapi.WorkerOutcome | None] = {
        running.pod_uid: None, finished.pod_uid: "succeeded"}
    now = datetime.now(UTC)
    hung = {running.pod_uid: now - timedelta(seconds=5)}
    ids = [gpu_id(g.uuid) for g in GPUS]
    assert [sweep(admin, n, live, now, hung) for n in names] == [
        [], [Released(ids[1], finished.pod, "succeeded")], [Released(ids[2], gone.pod, "lost")]]
    versions = [read_worker_status(admin, n)["metadata"]["resourceVersion"] for n in names]
    assert [sweep(admin, n, live, now, hung) for n in names] == [[], [], []]
    assert [read_worker_status(admin, n)["metadata"]["resourceVersion"]
            for n in names] == versions, "a sweep with nothing to change writes nothing"
    got = [worker(admin, node, g) for g in GPUS]
    assert [w["state"] for w in got] == ["gpu", "idle", "idle"]
    assert got[0]["lanes"][0]["notLiveSince"] == kapi.format_time(
        now - timedelta(seconds=5), millis=True)
    assert [w["completed"] for w in got] == [0, 1, 0]
    # The sweep took the GPU phase from a pod it found gone: should that pod turn out to be
    # alive, its finalizer's release (which finds the GPU that remembers it) shows the
    # takeover as a refused stale write, on that GPU's WorkerStatus.
    assert got[2]["previousPodUIDs"] == [gone.pod_uid]
    assert release(admin, node, PodRef(gone.pod_name, gone.pod_uid), "failed") is False
    assert [stale_count(admin, node, g) for g in GPUS] == [0, 0, 1]
    # The finished pod's lane was swept while it held its GPU phase too.
    assert release(admin, node, finished.pod, "succeeded") is False
    assert [stale_count(admin, node, g) for g in GPUS] == [0, 1, 1]
    # The running pod's finalizer release finds its lane on the first GPU.
    assert release(admin, node, running.pod, "succeeded") is True
    assert worker(admin, node, GPUS[0])["state"] == "idle"
    assert release(admin, node, running.pod, "succeeded") is False, "nothing held: no write"
    assert [stale_count(admin, node, g) for g in GPUS] == [0, 1, 1]


def test_worker_statuses_go_with_their_node(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    names = [join(admin, node, gpu, make_assignment(partition=k)) for k, gpu in enumerate(GPUS)]
    client.CoreV1Api(admin).delete_node(node)

    def gone() -> bool:
        for name in names:
            try:
                read_worker_status(admin, name)
            except ApiException as error:
                if error.status != 404:
                    raise
            else:
                return False
        return True

    wait_for(gone, 60, f"garbage collection of the WorkerStatuses of node {node}")
