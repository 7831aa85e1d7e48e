"""A GPU's state, holder and lanes in /status, and its time: busy only while a lane holds the
GPU phase, idle by reason otherwise, busy plus idle equal to the wall time (a settable clock,
so every sum is exact). Statuses come from the one model (``contract.workerstatus``) and from the
write protocol's own decisions (``kuzk.contract.workerstatus.decisions.decide_*``)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kuzk.contract.workerstatus import Gpu, decisions
from kuzk.status import metrics
from kuzk.status.aggregate import Filters, render
from kuzk.status.view import RESOURCES, StatusView
from tests.unit.status.builders import T0, at, lane, node, part, proofjob, worker, written
from tests.unit.status.builders import workerstatus as ws_object
from tests.unit.status.conftest import Clock, Feed

REASONS = ("no_lane", "cpu", "not_live")


def doc(view: StatusView) -> dict[str, Any]:
    now = view.clock()
    document = render(view.snapshot(), now=now, sync=view.sync(now),
                      keep_finished=view.keep_finished, filters=Filters())
    return dict(json.loads(json.dumps(document)))


def gpu(view: StatusView, index: int = 0) -> dict[str, Any]:
    return dict(doc(view)["gpu_workers"][index])


def times(row: dict[str, Any]) -> dict[str, float]:
    return {"busy": row["busy_seconds_total"], **row["idle_seconds_total"]}


def listed(view: StatusView, **lists: list[dict[str, Any]]) -> None:
    for resource in RESOURCES:
        view.listed(resource, lists.get(resource, []))


# --- state, holder, lanes ------------------------------------------------------------------
def test_a_gpu_without_lanes_is_idle(feed: Feed, view: StatusView) -> None:
    feed(workerstatuses=[ws_object("gpu-1", worker("W0", completed=3))])
    w = gpu(view)
    assert (w["state"], w["holder"], w["lanes"], w["idle_reason"]) == ("idle", None, [],
                                                                        "no_work")
    assert (w["busy_secs"], w["stage"], w["current_job"]) == (None, None, None)
    assert w["completed"] == 3


@pytest.mark.parametrize("stage", ["starting", "synthesizing", "synth_done", "committing"])
def test_lanes_without_a_holder_are_waiting_on_the_cpu(feed: Feed, view: StatusView,
                                                       clock: Clock, stage: str) -> None:
    ready = T0 + 2 if stage == "synth_done" else None
    feed(workerstatuses=[ws_object("gpu-1", worker("W0", lanes=(
        lane("j", 4, stage=stage, since=T0, ready=ready),)))])
    clock.now = T0 + 5
    w = gpu(view)
    assert (w["state"], w["holder"], w["idle_reason"], w["busy_secs"]) == (
        "waiting", None, "cpu", None)
    (row,) = w["lanes"]
    assert row == {"pod": "j-p4-a1", "job_id": "ns/j", "proof_kind": "snap-update",
                   "partition": 4, "attempt": 1, "stage": stage, "stage_secs": 5.0,
                   "not_live_secs": None,
                   "ready_secs": 3.0 if stage == "synth_done" else None,
                   "host_memory_bytes": None, "device_memory_bytes": None}
    assert "heartbeat_age_secs" not in w


def test_a_gpu_whose_lane_holds_the_gpu_phase_shows_the_holder_and_every_lane(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    others = (lane("j", 3, stage="synthesizing", since=T0 + 1),
              lane("k", 0, stage="synth_done", since=T0 + 2, ready=T0 + 3, kind="porep-c2",
                   namespace="other"))
    feed(workerstatuses=[ws_object("gpu-1", worker("W0", "gpu", job="j", partition=9,
                                                   attempt=2, since=T0, lanes=others))])
    clock.now = T0 + 5.5
    w = gpu(view)
    assert w["state"] == "gpu"
    assert w["holder"] == {"pod": "j-p9-a2", "job_id": "ns/j", "proof_kind": "snap-update",
                           "partition": 9, "attempt": 2, "since_secs": 5.5}
    assert [(r["job_id"], r["partition"], r["stage"], r["ready_secs"]) for r in w["lanes"]] == [
        ("ns/j", 9, "gpu", None), ("ns/j", 3, "synthesizing", None),
        ("other/k", 0, "synth_done", 2.5)]
    # The one-pod-per-GPU fields are the holder's.
    assert (w["current_job"], w["current_proof_kind"], w["current_partition"], w["attempt"],
            w["stage"], w["busy_secs"], w["stage_secs"]) == (
        "ns/j", "snap-update", 9, 2, "gpu", 5.5, 5.5)
    assert w["idle_reason"] is None


# --- busy and idle time ----------------------------------------------------------------------
def assignment(job: str, partition: int) -> decisions.Assignment:
    return decisions.Assignment("ns", job, f"uid-{job}", "snap-update", partition, 1,
                              f"{job}-p{partition}-a1", f"pod-{job}-{partition}")


def test_busy_counts_only_the_gpu_phase_of_what_the_protocol_writes(view: StatusView,
                                                                     clock: Clock) -> None:
    """Two lanes on one GPU through the write protocol's decisions: start-up, synthesis,
    waiting for the GPU and the commitment are idle (cpu); only the GPU phase is busy."""
    listed(view)
    device = Gpu("GPU-0", "NVIDIA H100")
    a, b = assignment("j", 0), assignment("j", 1)
    status: dict[str, Any] = {}
    seen: dict[float, dict[str, Any]] = {}

    def write(t: float, decide: Callable[..., decisions.WriteDecision[Any]], *args: Any) -> None:
        nonlocal status
        decision = decide(status, *args, at(T0 + t))
        assert decision.status is not None and decision.stale is None
        status = decision.status
        clock.now = T0 + t
        view.event("workerstatuses", "MODIFIED", written("gpu-1", status))
        seen[t] = gpu(view)

    write(0, decisions.decide_join, device, a)
    write(1, decisions.decide_join, device, b)
    write(2, decisions.decide_stage, a, "synthesizing")
    write(4, decisions.decide_stage, a, "synth_done")
    write(5, decisions.decide_acquire, a)
    write(6, decisions.decide_stage, b, "synthesizing")
    write(7, decisions.decide_stage, b, "synth_done")
    write(8, decisions.decide_acquire, b)
    write(9, decisions.decide_release_gpu, a)
    write(10, decisions.decide_acquire, b)
    write(11, decisions.decide_leave, a, "succeeded")
    write(14, decisions.decide_release_gpu, b)
    write(15, decisions.decide_leave, b, "succeeded")

    assert [seen[t]["state"] for t in sorted(seen)] == [
        "waiting", "waiting", "waiting", "waiting", "gpu", "gpu", "gpu", "gpu", "waiting",
        "gpu", "gpu", "waiting", "idle"]
    assert seen[8]["holder"]["partition"] == 0
    assert [(r["partition"], r["stage"], r["ready_secs"]) for r in seen[8]["lanes"]] == [
        (0, "gpu", None), (1, "synth_done", 0.0)]
    assert seen[10]["holder"]["partition"] == 1
    assert (seen[15]["completed"], seen[15]["idle_reason"]) == (2, "no_work")
    clock.now = T0 + 20
    w = gpu(view)
    # GPU phase: 5-9 (partition 0) and 10-14 (partition 1).
    assert times(w) == {"busy": 8.0, "no_lane": 5.0, "cpu": 7.0, "not_live": 0.0}
    assert w["busy_fraction_10m"] == 0.4


def test_lanes_marked_not_live_are_not_live_from_when_their_pods_stopped_being_live(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    """Not live only once every lane is: one live lane keeps the GPU's time cpu. The GPU is
    not live from the operator's write that marks its last live lane (the moment the object
    says so); each lane shows how long its pod has not been live."""
    one = worker("W0", lanes=(lane("j", 0, not_live=T0 + 20), lane("j", 1)))
    feed(workerstatuses=[ws_object("gpu-1", one)])
    clock.now = T0 + 40
    assert gpu(view)["idle_reason"] == "cpu"
    both = ws_object("gpu-1", one)
    sweep = decisions.decide_sweep(both["status"], {"pod-j-0-1": None, "pod-j-1-1": None},
                                 at(T0 + 40), {"pod-j-0-1": at(T0 + 20), "pod-j-1-1": at(T0 + 30)})
    view.event("workerstatuses", "MODIFIED", written("gpu-1", sweep.status))
    clock.now = T0 + 50
    w = gpu(view)
    assert (w["state"], w["idle_reason"]) == ("waiting", "not_live")
    assert [row["not_live_secs"] for row in w["lanes"]] == [30.0, 20.0]
    assert times(w) == {"busy": 0.0, "no_lane": 0.0, "cpu": 40.0, "not_live": 10.0}


def test_a_holder_is_busy_without_writes_and_idle_not_live_once_marked(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    feed(workerstatuses=[ws_object("gpu-1", worker("W0", "gpu", job="j", partition=0))])
    clock.now = T0 + 100
    w = gpu(view)
    assert (w["state"], w["idle_reason"], w["busy_seconds_total"]) == ("gpu", None, 100.0)
    assert doc(view)["fleet"]["gpus_proving"] == 1
    held = ws_object("gpu-1", worker("W0", "gpu", job="j", partition=0))
    mark = decisions.decide_sweep(held["status"], {"pod-j-0-1": None}, at(T0 + 100),
                                {"pod-j-0-1": at(T0 + 90)})
    view.event("workerstatuses", "MODIFIED", written("gpu-1", mark.status))
    clock.now = T0 + 110
    w = gpu(view)
    assert (w["state"], w["idle_reason"], w["holder"]["partition"]) == ("gpu", "not_live", 0)
    assert doc(view)["fleet"]["gpus_proving"] == 0, "a hung holder proves nothing"
    assert times(w) == {"busy": 100.0, "no_lane": 0.0, "cpu": 0.0, "not_live": 10.0}


def test_gpus_without_lanes_are_scheduling_while_partitions_could_run_on_them(
        view: StatusView, clock: Clock) -> None:
    """Pending partitions make every GPU without lanes ``scheduling``; a partition bound to a
    node only that node's, until its pod joins a lane there; a GPU with lanes stays ``cpu``;
    a suspended job's pending partitions are no work."""
    listed(view, nodes=[node("a", 2), node("b", 1)],
           workerstatuses=[ws_object("a", worker("W0"), worker("W1")),
                           ws_object("b", worker("W0", lanes=(lane("x", 0),)))])

    def reasons() -> dict[str, str | None]:
        return {f"{w['node']}/{w['worker_id']}": w["idle_reason"]
                for w in doc(view)["gpu_workers"]}

    assert reasons() == {"a/W0": "no_work", "a/W1": "no_work", "b/W0": "cpu"}
    clock.now = T0 + 10
    view.event("proofjobs", "ADDED", proofjob("j", part(0, "pending"), count=1))
    assert reasons() == {"a/W0": "scheduling", "a/W1": "scheduling", "b/W0": "cpu"}
    clock.now = T0 + 12
    view.event("proofjobs", "MODIFIED", proofjob("j", part(0, "scheduled", node="a"), count=1))
    assert reasons() == {"a/W0": "scheduling", "a/W1": "scheduling", "b/W0": "cpu"}
    clock.now = T0 + 13
    view.event("workerstatuses", "MODIFIED", ws_object(
        "a", worker("W0", lanes=(lane("j", 0, stage="starting", since=T0 + 13),)), worker("W1")))
    assert reasons() == {"a/W0": "cpu", "a/W1": "no_work", "b/W0": "cpu"}
    clock.now = T0 + 15
    view.event("proofjobs", "MODIFIED", proofjob("s", part(0, "pending"), count=1,
                                                 phase="Suspended"))
    assert reasons()["a/W1"] == "no_work"
    w1 = doc(view)["gpu_workers"][1]
    # The counters' reason is what the WorkerStatus tells: no lane, whatever the jobs said.
    assert times(w1) == {"busy": 0.0, "no_lane": 15.0, "cpu": 0.0, "not_live": 0.0}


@pytest.mark.parametrize("seed", range(8))
def test_busy_and_idle_by_reason_always_add_up_to_the_wall_time(view: StatusView,
                                                                clock: Clock,
                                                                seed: int) -> None:
    """Random writes of the protocol on two nodes of two GPUs, each seen by the view at once
    or a step later: at every step and for every GPU, busy plus idle by reason is the time
    since the GPU was added, but for what the view has not seen yet or counted past, and no
    figure goes down."""
    rng = random.Random(seed)
    listed(view)
    statuses: dict[str, dict[str, Any]] = {"a": {}, "b": {}}
    added: dict[tuple[str, str], float] = {}
    shown: dict[tuple[str, str], dict[str, float]] = {}
    unseen: dict[str, float] = {}
    t = 0.0
    for _ in range(150):
        t += rng.choice((0.5, 1.0, 7.0, 31.0))
        clock.now = T0 + t
        name, k = rng.choice(("a", "b")), rng.randrange(4)
        who = assignment("j", k + (10 if name == "b" else 0))
        device = Gpu(f"GPU-{name}{k % 2}")
        status, now = statuses[name], at(T0 + t)
        decision = rng.choice([  # pure decisions: deciding all five costs nothing
            decisions.decide_join(status, device, who, now),
            decisions.decide_stage(status, who, "synth_done", now),
            decisions.decide_acquire(status, who, now),
            decisions.decide_release_gpu(status, who, now),
            decisions.decide_leave(status, who, "succeeded", now),
        ])
        if decision.status is None:
            continue
        statuses[name] = decision.status
        for w in decision.status.get("workers") or []:
            added.setdefault((name, w["id"]), t)
        if rng.random() < 0.2:
            unseen[name] = t  # the watch brings this write later
            continue
        unseen.pop(name, None)
        view.event("workerstatuses", "MODIFIED", written(name, decision.status))
        for row in doc(view)["gpu_workers"]:
            gpu_id = (row["node"], row["worker_id"])
            wall = t - added[gpu_id]
            late = t - unseen.get(row["node"], t)
            # A mode the view counted on past a write it had not seen stays where it was
            # shown until the GPU has spent that long in it again: at most one step per mode.
            excess = 31.0 * len(times(row))
            assert wall - late - 1e-6 <= sum(times(row).values()) <= wall + excess, (row, t)
            before = shown.get(gpu_id, {})
            assert all(times(row)[m] >= before.get(m, 0.0) for m in times(row)), (row, t)
            shown[gpu_id] = times(row)


# --- the ten-minute strips -------------------------------------------------------------------
def test_the_strips_show_the_busy_share_and_the_longest_idle_reason_of_each_slice(
        view: StatusView, clock: Clock) -> None:
    listed(view, workerstatuses=[ws_object("gpu-1", worker("W0"))])
    steps = [
        (30, worker("W0", lanes=(lane("j", 0, since=T0 + 30),))),
        (45, worker("W0", "gpu", job="j", partition=0, since=T0 + 45)),
        (60, worker("W0")),
        (90, worker("W0", "gpu", job="j", partition=1, since=T0 + 90)),
        (120, worker("W0")),
    ]
    for t, w in steps:
        clock.now = T0 + t
        view.event("workerstatuses", "MODIFIED", ws_object("gpu-1", w))
    clock.now = T0 + 600
    w = gpu(view)
    assert len(w["busy_strip_10m"]) == len(w["idle_strip_10m"]) == 20
    assert w["busy_strip_10m"][:5] == [0.0, 0.5, 0.0, 1.0, 0.0]
    assert w["idle_strip_10m"][:5] == ["no_work", "cpu", "no_work", None, "no_work"]
    assert w["busy_fraction_10m"] == 0.075


def test_the_strip_is_empty_before_the_server_started(feed: Feed, view: StatusView,
                                                      clock: Clock) -> None:
    feed(workerstatuses=[ws_object("gpu-1", worker("W0"))])
    clock.now = T0 + 60
    w = gpu(view)
    assert w["busy_strip_10m"][:18] == [None] * 18
    assert w["idle_strip_10m"] == [None] * 18 + ["no_work", "no_work"]


# --- the fleet -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodes", "statuses", "gpus"),
    [
        ([node("a", 6, {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "3"})], [], 2),
        ([node("a", 6, {"nvidia.com/gpu.replicas": "3"})], [], 2),
        ([], [ws_object("a", worker("W0"), worker("W1"), worker("W2"))], 3),
        ([node("a", 6, {"nvidia.com/gpu.replicas": "3"}), node("cpu-only", 0)],
         [ws_object("b", worker("W0"))], 3),
    ],
    ids=["count-label", "allocatable-over-replicas", "only-workers", "nodes-and-workers"],
)
def test_fleet_gpus_are_physical(feed: Feed, view: StatusView, nodes, statuses,
                                 gpus: int) -> None:
    feed(nodes=nodes, workerstatuses=statuses)
    f = doc(view)["fleet"]
    assert f["gpus"] == gpus
    assert f["nodes"] == len({n["metadata"]["name"] for n in nodes if n["metadata"]["name"]
                              != "cpu-only"} | {s["spec"]["nodeName"] for s in statuses})


def test_fleet_gpus_use_the_configured_gpu_resource(clock: Clock) -> None:
    view = StatusView(keep_finished=600, clock=clock, gpu_resource="example.com/gpu")
    for resource in RESOURCES:
        view.add_watch(resource, resource)
    view.listed("nodes", [node("a", 4, {"nvidia.com/gpu.replicas": "2"},
                               resource="example.com/gpu"), node("b", 8)])
    clock.now = T0 + 10
    assert doc(view)["fleet"] == {"nodes": 1, "gpus": 2, "gpus_proving": 0, "gpus_waiting": 0,
                                  "busy_fraction_10m": 0.0}


def test_fleet_counts_gpus_in_the_gpu_phase_and_waiting(feed: Feed, view: StatusView,
                                                       clock: Clock) -> None:
    feed(nodes=[node("a", 4)], workerstatuses=[ws_object(
        "a", worker("W0", "gpu", job="j", partition=0), worker("W1", lanes=(lane("j", 1),)),
        worker("W2", "waiting", job="j", partition=2), worker("W3"))])
    clock.now = T0 + 60
    f = doc(view)["fleet"]
    assert (f["gpus"], f["gpus_proving"], f["gpus_waiting"]) == (4, 1, 2)
    assert f["busy_fraction_10m"] == 0.25


# --- /metrics --------------------------------------------------------------------------------
def scrape(view: StatusView) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(metrics.registry(view)).decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_gpu_metrics_have_their_names_and_labels(feed: Feed, view: StatusView,
                                                 clock: Clock) -> None:
    feed(nodes=[node("a", 2)], workerstatuses=[ws_object(
        "a", worker("W0", "gpu", job="j", partition=0, uuid="GPU-1111",
                    lanes=(lane("j", 1, stage="synth_done", ready=T0),)),
        worker("W1", uuid="GPU-2222"))])
    clock.now = T0 + 20
    samples = scrape(view)
    GPU = ("Hostname", "UUID", "gpu_uuid", "modelName", "node", "worker")
    assert {tuple(sorted(labels)) for name in ("kuzk_gpu_workers", "kuzk_gpu_lanes",
                                               "kuzk_gpu_busy_seconds_total",
                                               "kuzk_gpu_idle_seconds_total")
            for labels, _ in samples[name]} == {
        ("node", "state"), ("node", "stage"), GPU, tuple(sorted((*GPU, "reason")))}
    # dcgm-exporter's names for the same values, for joins on UUID
    for labels, _ in samples["kuzk_gpu_busy_seconds_total"]:
        assert (labels["Hostname"], labels["UUID"]) == (labels["node"], labels["gpu_uuid"])
    assert {labels["state"]: v for labels, v in samples["kuzk_gpu_workers"]} == {
        "idle": 1, "waiting": 0, "gpu": 1}
    assert {labels["stage"]: v for labels, v in samples["kuzk_gpu_lanes"]} == {
        "starting": 0, "synthesizing": 0, "synth_done": 1, "gpu": 1, "committing": 0}
    assert {(labels["worker"], labels["gpu_uuid"]): v
            for labels, v in samples["kuzk_gpu_busy_seconds_total"]} == {
        ("W0", "GPU-1111"): 20.0, ("W1", "GPU-2222"): 0.0}
    idle = {(labels["worker"], labels["reason"]): v
            for labels, v in samples["kuzk_gpu_idle_seconds_total"]}
    assert idle == {**{("W0", r): 0.0 for r in REASONS}, **{("W1", r): 0.0 for r in REASONS},
                    ("W1", "no_lane"): 20.0}
