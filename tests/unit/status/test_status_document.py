"""kuzk.status.aggregate: the /status document from objects, history and a clock, by tables."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kuzk.status.aggregate import Filters, render
from kuzk.status.view import RESOURCES, StatusView
from tests.unit.status.builders import (
    T0,
    ledger_map,
    node,
    part,
    pod,
    proofjob,
    worker,
    workerstatus,
)
from tests.unit.status.conftest import Clock, Feed


def doc(view: StatusView, **filters: Any) -> dict[str, Any]:
    now = view.clock()
    document = render(view.snapshot(), now=now, sync=view.sync(now),
                      keep_finished=view.keep_finished, filters=Filters(**filters))
    return dict(json.loads(json.dumps(document)))


def test_document_has_the_designed_shape(feed: Feed, view: StatusView) -> None:
    feed(proofjobs=[proofjob("snap-update-5678", part(0, "done", synthMs=812, gpuMs=95,
                                                       node="gpu-1", worker="W0"),
                             part(1, "gpu", node="gpu-1", worker="W1"), count=2)],
         workerstatuses=[workerstatus("gpu-1", worker("W0", completed=1),
                                      worker("W1", "gpu", job="snap-update-5678",
                                             partition=1, stage="gpu"))],
         nodes=[node("gpu-1", 2)], pods=[], ledger=[])
    d = doc(view)
    assert set(d) >= {"uptime_secs", "view", "fleet", "pipelines", "gpu_workers", "counters"}
    assert d["view"] == {"synced": True, "age_secs": 0.0, "watch_restarts": 0}
    assert d["fleet"] == {"nodes": 1, "gpus": 2, "gpus_proving": 1, "gpus_waiting": 0,
                          "busy_fraction_10m": None}
    (p,) = d["pipelines"]
    assert p["job_id"] == "ns/snap-update-5678"
    assert (p["total_partitions"], p["partitions_done"], p["partitions_failed"]) == (2, 1, 0)
    assert p["partitions"][0] == {
        "index": 0, "state": "done", "attempt": 1, "node": "gpu-1", "worker": "W0",
        "synth_ms": 812, "gpu_ms": 95, "stage_secs": None, "reason": None, "message": None}
    w1 = d["gpu_workers"][1]
    assert (w1["worker_id"], w1["state"], w1["stage"], w1["current_job"],
            w1["current_partition"]) == ("W1", "gpu", "gpu", "ns/snap-update-5678", 1)
    assert w1["holder"]["job_id"] == "ns/snap-update-5678"
    assert [lane["stage"] for lane in w1["lanes"]] == ["gpu"]
    assert (w1["idle_reason"], d["gpu_workers"][0]["idle_reason"]) == (None, "no_work")
    assert d["counters"]["total_completed"] == 1
    assert d["counters"]["completed_by_kind"]["snap-update"] == 1


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ([("b", "ns", T0), ("a", "ns", T0 + 1)], ["ns/b", "ns/a"]),
        ([("b", "ns", T0), ("a", "ns", T0)], ["ns/a", "ns/b"]),
        ([("a", "zz", T0), ("z", "aa", T0)], ["aa/z", "zz/a"]),
    ],
    ids=["creation-time-first", "then-name", "then-namespace"],
)
def test_pipelines_are_ordered_by_creation_then_namespace_and_name(feed: Feed, view: StatusView,
                                                                   jobs, expected) -> None:
    feed(proofjobs=[proofjob(n, namespace=ns, created=t) for n, ns, t in jobs])
    assert [p["job_id"] for p in doc(view)["pipelines"]] == expected


def test_workers_are_ordered_by_node_then_worker_number(feed: Feed, view: StatusView) -> None:
    feed(workerstatuses=[workerstatus("gpu-10", worker("W0")),
                         workerstatus("gpu-2", worker("W10"), worker("W2"), worker("W1"))])
    rows = [(w["node"], w["worker_id"]) for w in doc(view)["gpu_workers"]]
    assert rows == [("gpu-2", "W1"), ("gpu-2", "W2"), ("gpu-2", "W10"), ("gpu-10", "W0")]


def test_long_job_ids_are_whole(feed: Feed, view: StatusView) -> None:
    name = "snap-update-" + "x" * 48
    feed(proofjobs=[proofjob(name)],
         workerstatuses=[workerstatus("gpu-1", worker("W0", "gpu", job=name, partition=3))])
    d = doc(view)
    assert d["pipelines"][0]["job_id"] == f"ns/{name}"
    assert d["gpu_workers"][0]["current_job"] == f"ns/{name}"


@pytest.mark.parametrize(
    ("states", "depth"),
    [
        ([], 0),
        (["pending", "pending", "scheduled"], 3),
        (["synthesizing", "synth_done", "gpu", "done", "failed"], 0),
        (["pending", "gpu", "scheduled", "done"], 2),
    ],
    ids=["empty", "all-waiting", "none-waiting", "mixed"],
)
def test_queue_depth_counts_partitions_waiting_for_a_gpu(feed: Feed, view: StatusView, states,
                                                         depth) -> None:
    feed(proofjobs=[proofjob("j", *(part(i, s) for i, s in enumerate(states)),
                             count=max(len(states), 1) if states else None)] if states else [])
    assert doc(view)["counters"]["queue_depth"] == depth


def test_unreported_partitions_show_pending(feed: Feed, view: StatusView) -> None:
    feed(proofjobs=[proofjob("fresh", phase=None, started=None, count=4)])
    (p,) = doc(view)["pipelines"]
    assert [q["state"] for q in p["partitions"]] == ["pending"] * 4
    assert (p["phase"], p["started_secs_ago"]) == ("Pending", None)
    assert doc(view)["counters"]["queue_depth"] == 4


@pytest.mark.parametrize(
    ("finished_ago", "shown"),
    [(None, True), (599, True), (601, False)],
    ids=["running", "finished-within-keep", "finished-before-keep"],
)
def test_finished_jobs_leave_pipelines_but_stay_in_counters(feed: Feed, view: StatusView,
                                                            clock: Clock, finished_ago,
                                                            shown) -> None:
    clock.now = T0 + 1000
    phase = "Running" if finished_ago is None else "Succeeded"
    finished = None if finished_ago is None else clock.now - finished_ago
    feed(proofjobs=[proofjob("j", part(0, "done"), count=1, phase=phase, finished=finished)])
    d = doc(view)
    assert bool(d["pipelines"]) is shown
    assert d["counters"]["total_completed"] == 1


def test_counters_never_go_down(feed: Feed, view: StatusView) -> None:
    job = proofjob("j", part(0, "done"), part(1, "failed", reason="InvalidInput"), count=2)
    feed(proofjobs=[job])
    feed(proofjobs=[job])  # seen again: not counted again
    assert doc(view)["counters"]["total_completed"] == 1
    view.event("proofjobs", "DELETED", job)
    c = doc(view)["counters"]
    assert (c["total_completed"], c["total_failed"]) == (1, 1)
    assert c["failed_by_kind"]["snap-update"] == 1


@pytest.mark.parametrize(
    ("partition", "pods", "reason", "message"),
    [
        (part(0, "failed", reason="InvalidInput", message="bad sector"), [], "InvalidInput",
         "bad sector"),
        (part(0, "pending"), [pod("j", 0, unschedulable="0/2 nodes are available")],
         "Unschedulable", "0/2 nodes are available"),
        (part(0, "pending", 2, reason="Failed", message="exit 1"), [], "Failed", "exit 1"),
        (part(0, "done", reason="Failed", message="exit 1"), [], None, None),
    ],
    ids=["failed", "unschedulable", "retried", "done-has-no-reason"],
)
def test_partitions_say_why(feed: Feed, view: StatusView, partition, pods, reason,
                            message) -> None:
    feed(proofjobs=[proofjob("j", partition, count=1)], pods=pods)
    p = doc(view)["pipelines"][0]["partitions"][0]
    assert (p["reason"], p["message"]) == (reason, message)


def test_a_gpu_with_lanes_and_no_holder_is_waiting_and_names_no_job(feed: Feed,
                                                                     view: StatusView) -> None:
    waiting = worker("W0", "waiting", job="j", partition=3, stage="synth_done")
    feed(workerstatuses=[workerstatus("gpu-1", waiting)])
    w = doc(view)["gpu_workers"][0]
    assert (w["state"], w["current_job"], w["current_partition"], w["stage"]) == (
        "waiting", None, None, None)
    assert (w["holder"], w["idle_reason"], w["busy_secs"]) == (None, "cpu", None)
    assert [(lane["job_id"], lane["partition"], lane["stage"]) for lane in w["lanes"]] == [
        ("ns/j", 3, "synth_done")]


@pytest.mark.parametrize(
    ("holding", "started_ago", "expected"),
    [
        ([(0, 300)], 600, 0.5),
        ([(0, 600)], 600, 1.0),
        ([], 600, 0.0),
        ([(0, 30)], 60, 0.5),
        ([(0, 100), (200, 250)], 300, 0.5),
    ],
    ids=["half", "all", "idle", "young-server", "two-spells"],
)
def test_busy_fraction_is_the_gpu_phase_share_of_the_last_ten_minutes(
        view: StatusView, clock: Clock, holding, started_ago, expected) -> None:
    start = T0
    view.history.started = start
    view.listed("workerstatuses", [workerstatus("gpu-1", worker("W0"), worker("W1"))])
    for begin, end in holding:
        clock.now = start + begin
        view.listed("workerstatuses", [workerstatus(
            "gpu-1", worker("W0", "gpu", job="j", partition=0), worker("W1"))])
        clock.now = start + end
        view.listed("workerstatuses", [workerstatus("gpu-1", worker("W0"), worker("W1"))])
    clock.now = start + started_ago
    d = doc(view)
    assert d["gpu_workers"][0]["busy_fraction_10m"] == expected
    assert d["gpu_workers"][1]["busy_fraction_10m"] == 0.0
    assert d["fleet"]["busy_fraction_10m"] == expected / 2
    strip = d["gpu_workers"][0]["busy_strip_10m"]
    assert len(strip) == 20
    assert strip[-1] is not None


def test_stale_writes_sum_the_worker_statuses_and_the_ledger(feed: Feed,
                                                             view: StatusView) -> None:
    a, b = workerstatus("a", stale=2), workerstatus("b", stale=3)
    feed(workerstatuses=[a, b], ledger=[])
    assert doc(view)["counters"]["stale_writes_rejected"] == 5
    # b's node is gone; the operator folded what it counted into the ledger
    feed(workerstatuses=[workerstatus("a", stale=4)], ledger=[ledger_map(b)])
    assert doc(view)["counters"]["stale_writes_rejected"] == 7
    # a recreated: the old one folded, the new one counts from zero
    old_a = workerstatus("a", stale=4)
    feed(workerstatuses=[workerstatus("a", stale=1, uid="uid-a-2")],
         ledger=[ledger_map(b, old_a)])
    assert doc(view)["counters"]["stale_writes_rejected"] == 8


def test_filters_choose_pipelines_and_counters(feed: Feed, view: StatusView) -> None:
    feed(proofjobs=[proofjob("a", part(0, "done"), count=1, namespace="one"),
                    proofjob("b", part(0, "pending"), count=1, namespace="two",
                             kind="porep-c2")])
    assert [p["job_id"] for p in doc(view, namespace="one")["pipelines"]] == ["one/a"]
    two = doc(view, kind="porep-c2")
    assert [p["job_id"] for p in two["pipelines"]] == ["two/b"]
    assert (two["counters"]["total_completed"], two["counters"]["queue_depth"]) == (0, 1)
    assert doc(view, namespace="one", kind="porep-c2")["pipelines"] == []


def test_stage_seconds_count_from_when_the_state_was_seen(feed: Feed, view: StatusView,
                                                          clock: Clock) -> None:
    feed(proofjobs=[proofjob("j", part(0, "synthesizing"), count=1)],
         workerstatuses=[workerstatus("n", worker("W0", "waiting", job="j", partition=0,
                                                  stage="synthesizing"))])
    clock.now = T0 + 5
    feed(proofjobs=[proofjob("j", part(0, "gpu"), count=1)],
         workerstatuses=[workerstatus("n", worker("W0", "gpu", job="j", partition=0,
                                                  stage="gpu", since=T0 + 5))])
    clock.now = T0 + 8
    d = doc(view)
    assert d["pipelines"][0]["partitions"][0]["stage_secs"] == 3.0
    assert d["gpu_workers"][0]["stage_secs"] == 3.0
    assert d["gpu_workers"][0]["busy_secs"] == 3.0


def test_a_partitions_stage_seconds_go_on_while_others_of_its_job_move(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    feed(proofjobs=[proofjob("j", part(0, "synthesizing"), part(1, "synthesizing"),
                             part(2, "synthesizing"), count=3)])
    clock.now = T0 + 5
    view.event("proofjobs", "MODIFIED", proofjob(
        "j", part(0, "synthesizing"), part(1, "synth_done"), part(2, "synthesizing", attempt=2),
        count=3))
    clock.now = T0 + 8
    assert [p["stage_secs"] for p in doc(view)["pipelines"][0]["partitions"]] == [8.0, 3.0, 3.0]


def test_the_view_is_not_synced_until_every_resource_is_listed(view: StatusView,
                                                               clock: Clock) -> None:
    view.listed("proofjobs", [])
    clock.now = T0 + 3
    d = doc(view)
    assert d["view"]["synced"] is False
    assert d["view"]["age_secs"] == 3.0


def test_a_lost_watch_ages_the_view_and_counts_a_restart(feed: Feed, view: StatusView,
                                                         clock: Clock) -> None:
    feed(proofjobs=[], workerstatuses=[], pods=[], nodes=[], ledger=[])
    view.lost("pods")
    clock.now = T0 + 4
    d = doc(view)
    assert d["view"] == {"synced": False, "age_secs": 4.0, "watch_restarts": 1}
    view.connected("pods")
    assert doc(view)["view"] == {"synced": True, "age_secs": 0.0, "watch_restarts": 1}


def _reason(view: StatusView, clock: Clock, now: float) -> str | None:
    clock.now = now
    return str(doc(view)["gpu_workers"][0]["idle_reason"])


def test_the_idle_reason_follows_the_jobs_and_the_lanes(view: StatusView,
                                                        clock: Clock) -> None:
    """no_work, then scheduling (a partition pending), cpu (a lane synthesizing), busy (it
    holds the GPU phase), cpu (it commits), not_live (the operator marks it: its pod is not
    live), no_work."""
    empty = workerstatus("gpu-1", worker("W0"))
    view.listed("nodes", [node("gpu-1", 1)])
    view.listed("pods", [])
    view.listed("proofjobs", [])
    view.listed("workerstatuses", [empty])
    assert _reason(view, clock, T0 + 5) == "no_work"
    clock.now = T0 + 10
    view.listed("proofjobs", [proofjob("j", part(0, "pending"), count=1)])
    assert _reason(view, clock, T0 + 11) == "scheduling"
    clock.now = T0 + 12
    view.listed("workerstatuses", [workerstatus("gpu-1", worker(
        "W0", "waiting", job="j", partition=0, since=T0 + 12))])
    view.listed("proofjobs", [proofjob("j", part(0, "synthesizing"), count=1)])
    assert _reason(view, clock, T0 + 13) == "cpu"
    clock.now = T0 + 15
    view.listed("workerstatuses", [workerstatus("gpu-1", worker(
        "W0", "gpu", job="j", partition=0, since=T0 + 15))])
    assert _reason(view, clock, T0 + 16) == "None"
    clock.now = T0 + 19
    view.listed("workerstatuses", [workerstatus("gpu-1", worker(
        "W0", "waiting", job="j", partition=0, stage="committing", since=T0 + 19))])
    assert _reason(view, clock, T0 + 20) == "cpu"
    # No write for a minute says nothing: still cpu. The operator's mark says not live.
    assert _reason(view, clock, T0 + 70) == "cpu"
    view.listed("workerstatuses", [workerstatus("gpu-1", worker(
        "W0", "waiting", job="j", partition=0, stage="committing", since=T0 + 19,
        not_live=T0 + 65))])
    assert _reason(view, clock, T0 + 75) == "not_live"
    clock.now = T0 + 80
    view.listed("proofjobs", [proofjob("j", part(0, "done"), count=1, phase="Succeeded")])
    view.listed("workerstatuses", [empty])
    assert _reason(view, clock, T0 + 100) == "no_work"
    w = doc(view)["gpu_workers"][0]
    assert set(w["idle_strip_10m"]) <= {None, "no_work", "scheduling", "cpu", "not_live"}


def test_a_pod_scheduled_to_a_node_makes_only_that_node_scheduling(view: StatusView,
                                                                   clock: Clock) -> None:
    view.listed("nodes", [node("a", 1), node("b", 1)])
    view.listed("pods", [])
    view.listed("workerstatuses", [workerstatus("a", worker("W0")),
                                   workerstatus("b", worker("W0"))])
    view.listed("proofjobs", [proofjob("j", part(0, "scheduled", node="a"), count=1)])
    reasons = {w["node"]: w["idle_reason"] for w in doc(view)["gpu_workers"]}
    assert reasons == {"a": "scheduling", "b": "no_work"}


@pytest.mark.parametrize(
    ("labels", "allocatable", "workers", "gpus"),
    [
        ({"nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "3"}, 6, 0, 2),
        ({"nvidia.com/gpu.replicas": "3"}, 6, 0, 2),
        ({}, 4, 0, 4),
        ({"nvidia.com/gpu.replicas": "3"}, 6, 1, 1),
    ],
    ids=["count-label", "replicas", "plain", "workers-before-allocatable"],
)
def test_fleet_counts_physical_gpus_not_replicas(feed: Feed, view: StatusView, labels,
                                                 allocatable, workers, gpus) -> None:
    feed(nodes=[node("gpu-1", allocatable, labels)],
         workerstatuses=[workerstatus("gpu-1", *[worker(f"W{i}") for i in range(workers)])])
    assert doc(view)["fleet"]["gpus"] == gpus


def _totals(view: StatusView) -> tuple[int, int, int]:
    c = doc(view)["counters"]
    return c["total_completed"], c["total_failed"], c["stale_writes_rejected"]


def test_deleted_objects_stay_counted_through_the_ledger(feed: Feed, view: StatusView,
                                                        clock: Clock) -> None:
    """What a deleted ProofJob or WorkerStatus counted stays counted: the operator folds it
    into the ledger. Until the ledger's change arrives the counters hold what they showed, a
    job the ledger folded while it still exists counts once, and a restarted server (a new
    view) shows the same figures from its first lists."""
    j = proofjob("j", part(0, "done", synthMs=700, gpuMs=90),
                 part(1, "failed", reason="InvalidInput"), part(2, "done"), count=3)
    a = workerstatus("a", stale=4)
    feed(proofjobs=[j], workerstatuses=[a], ledger=[])
    assert _totals(view) == (2, 1, 4)
    view.event("proofjobs", "DELETED", j)  # seen before the ledger's fold
    assert _totals(view) == (2, 1, 4)
    view.event("ledger", "MODIFIED", ledger_map(j))
    assert _totals(view) == (2, 1, 4)
    k = proofjob("k", part(0, "done"), count=1)
    view.event("proofjobs", "ADDED", k)  # counted at once, not hidden under what was shown
    assert _totals(view) == (3, 1, 4)
    ttl = proofjob("t", part(0, "done"), count=1)  # folded before the operator deletes it
    view.event("proofjobs", "ADDED", ttl)
    view.event("ledger", "MODIFIED", ledger_map(j, ttl))
    assert _totals(view) == (4, 1, 4)

    restarted = StatusView(keep_finished=600, clock=clock)
    for resource in RESOURCES:
        restarted.add_watch(resource, resource)
    for resource, items in (("proofjobs", [k, ttl]), ("workerstatuses", [a]),
                            ("pods", []), ("nodes", []), ("ledger", [ledger_map(j, ttl)])):
        restarted.listed(resource, items)
    assert _totals(restarted) == (4, 1, 4)
    assert restarted.counts().durations == view.counts().durations
