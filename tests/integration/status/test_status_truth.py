"""With the real operator and the real prover, on GPUs of two lanes each, /status tells the
truth while a job runs: every sample shows, for the job and for each GPU, exactly what the API
object of the resourceVersion it names said, and that version was current (or superseded less
than LAG_S before the sample): the GPU's state, the holder of its GPU phase (job, partition and
pod) and every lane with its stage; the order never changes; and at the end the counters and
/metrics add up, and each GPU's busy and idle time add up to no more than the server's
uptime. No sample shows more partitions in ``gpu`` than GPUs with a holder, each of them a
holder, and every partition is seen ``committing``, in the WorkerStatuses and in /status;
each lane's host memory is its prover's own resident memory in ``/proc`` since the lane's
last write, each node's is the sum of its lanes' and, while its lanes wait or commit, agrees
with its provers' at the moment of the sample, and their device memory is 0 (NumPy). A
failed job shows its failed partitions with their reason and leaves none pending.

What the samples must see (each partition synthesizing, in ``gpu`` and ``committing``, a GPU
waiting for its lanes) is not left to the sampling's timing: the provers are the built-in one
with gates (``Gates``), each waiting, alive, at those stages until a sample of /status has
shown it there."""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from kuzk.contract import api
from kuzk.contract.workerstatus import worker_status_name
from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, proofjob, wait_job
from tests.integration.operator.test_worker_truth import Gates
from tests.integration.status.server import StatusServer

# How long after the API server a sample may still show a version: the watch's delivery plus
# the server's render (a document may trail the view by its max_stale, 1 s).
LAG_S = 3.0


class Versions:
    """Every version of the watched objects, with when the test's own watch received it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: dict[str, list[tuple[float, dict[str, Any]]]] = defaultdict(list)

    def add(self, obj: dict[str, Any]) -> None:
        with self.lock:
            self.seen[obj["metadata"]["name"]].append((time.monotonic(), obj))

    def find(self, name: str, rv: str) -> tuple[dict[str, Any], float | None] | None:
        """The version ``rv`` of ``name`` and when it was superseded (None: still current)."""
        with self.lock:
            history = list(self.seen.get(name, []))
        for i, (_, obj) in enumerate(history):
            if obj["metadata"]["resourceVersion"] == rv:
                return obj, history[i + 1][0] if i + 1 < len(history) else None
        return None


def record(lister: Callable[..., Any], args: tuple[Any, ...], versions: Versions,
           stop: threading.Event) -> None:
    listing = lister(*args)
    for item in listing["items"]:
        versions.add(item)
    rv = listing["metadata"]["resourceVersion"]
    while not stop.is_set():
        for event in watch.Watch().stream(lister, *args, resource_version=rv,
                                          timeout_seconds=1):
            rv = event["object"]["metadata"]["resourceVersion"]
            versions.add(event["object"])


@dataclass
class Agreement:
    jobs_compared: int = 0
    workers_compared: int = 0
    proving_compared: int = 0
    states_seen: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    worker_orders: set[tuple[str, ...]] = field(default_factory=set)
    committing_seen: set[int] = field(default_factory=set)
    gpu_seen: set[int] = field(default_factory=set)
    jobs_at: set[float] = field(default_factory=set)  # samples whose job lines were compared
    rows_at: set[tuple[float, str]] = field(default_factory=set)  # (sample, GPU row) with lanes


# A lane's stage, as the partition state it shows (``lanes.PARTITION_STATE``).
SHOWN = {"starting": "scheduled", "committing": "committing"}


def expected_states(doc: dict[str, Any], p: dict[str, Any],
                    truth: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The job's partitions as /status must show them: the job's status, except that an
    attempt with a lane in the same document shows its lane (``gpu`` only for the holder),
    and one the job says is in ``gpu`` without a lane there shows ``committing``."""
    lanes = {}
    for w in doc["gpu_workers"]:
        held = (w["holder"] or {}).get("pod")
        for lane in w["lanes"]:
            stage = "gpu" if lane["pod"] == held else SHOWN.get(lane["stage"], lane["stage"])
            lanes[(lane["job_id"], lane["partition"], lane["attempt"])] = stage
    out = []
    for index, state, attempt, node, worker in truth:
        if state not in ("done", "failed"):
            state = lanes.get((p["job_id"], index, attempt),
                              "committing" if state == "gpu" else state)
        out.append((index, state, attempt, node, worker))
    return out


def check_holders(doc: dict[str, Any], seen: Agreement) -> None:
    """Partitions shown in ``gpu`` are holders of GPUs' phases, in the same document."""
    holders = {(w["holder"]["job_id"], w["holder"]["partition"])
               for w in doc["gpu_workers"] if w["holder"]}
    for p in doc["pipelines"]:
        for q in p["partitions"]:
            if q["state"] == "gpu":
                seen.gpu_seen.add(q["index"])
                if (p["job_id"], q["index"]) not in holders:
                    seen.problems.append(f"{p['job_id']} P{q['index']} shown in gpu, but the"
                                         f" GPUs' holders are {sorted(holders)}")
            elif q["state"] == "committing":
                seen.committing_seen.add(q["index"])


def committed(workers: Versions) -> set[tuple[str, int]]:
    """The partitions some WorkerStatus version showed in stage committing."""
    with workers.lock:
        versions = [obj for history in workers.seen.values() for _, obj in history]
    return {(f"{lane['job']['namespace']}/{lane['job']['name']}", lane["partition"])
            for obj in versions for w in (obj.get("status") or {}).get("workers") or []
            for lane in w.get("lanes") or [] if lane["stage"] == "committing"}


def resident(pid: int) -> int | None:
    """A process's resident memory as /proc says (None once it has exited)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class Memory:
    """What the samples saw of memory: each lane's host memory beside its prover's /proc
    resident memory since the lane's last write, and, where all of a node's lanes are in
    SETTLED stages, the node's beside the sum of its provers' at the moment of the sample."""

    # pid -> (time.time(), resident bytes) for every reading the samples made
    readings: dict[int, list[tuple[float, int]]] = field(default_factory=lambda: defaultdict(list))
    lanes_compared: int = 0
    ratios: list[float] = field(default_factory=list)
    ratio_lanes: list[str] = field(default_factory=list)  # what each ratio compared
    synthesizing: list[tuple[int, int]] = field(default_factory=list)
    device: set[int | None] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def current_lanes(workers: Versions, node: str) -> set[str]:
    """The pods with a lane on ``node`` in the newest version of each of its GPUs'
    WorkerStatuses the test's watch has."""
    with workers.lock:
        newest = [history[-1][1] for history in workers.seen.values()
                  if history and (history[-1][1].get("spec") or {}).get("nodeName") == node]
    return {lane["pod"]["name"] for obj in newest
            for w in (obj.get("status") or {}).get("workers") or []
            for lane in w.get("lanes") or []}


# A lane measures its prover right before each write it makes; the samples read /proc every
# 0.1 s, so the reading nearest that moment may be up to a sample period (and a loaded
# machine's lateness) before it.
WRITE_SLACK_S = 1.0
# Stages whose prover's memory stays what it was at the stage's write: a starting prover
# imports, a synthesizing one builds its witness, and on NumPy the GPU phase's arrays are
# host memory allocated after the acquire write; a lane that waits holds its witness.
SETTLED = {"synth_done", "committing"}


def lane_agrees(lane: dict[str, Any], readings: list[tuple[float, int]],
                rendered: float) -> bool:
    """The lane's host memory lies within 20 % of the range its prover's resident memory
    took from the lane's last write (its stage change, or its acquire's readyAt, as of the
    document rendered at ``rendered``) on."""
    ages = [lane["stage_secs"], *([] if lane["ready_secs"] is None else [lane["ready_secs"]])]
    written = rendered - min(ages) - WRITE_SLACK_S
    since = [m for t, m in readings if t >= written]
    return bool(since) and 0.8 * min(since) <= lane["host_memory_bytes"] <= 1.2 * max(since)


def _written(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def measure(doc: dict[str, Any], kubelet: ProcessKubelet, workers: Versions,
            memory: Memory) -> set[str]:
    """Compare the document's lanes and nodes with the provers' memory now; the pods whose
    lanes were compared."""
    compared: set[str] = set()
    pids = {r.name: c.proc.pid for r in list(kubelet.runners.values())
            for c in r.containers if c.proc is not None}
    # A prover that wrote its result has let its arrays go and is about to leave its lane:
    # its lane shows the memory it held while committing until the leave write lands.
    finished = {r.name for r in list(kubelet.runners.values())
                for c in r.containers if _written(c.message_file)}
    now = time.time()
    # Every prover is read, from its start on, not only those the document shows yet: a
    # lane's figure may come from a write the document's render trails.
    for pid in pids.values():
        m = resident(pid)
        if m is not None:
            memory.readings[pid].append((now, m))
    rss = {pod: memory.readings[pid][-1][1] if memory.readings[pid] else None
           for pod, pid in pids.items()}
    for n in doc["nodes"]:
        if n["node"] not in kubelet.nodes:
            continue
        lanes = [lane for w in doc["gpu_workers"] if w["node"] == n["node"]
                 for lane in w["lanes"]]
        memory.device.add(n["device_memory_bytes"])
        memory.device.update(lane["device_memory_bytes"] for lane in lanes)
        memory.synthesizing.append((n["lanes_synthesizing"],
                                    sum(lane["stage"] == "synthesizing" for lane in lanes)))
        figures = [lane["host_memory_bytes"] for lane in lanes]
        if n["host_memory_bytes"] != sum(f or 0 for f in figures):
            memory.problems.append(f"{n['node']}: host memory {n['host_memory_bytes']} is not"
                                   f" the sum of its lanes' {figures}")
        measured = [rss.get(lane["pod"]) for lane in lanes]
        if (not lanes or None in measured or None in figures
                or not {lane["pod"] for lane in lanes} <= current_lanes(workers, n["node"])):
            # A lane not measured yet, or left since the document was rendered (its prover
            # may be exiting, its memory going).
            continue
        for lane in lanes:
            memory.lanes_compared += 1
            compared.add(lane["pod"])
            if not lane_agrees(lane, memory.readings[pids[lane["pod"]]], doc["generated_at"]):
                memory.problems.append(
                    f"{lane['pod']} ({lane['stage']}): host memory {lane['host_memory_bytes']}"
                    f" outside its prover's /proc resident memory since its last write"
                    f" {[m for _, m in memory.readings[pids[lane['pod']]]][-20:]}")
        if ({lane["stage"] for lane in lanes} <= SETTLED
                and not {lane["pod"] for lane in lanes} & finished):
            memory.ratios.append(n["host_memory_bytes"] / sum(m or 0 for m in measured))
            memory.ratio_lanes.append(
                f"{n['node']}: provers hold {measured} now; lanes"
                f" {[(lane['pod'], lane['stage'], lane['host_memory_bytes']) for lane in lanes]}")
    return compared


# The stages every prover waits at until a sample shows it there; a lane in each shows as the
# partition state of the same name.
GATED = ("synthesizing", "gpu", "committing")


def at_gate(doc: dict[str, Any], nodes: list[str], pod: str,
            stage: str) -> tuple[str, int] | None:
    """The GPU row (``node/worker``) and the partition of ``pod``'s lane where the document
    shows it in the ``stage`` its prover waits at, its job's line too (and for ``gpu``, the
    lane the holder of a GPU in state gpu); None where it does not."""
    for w in doc["gpu_workers"]:
        lane = next((x for x in w["lanes"] if x["pod"] == pod), None)
        if w["node"] not in nodes or lane is None:
            continue
        if stage == "gpu":
            if (w["holder"] or {}).get("pod") != pod or w["state"] != "gpu":
                return None
        elif lane["stage"] != stage:
            return None
        p = next((p for p in doc["pipelines"] if p["job_id"] == lane["job_id"]), None)
        states = {q["index"]: q["state"] for q in (p or {}).get("partitions") or []}
        if states.get(lane["partition"]) != stage:
            return None
        return f"{w['node']}/{w['worker_id']}", lane["partition"]
    return None


def _current(seen: Agreement, what: str, found: tuple[dict[str, Any], float | None] | None,
             at: float) -> dict[str, Any] | None:
    if found is None:
        seen.problems.append(f"{what}: /status names a version the API server never had")
        return None
    obj, superseded = found
    if superseded is not None and superseded < at - LAG_S:
        seen.problems.append(f"{what}: /status shows a version superseded "
                             f"{at - superseded:.1f} s before the sample")
    return obj


def compare(t: float, doc: dict[str, Any], jobs: Versions, workers: Versions,
            nodes: list[str], seen: Agreement) -> None:
    """Compare one /status sample with the versions of the objects it says it shows."""
    check_holders(doc, seen)
    mine = [w for w in doc["gpu_workers"] if w["node"] in nodes]
    seen.worker_orders.add(tuple(f"{w['node']}/{w['worker_id']}" for w in mine))
    for p in doc["pipelines"]:
        job = _current(seen, f"job {p['job_id']}", jobs.find(p["name"], p["resource_version"]),
                       t)
        if job is None:
            continue
        seen.jobs_compared += 1
        seen.jobs_at.add(t)
        truth = [(q["index"], q["state"], q["attempt"], q.get("node"), q.get("worker"))
                 for q in (job.get("status") or {}).get("partitions") or []]
        shown = [(q["index"], q["state"], q["attempt"], q["node"], q["worker"])
                 for q in p["partitions"]][:len(truth)]
        truth = expected_states(doc, p, truth)
        if shown != truth:
            seen.problems.append(f"job {p['job_id']}: /status {shown} but the API {truth}")
    for row in mine:
        what = f"worker {row['node']}/{row['worker_id']}"
        name = worker_status_name(row["node"], row["gpu_uuid"])
        ws = _current(seen, what, workers.find(name, row["resource_version"]), t)
        if ws is None:
            continue
        seen.workers_compared += 1
        w = next(w for w in ws["status"]["workers"] if w["id"] == row["worker_id"])
        lanes = [(f"{lane['job']['namespace']}/{lane['job']['name']}", lane["partition"],
                  lane["stage"], lane["pod"]["name"]) for lane in w.get("lanes") or []]
        truth: tuple[Any, ...] = (w["state"], None, None, None, lanes)
        if w.get("holder"):
            held = next(lane for lane in w["lanes"]
                        if lane["pod"]["uid"] == w["holder"]["pod"]["uid"])
            truth = (w["state"], f"{held['job']['namespace']}/{held['job']['name']}",
                     held["partition"], held["pod"]["name"], lanes)
        if lanes:
            seen.proving_compared += 1
            seen.rows_at.add((t, f"{row['node']}/{row['worker_id']}"))
        seen.states_seen.add(row["state"])
        holder = row["holder"] or {}
        shown = (row["state"], row["current_job"], row["current_partition"], holder.get("pod"),
                 [(lane["job_id"], lane["partition"], lane["stage"], lane["pod"])
                  for lane in row["lanes"]])
        if shown != truth:
            seen.problems.append(f"{what}: /status {shown} but the API {truth}")


def test_status_tells_the_truth_while_a_real_job_runs(cluster: Cluster, namespace: str, nodes,
                                                      operator, status_server,
                                                      tmp_path: Path) -> None:
    kubelet: ProcessKubelet = nodes(2, gpus=2, replicas=2)
    names = sorted(kubelet.nodes)
    gates = Gates(tmp_path / "gates")
    gates.set(**{"*": list(GATED)})
    operator(*gates.command())
    server: StatusServer = status_server()
    custom = client.CustomObjectsApi(cluster.api)
    jobs, workers = Versions(), Versions()
    samples: list[tuple[float, dict[str, Any]]] = []
    memory = Memory()
    # (pod, stage) -> the sample that showed its prover at that gate, the GPU row and partition
    gated: dict[tuple[str, str], tuple[float, str, int]] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            t = time.monotonic()
            doc = server.status(namespace=namespace)
            measured = measure(doc, kubelet, workers, memory)
            samples.append((t, doc))
            # A prover at a gate goes on once a sample showed it there, its lane's memory
            # compared with its prover's.
            for pod, stage in gates.waiting():
                found = at_gate(doc, names, pod, stage)
                if found is not None and pod in measured:
                    gated[(pod, stage)] = (t, *found)
                    gates.release(pod, stage)

    threads = [
        threading.Thread(target=record, args=(
            custom.list_namespaced_custom_object,
            (api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL), jobs, stop)),
        threading.Thread(target=record, args=(
            custom.list_cluster_custom_object,
            (api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL), workers, stop)),
        threading.Thread(target=sample),
    ]
    for thread in threads:
        thread.start()
    try:
        apply_job(cluster, namespace, proofjob("truth", circuitLog2=18))
        job = wait_job(cluster, namespace, "truth", "Succeeded", timeout=300)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    seen = Agreement()
    for t, doc in samples:
        compare(t, doc, jobs, workers, names, seen)
    assert seen.problems == []
    # Every partition's prover waited at each gate until a sample showed it there: every
    # partition seen synthesizing, in gpu and committing, on /status, and each of those
    # samples' job line and the lane's GPU row agreed with the API's versions they name.
    proved = {p["pod"] for p in job["status"]["partitions"]}
    assert {(pod, stage) for pod in proved for stage in GATED} <= set(gated), sorted(gated)
    assert {t for t, _, _ in gated.values()} <= seen.jobs_at, seen
    assert {(t, row) for t, row, _ in gated.values()} <= seen.rows_at, seen
    assert seen.gpu_seen == set(range(16)), seen
    # The job's own status (kubectl get pj -o yaml), which takes the lanes' stages with the
    # writes the job needs anyway or at most one every STAGE_SECONDS, never has more
    # partitions in gpu than the fleet has GPUs: a committing lane is not on one.
    most = max(sum(q["state"] == "gpu" for q in (obj.get("status") or {}).get("partitions") or [])
               for history in jobs.seen.values() for _, obj in history)
    assert most <= 4, most
    # Every partition's lane committed after giving the GPU up, as the WorkerStatuses say
    # (the watch sees every version) and as /status showed.
    assert committed(workers) == {(f"{namespace}/truth", i) for i in range(16)}
    assert seen.committing_seen == set(range(16)), seen.committing_seen
    # Each lane's figure is its prover's resident memory at the lane's last write, and the
    # node's is their sum; where every lane's stage keeps its memory, the node's agrees with
    # /proc at the moment of the sample.
    assert memory.problems == [], memory.problems[:5]
    assert memory.lanes_compared >= len(gated), memory
    assert all(0.8 <= r <= 1.2 for r in memory.ratios), [
        (r, lanes) for r, lanes in zip(memory.ratios, memory.ratio_lanes, strict=True)
        if not 0.8 <= r <= 1.2]
    assert all(shown == counted for shown, counted in memory.synthesizing)
    assert any(shown > 0 for shown, _ in memory.synthesizing)
    assert memory.device == {0}, memory.device
    # Lanes start and synthesize on the CPU before any holds the GPU phase: the first sample
    # that showed a GPU's lanes showed them at the synthesizing gate, the GPU waiting.
    assert {"waiting", "gpu"} <= seen.states_seen, seen
    # the workers keep one order in every sample that shows all four
    assert len({order for order in seen.worker_orders if len(order) == 4}) == 1

    def settled() -> dict[str, Any] | None:
        doc = server.status(namespace=namespace)
        mine = [w for w in doc["gpu_workers"] if w["node"] in names]
        p = doc["pipelines"][0] if doc["pipelines"] else None
        done = p is not None and p["partitions_done"] == p["total_partitions"] == 16
        idle = len(mine) == 4 and all(w["state"] == "idle" for w in mine)
        return doc if done and idle else None

    doc = wait_for(settled, 10, "/status showing the finished job and idle workers")
    counters = doc["counters"]
    assert (counters["total_completed"], counters["total_failed"]) == (16, 0)
    assert counters["completed_by_kind"]["snap-update"] == 16
    assert counters["queue_depth"] == 0
    mine = [w for w in doc["gpu_workers"] if w["node"] in names]
    assert sum(w["completed"] for w in mine) == 16
    assert all(w["current_job"] is None for w in mine)
    assert all(w["busy_fraction_10m"] > 0 for w in mine)
    for w in mine:
        total = w["busy_seconds_total"] + sum(w["idle_seconds_total"].values())
        assert total <= doc["uptime_secs"] + 1.0, w
        assert w["idle_seconds_total"]["cpu"] > 0, w
        assert (w["idle_reason"], w["holder"], w["lanes"]) == ("no_work", None, [])
        assert w["busy_seconds_total"] > 0, w

    metrics = server.metrics()
    ns = ("namespace", namespace)
    kind = ("proof_kind", "snap-update")
    assert metrics[("kuzk_partitions", (ns, kind, ("state", "done")))] == 16
    assert metrics[("kuzk_partitions_completed_total", (ns, kind))] == 16
    assert metrics[("kuzk_proofjobs", (ns, ("phase", "Succeeded"), kind))] == 1
    for w in mine:
        assert metrics[("kuzk_gpu_workers", (("node", w["node"]), ("state", "gpu")))] == 0
        (busy,) = [v for (name, labels), v in metrics.items()
                   if name == "kuzk_gpu_busy_seconds_total"
                   and {k: dict(labels)[k] for k in ("node", "worker", "gpu_uuid", "UUID")} == {
                       "node": w["node"], "worker": w["worker_id"], "gpu_uuid": w["gpu_uuid"],
                       "UUID": w["gpu_uuid"]}]
        assert busy == pytest.approx(w["busy_seconds_total"], abs=0.01)
    histogram = metrics[("kuzk_partition_duration_seconds_count",
                         (("proof_kind", "snap-update"), ("stage", "gpu")))]
    assert histogram == 16


def test_a_failed_job_shows_its_failed_partitions_and_none_pending(
        cluster: Cluster, namespace: str, nodes, plan, operator, status_server) -> None:
    nodes(1, gpus=4)
    plan.set(**{"2": {"exit": 2, "message": "sector 5678 is not sealed"}, "*": {"hold": True}})
    operator()
    server: StatusServer = status_server()
    apply_job(cluster, namespace, proofjob("doomed", partitions=4, circuitLog2=10))
    job = wait_job(cluster, namespace, "doomed", "Failed", timeout=120)

    def shown() -> dict[str, Any] | None:
        pipelines = server.status(namespace=namespace)["pipelines"]
        p = pipelines[0] if pipelines else None
        return p if p and p["phase"] == "Failed" and p["resource_version"] == job[
            "metadata"]["resourceVersion"] else None

    p = wait_for(shown, 10, "/status showing the failed job")
    states = {q["index"]: q["state"] for q in p["partitions"]}
    assert states[2] == "failed"
    assert not {"pending", "scheduled"} & set(states.values()), states
    failed = {q["index"]: q for q in p["partitions"] if q["state"] == "failed"}
    assert failed[2]["reason"] == "InvalidInput"
    assert "not sealed" in failed[2]["message"]
    assert all(q["reason"] for q in failed.values())
    truth = {q["index"]: (q["state"], q.get("reason")) for q in job["status"]["partitions"]}
    assert {i: (q["state"], q["reason"]) for i, q in enumerate(p["partitions"])} == truth
    assert p["partitions_failed"] == len(failed)
