"""Eight lane writers (four threads, four processes) share one node's WorkerStatus over four
GPUs, two lanes per GPU: each runs partitions as the prover does (join, stages, acquire the
GPU phase, waiting on a watch, release it, leave), some provers die holding the GPU phase and
are released by their pod (the finalizer), and late writes about lanes that are gone are sent
on purpose. No two lanes may hold one GPU's phase at once (by the writers' own clocks), no
write gives up for good, every refused write is counted, and a watch records every version
of the object in between: each must hold the invariants."""

from __future__ import annotations

import contextlib
import itertools
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
PARTITIONS_PER_WRITER = 30


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
    """Run the writers to the end (two per GPU, a thread and a process); return their reports
    once the watch has seen the last version."""
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()

    def args(writer: int) -> tuple[Any, ...]:
        return (str(cluster.kubeconfig), node, writer, gpus, writer % len(gpus),
                PARTITIONS_PER_WRITER, 1000 + writer)

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


def test_eight_lanes_hold_the_gpu_phase_one_at_a_time_and_lose_nothing(
    cluster: Cluster, admin: client.ApiClient, worker_status: Any
) -> None:
    node = worker_status()
    gpus = [f"GPU-{uuid.uuid4()}" for _ in range(GPUS)]
    with recording(admin, node) as recorder:
        reports = run_writers(cluster, node, gpus, recorder)

    assert [r.get("crash") for r in reports] == [None] * len(reports)
    assert [e for r in reports for e in r["errors"]] == []
    assert sum(r["gave_up"] for r in reports) == 0, "a write gave up after its conflict budget"
    partitions = sum(r["partitions"] for r in reports)
    assert partitions == (THREADS + PROCESSES) * PARTITIONS_PER_WRITER
    stale_sent = sum(r["stale_sent"] for r in reports)
    assert stale_sent > 0

    holds = sorted((h for r in reports for h in r["holds"]), key=lambda h: (h["gpu"],
                                                                          h["granted"]))
    overlaps = [(a["pod_uid"], b["pod_uid"]) for a, b in itertools.pairwise(holds)
                if a["gpu"] == b["gpu"] and b["granted"] < a["released"]]
    assert overlaps == [], "two lanes held one GPU's phase at once"
    shared = {g: {r["writer"] for r in reports if r["gpu"] == g} for g in range(GPUS)}
    assert all(len(writers) == 2 for writers in shared.values())

    check_every_version(recorder.seen, gpus)
    status = read_worker_status(admin, node)["status"]
    assert status["staleWritesRejected"] == stale_sent
    assert (status["workerCount"], status["proving"], status["lanes"]) == (GPUS, 0, 0)
    by_gpu = {w["gpu"]["uuid"]: w for w in status["workers"]}
    for g, gpu in enumerate(gpus):
        w = by_gpu[gpu]
        assert (w["state"], w["lanes"]) == ("idle", [])
        assert w["completed"] == sum(r["succeeded"] for r in reports if r["gpu"] == g)


def check_every_version(seen: list[dict[str, Any]], gpus: list[str]) -> None:
    """Invariants of each recorded version: one worker per GPU, the holder one of its lanes
    and the only lane in stage gpu, counts that match, counters that never go down."""
    assert len(seen) > 100, "the watch saw the writes"
    completed: dict[str, int] = defaultdict(int)
    rejected = 0
    for obj in seen:
        status = obj.get("status") or {}
        workers = status.get("workers") or []
        assert len({w["id"] for w in workers}) == len(workers)
        assert {w["gpu"]["uuid"] for w in workers} <= set(gpus)
        assert len({w["gpu"]["uuid"] for w in workers}) == len(workers)
        assert status["proving"] == sum("holder" in w for w in workers)
        assert status["lanes"] == sum(len(w["lanes"]) for w in workers)
        assert status["staleWritesRejected"] >= rejected
        rejected = status["staleWritesRejected"]
        for w in workers:
            uids = [lane["pod"]["uid"] for lane in w["lanes"]]
            assert len(set(uids)) == len(uids), "one lane per pod"
            in_gpu = [lane["pod"]["uid"] for lane in w["lanes"] if lane["stage"] == "gpu"]
            held = w.get("holder", {}).get("pod", {}).get("uid")
            assert in_gpu == ([held] if held else []), f"{w['id']}: {held} holds, {in_gpu} in gpu"
            assert w["completed"] >= completed[w["id"]]
            completed[w["id"]] = w["completed"]
