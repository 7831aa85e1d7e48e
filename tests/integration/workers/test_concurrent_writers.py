"""Eight writers (four threads, four processes) hammer one node's WorkerStatus over four GPUs
with claim, stage, heartbeat and release in random orders, provers that die before their
release (the next claim takes the GPU from them), plus deliberate late writes about
assignments a GPU has left. The model: each GPU runs one assignment at a time (a lease per
GPU, as the kubelet's exclusivity), so its last assignment, its completed count and the
number of refused writes are known. A watch records every version of the object in between;
each must hold the invariants, and no version may show a stale write applied."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client, watch

from kuzk import api as kapi
from tests.integration.workers.conftest import read_worker_status
from tests.integration.workers.writers import process_main, run_writer
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for

THREADS, PROCESSES, GPUS = 4, 4, 4
OPERATIONS_PER_WRITER = 252


class Recorder(threading.Thread):
    """Watches one WorkerStatus and keeps every version it sees, in order."""

    def __init__(self, api: client.ApiClient, name: str) -> None:
        super().__init__(name=f"watch-{name}", daemon=True)
        self.objects = client.CustomObjectsApi(api)
        self.name_ = name
        self.seen: list[dict[str, Any]] = []
        self.done = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        where = (kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL)
        listed = self.objects.list_cluster_custom_object(
            *where, field_selector=f"metadata.name={self.name_}"
        )
        rv = listed["metadata"]["resourceVersion"]
        self.ready.set()
        while not self.done.is_set():
            for event in watch.Watch().stream(
                self.objects.list_cluster_custom_object,
                *where,
                field_selector=f"metadata.name={self.name_}",
                resource_version=rv,
                timeout_seconds=2,
            ):
                obj = event["object"]
                rv = obj["metadata"]["resourceVersion"]
                self.seen.append(obj)

    def has_seen(self, rv: str) -> bool:
        return any(obj["metadata"]["resourceVersion"] == rv for obj in self.seen)


@contextlib.contextmanager
def recording(api: client.ApiClient, name: str) -> Iterator[Recorder]:
    recorder = Recorder(api, name)
    recorder.start()
    try:
        assert recorder.ready.wait(30), "the watch started"
        yield recorder
    finally:
        recorder.done.set()
        recorder.join(timeout=10)


def run_writers(
    cluster: Cluster, node: str, gpus: list[str], recorder: Recorder
) -> list[dict[str, Any]]:
    """Run the writers to the end; return their reports once the watch has seen the last
    version. The Prometheus counter of this process counts the thread writers' refusals."""
    spawn = multiprocessing.get_context("spawn")
    leases = [spawn.Lock() for _ in gpus]
    orders = spawn.RawArray("i", len(gpus))
    takeovers = spawn.RawArray("i", len(gpus))
    queue = spawn.Queue()

    def args(writer: int) -> tuple[Any, ...]:
        ops = OPERATIONS_PER_WRITER
        return (str(cluster.kubeconfig), node, writer, gpus, leases, orders, takeovers, ops,
                1000 + writer)

    processes = [
        spawn.Process(target=process_main, args=(queue, *args(THREADS + i)), daemon=True)
        for i in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            threads = [pool.submit(run_writer, *args(i)) for i in range(THREADS)]
            thread_reports = [future.result(timeout=300) for future in threads]
        process_reports = [queue.get(timeout=300) for _ in processes]
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    final = read_worker_status(cluster.api, node)["metadata"]["resourceVersion"]
    wait_for(lambda: recorder.has_seen(final), 30, "the watch to see the last version")
    return thread_reports + process_reports


def test_eight_writers_lose_nothing_and_apply_no_stale_write(
    cluster: Cluster, admin: client.ApiClient, worker_status: Any
) -> None:
    node = worker_status()
    gpus = [f"GPU-{uuid.uuid4()}" for _ in range(GPUS)]
    with recording(admin, node) as recorder:
        reports = run_writers(cluster, node, gpus, recorder)

    assert [r.get("crash") for r in reports] == [None] * len(reports)
    assert [e for r in reports for e in r["errors"]] == []
    operations = sum(r["operations"] for r in reports)
    assert operations >= 2000
    gave_up = sum(r["gave_up"] for r in reports)
    assert gave_up < operations // 20, f"{gave_up} writes gave up after 2 s of conflicts"
    ran = {x["pod_uid"]: x for r in reports for x in r["ran"]}
    stale_sent = sum(r["stale_sent"] for r in reports)
    assert stale_sent > 0

    # One worker per GPU, the same for every writer.
    worker_of = {x["gpu"]: x["worker"] for x in ran.values()}
    assert sorted(worker_of.values()) == [f"W{k}" for k in range(GPUS)]
    assert all(worker_of[x["gpu"]] == x["worker"] for x in ran.values())

    check_every_version(recorder.seen, ran, worker_of, gpus)

    status = read_worker_status(admin, node)["status"]
    assert status["staleWritesRejected"] == stale_sent
    assert (status["workerCount"], status["proving"]) == (GPUS, 0)
    by_id = {w["id"]: w for w in status["workers"]}
    for g, gpu in enumerate(gpus):
        mine = [x for x in ran.values() if x["gpu"] == g]
        last = max(mine, key=lambda x: x["order"])
        w = by_id[worker_of[g]]
        assert w["gpu"]["uuid"] == gpu
        assert (w["state"], w["pod"]["uid"]) == ("idle", last["pod_uid"])
        assert w["completed"] == sum(x["succeeded"] for x in mine)


def check_every_version(
    seen: list[dict[str, Any]],
    ran: dict[str, dict[str, Any]],
    worker_of: dict[int, str],
    gpus: list[str],
) -> None:
    """Invariants of each recorded version, and monotonic progress between versions: a worker
    only moves on to a later assignment of its GPU, and from proving to idle within one."""
    assert len(seen) > 100, "the watch saw the writes"
    progress: dict[str, tuple[int, int]] = defaultdict(lambda: (0, 0))
    completed: dict[str, int] = defaultdict(int)
    rejected = 0
    for obj in seen:
        status = obj.get("status") or {}
        workers = status.get("workers") or []
        proving = [w for w in workers if w["state"] == "proving"]
        assert len({w["id"] for w in workers}) == len(workers)
        assert len({w["gpu"]["uuid"] for w in workers}) == len(workers)
        assert len({w["pod"]["uid"] for w in proving}) == len(proving), "one pod, one worker"
        assert status["proving"] == len(proving)
        assert status["staleWritesRejected"] >= rejected
        rejected = status["staleWritesRejected"]
        for w in workers:
            x = ran.get(w["pod"]["uid"])
            assert x is not None, f"{w['id']} holds an unknown pod"
            assert gpus[x["gpu"]] == w["gpu"]["uuid"] and worker_of[x["gpu"]] == w["id"]
            step = (x["order"], 0 if w["state"] == "proving" else 1)
            assert step >= progress[w["id"]], f"{w['id']} went back from {progress[w['id']]}"
            progress[w["id"]] = step
            assert w["completed"] >= completed[w["id"]]
            completed[w["id"]] = w["completed"]
            if w["state"] == "proving":
                assert "job" in w
                assert w.get("stage") is None or w["stage"] in x["stages"]
            else:
                assert not {"job", "stage", "partition", "attempt"} & w.keys()
