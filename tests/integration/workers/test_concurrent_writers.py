"""Eight lane writers (four threads, four processes) share one node's four GPUs, two lanes per GPU,
each GPU's WorkerStatus written by its two lanes (and the finalizer and the sweep): each runs
partitions as the prover does (join, stages, acquire the GPU phase, waiting on a watch, release
it, leave). Some provers die, holding the GPU phase or before asking for it: the operator's
finalizer releases some by their pod, the others' pods are gone and a sweeper (the operator's
sweep, told which pods are gone) removes their lanes. Late writes about lanes that are gone are
sent on purpose. No two lanes may hold one GPU's phase at once (by the writers' own clocks), no
write gives up for good, every refused write is counted and nothing else is, nothing is lost (no
lane left, completed counts what succeeded), and a watch records every version of each GPU's
object in between: each must hold the invariants, and each must follow from the one before by
one write of the protocol (``model.explain``) — a lost update, or a write applied to a version
it did not read, would show as a step no single write makes — with lanes removed only as their
writers say."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import queue
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch

from kuzk.contract import api as kapi
from kuzk.contract.workerstatus import worker_status_name
from kuzk.contract.workerstatus.writes import sweep
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.workers.conftest import read_worker_status
from tests.integration.workers.model import explain
from tests.integration.workers.writers import process_main, run_writer

THREADS, PROCESSES, GPUS = 4, 4, 4
PARTITIONS_PER_WRITER = 30


class Recorder(threading.Thread):
    """Watches the WorkerStatuses of one node (none yet: each GPU's first lane makes its own)
    and keeps every version of each it sees, in order."""

    def __init__(self, api: client.ApiClient, node: str) -> None:
        super().__init__(name=f"watch-{node}", daemon=True)
        self.objects = client.CustomObjectsApi(api)
        self.node = node
        self.seen: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.done = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        where = (kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL)
        selector = f"spec.nodeName={self.node}"
        listed = self.objects.list_cluster_custom_object(*where, field_selector=selector)
        rv = listed["metadata"]["resourceVersion"]
        assert listed["items"] == [], "the GPUs' first lanes make their WorkerStatuses"
        self.ready.set()
        while not self.done.is_set():
            for event in watch.Watch().stream(
                self.objects.list_cluster_custom_object,
                *where,
                field_selector=selector,
                resource_version=rv,
                timeout_seconds=2,
            ):
                obj = event["object"]
                rv = obj["metadata"]["resourceVersion"]
                self.seen[obj["metadata"]["name"]].append(obj)

    def has_seen(self, name: str, rv: str) -> bool:
        return any(obj["metadata"]["resourceVersion"] == rv for obj in self.seen[name])


@contextlib.contextmanager
def recording(api: client.ApiClient, node: str) -> Iterator[Recorder]:
    recorder = Recorder(api, node)
    recorder.start()
    try:
        assert recorder.ready.wait(30), "the watch started"
        yield recorder
    finally:
        recorder.done.set()
        recorder.join(timeout=10)


class AllBut(Mapping[str, None]):
    """The sweep's view of the pods: every pod exists and runs, but those that are gone."""

    def __init__(self, gone: set[str]) -> None:
        self.gone = frozenset(gone)

    def __contains__(self, uid: object) -> bool:
        return uid not in self.gone

    def __getitem__(self, uid: str) -> None:
        if uid in self.gone:
            raise KeyError(uid)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class Sweeper(threading.Thread):
    """The operator's sweep, run as soon as a writer says that a pod is gone. Records when the
    sweep that removed each lane began (before its write: no later holder was granted
    before it)."""

    def __init__(self, api: client.ApiClient, names: list[str], dead: Any) -> None:
        super().__init__(name="sweep", daemon=True)
        self.api, self.names, self.dead = api, names, dead
        self.gone: set[str] = set()
        self.removed_at: dict[str, float] = {}
        self.sweeps = 0
        self.errors: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            with contextlib.suppress(queue.Empty):
                self.gone.add(self.dead.get(timeout=0.05))
            if not self.gone - set(self.removed_at):
                continue
            started = time.monotonic()
            try:
                released = [r for name in self.names for r in
                            sweep(self.api, name, AllBut(self.gone), datetime.now(UTC))]
            except Exception as error:  # the test must fail with it, not hang
                self.errors.append(f"{type(error).__name__}: {error}")
                return
            self.sweeps += 1
            for r in released:
                if r.pod.uid not in self.gone or r.outcome != "lost":
                    self.errors.append(f"swept {r}, not a gone pod")
                self.removed_at[r.pod.uid] = started


def run_writers(
    cluster: Cluster, node: str, gpus: list[str], recorder: Recorder
) -> tuple[list[dict[str, Any]], Sweeper]:
    """Run the writers to the end (two per GPU, a thread and a process) and the sweeper until
    it has removed every lane left to it; return their reports once the watch has seen the
    last version."""
    spawn = multiprocessing.get_context("spawn")
    reports, dead = spawn.Queue(), spawn.Queue()
    names = [worker_status_name(node, gpu) for gpu in gpus]
    sweeper = Sweeper(cluster.api, names, dead)

    def args(writer: int) -> tuple[Any, ...]:
        return (str(cluster.kubeconfig), node, writer, gpus, writer % len(gpus),
                PARTITIONS_PER_WRITER, 1000 + writer, dead)

    processes = [
        spawn.Process(target=process_main, args=(reports, *args(THREADS + i)), daemon=True)
        for i in range(PROCESSES)
    ]
    sweeper.start()
    for process in processes:
        process.start()
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            threads = [pool.submit(run_writer, *args(i)) for i in range(THREADS)]
            thread_reports = [future.result(timeout=300) for future in threads]
        process_reports = [reports.get(timeout=300) for _ in processes]
        left = {uid for r in thread_reports + process_reports for uid in r.get("swept", [])}
        wait_for(lambda: left <= set(sweeper.removed_at) or sweeper.errors, 60,
                 "the sweep to remove every lane of a gone pod")
    finally:
        sweeper.done.set()
        sweeper.join(timeout=30)
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    for name in names:
        final = read_worker_status(cluster.api, name)["metadata"]["resourceVersion"]
        wait_for(lambda name=name, final=final: recorder.has_seen(name, final), 30,
                 f"the watch to see the last version of {name}")
    return thread_reports + process_reports, sweeper


def test_eight_lanes_hold_the_gpu_phase_one_at_a_time_and_lose_nothing(
    cluster: Cluster, admin: client.ApiClient, worker_status: Any
) -> None:
    node = worker_status()
    gpus = [f"GPU-{uuid.uuid4()}" for _ in range(GPUS)]
    with recording(admin, node) as recorder:
        reports, sweeper = run_writers(cluster, node, gpus, recorder)

    assert [r.get("crash") for r in reports] == [None] * len(reports)
    assert [e for r in reports for e in r["errors"]] + sweeper.errors == []
    assert sum(r["gave_up"] for r in reports) == 0, "a write gave up after its conflict budget"
    partitions = sum(r["partitions"] for r in reports)
    assert partitions == (THREADS + PROCESSES) * PARTITIONS_PER_WRITER
    stale_sent = sum(r["stale_sent"] for r in reports)
    swept = {uid for r in reports for uid in r["swept"]}
    assert stale_sent > 0 and sum(r["finalized"] for r in reports) > 0 and len(swept) > 0
    assert set(sweeper.removed_at) == swept, "the sweep removed the lanes of gone pods only"

    holds = [dict(h) for r in reports for h in r["holds"]]
    for h in holds:
        if h["released"] is None:
            h["released"] = sweeper.removed_at[h["pod_uid"]]
    holds.sort(key=lambda h: (h["gpu"], h["granted"]))
    overlaps = [(a["pod_uid"], b["pod_uid"]) for a, b in itertools.pairwise(holds)
                if a["gpu"] == b["gpu"] and b["granted"] < a["released"]]
    assert overlaps == [], "two lanes held one GPU's phase at once"
    assert any(h["pod_uid"] in swept for h in holds), "a holder was left to the sweep"
    shared = {g: {r["writer"] for r in reports if r["gpu"] == g} for g in range(GPUS)}
    assert all(len(writers) == 2 for writers in shared.values())

    names = [worker_status_name(node, gpu) for gpu in gpus]
    assert sorted(recorder.seen) == sorted(names), "one WorkerStatus per GPU"
    outcomes = {uid: outcome for r in reports for uid, outcome in r["outcomes"].items()}
    kinds: Counter[str] = Counter()
    for gpu, name in zip(gpus, names, strict=True):
        created, *written = recorder.seen[name]
        check_every_version(written, gpu)
        kinds += check_every_step(created, written, outcomes)
    assert kinds["stale"] == stale_sent, "refused writes: as many as were sent late"
    assert kinds["acquire-wait"] > 0, "lanes waited for the GPU phase"
    stale = 0
    for g, name in enumerate(names):
        status = read_worker_status(admin, name)["status"]
        stale += status["staleWritesRejected"]
        assert (status["workerCount"], status["proving"], status["lanes"]) == (1, 0, 0)
        (w,) = status["workers"]
        assert (w["gpu"]["uuid"], w["state"], w["lanes"]) == (gpus[g], "idle", [])
        assert w["completed"] == sum(r["succeeded"] for r in reports if r["gpu"] == g)
    assert stale == stale_sent


def check_every_version(seen: list[dict[str, Any]], gpu: str) -> None:
    """Invariants of each recorded version of ``gpu``'s WorkerStatus: at most its one worker,
    the holder one of its lanes and the only lane in stage gpu, counts that match, counters
    that never go down."""
    assert len(seen) > 25, "the watch saw the writes"
    completed: dict[str, int] = defaultdict(int)
    rejected = 0
    for obj in seen:
        status = obj.get("status") or {}
        workers = status.get("workers") or []
        assert [w["gpu"]["uuid"] for w in workers] in ([], [gpu])
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


def check_every_step(
    initial: dict[str, Any], seen: list[dict[str, Any]], outcomes: dict[str, str]
) -> Counter[str]:
    """Each recorded version follows from the one before by one write of the protocol, and a
    lane goes only as its writer said: by the sweep only if its pod was gone, adding to the
    completed count exactly when it succeeded. Returns how many steps of each kind."""
    kinds: Counter[str] = Counter()
    before = initial.get("status") or {}
    for obj in seen:
        after = obj.get("status") or {}
        rv = obj["metadata"]["resourceVersion"]
        step = explain(before, after)
        assert step is not None, f"version {rv} follows from no single write of the protocol"
        kinds[step.kind] += 1
        if step.removed:
            assert all(uid in outcomes for uid in step.removed), f"{rv}: an unknown lane went"
            if step.kind == "sweep":
                assert all(outcomes[uid] == "lost" for uid in step.removed), rv
            done = sum(w.get("completed", 0) for w in after.get("workers") or [])
            was = sum(w.get("completed", 0) for w in before.get("workers") or [])
            assert done - was == sum(outcomes[u] == "succeeded" for u in step.removed), rv
        before = after
    return kinds
