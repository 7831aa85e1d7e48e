"""What /status and /metrics show of the lanes: a partition is ``gpu`` only while its lane holds
its GPU's phase (``committing`` after it, whatever the job's status still says); what lanes
synthesize, wait for and hold in memory, per GPU and per node beside the node's allocatable
memory; GPU time from the WorkerStatuses and the ledger, the same for a restarted server."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kuzk.contract.gputime import GpuTime
from kuzk.contract.workerstatus.lane_model import Memory
from kuzk.status import metrics
from kuzk.status.aggregate import Filters, render
from kuzk.status.view import OPEN_MODE_LAG_S, RESOURCES, StatusView
from tests.unit.status.builders import (
    T0,
    at,
    gpu_workerstatus,
    lane,
    ledger_map,
    node,
    part,
    proofjob,
    worker,
    workerstatus,
)
from tests.unit.status.conftest import Clock, Feed


def doc(view: StatusView) -> dict[str, Any]:
    now = view.clock()
    document = render(view.snapshot(), now=now, sync=view.sync(now),
                      keep_finished=view.keep_finished, filters=Filters())
    return dict(json.loads(json.dumps(document)))


def states(view: StatusView) -> list[str]:
    return [p["state"] for p in doc(view)["pipelines"][0]["partitions"]]


def test_only_the_holder_is_shown_in_gpu(feed: Feed, view: StatusView) -> None:
    """The job's status lags its lanes: it still says P0 is in gpu after P0 gave the GPU up
    to P1, and P2 in gpu after its lane left. The screen follows the lanes."""
    feed(proofjobs=[proofjob("j", part(0, "gpu"), part(1, "synth_done"), part(2, "gpu"),
                             part(3, "done"), count=4)],
         workerstatuses=[workerstatus("n", worker("W0", "gpu", job="j", partition=1, lanes=(
             lane("j", 0, stage="committing"),)))])
    assert states(view) == ["committing", "gpu", "committing", "done"]
    gpu_rows = [w for w in doc(view)["gpu_workers"] if w["holder"]]
    assert [w["holder"]["partition"] for w in gpu_rows] == [1]


def test_the_partition_metric_counts_what_the_screen_shows(feed: Feed, view: StatusView) -> None:
    feed(proofjobs=[proofjob("j", part(0, "gpu"), part(1, "gpu"), count=2)],
         workerstatuses=[workerstatus("n", worker("W0", "gpu", job="j", partition=1, lanes=(
             lane("j", 0, stage="committing"),)))])
    text = generate_latest(metrics.registry(view)).decode()
    shown = {s.labels["state"]: s.value for f in text_string_to_metric_families(text)
             for s in f.samples if s.name == "kuzk_partitions"}
    assert (shown["gpu"], shown["committing"]) == (1, 1)


def measured(job: str, partition: int, stage: str, host: int, device: int = 0,
             ready: float | None = None) -> Any:
    return replace(lane(job, partition, stage=stage, ready=ready), memory=Memory(host, device))


def test_memory_and_synthesis_per_gpu_and_per_node(feed: Feed, view: StatusView) -> None:
    allocatable = node("n", 2)
    allocatable["status"]["allocatable"]["memory"] = "64Gi"
    feed(nodes=[allocatable], workerstatuses=[workerstatus(
        "n",
        worker("W0", "gpu", job="j", partition=0, lanes=(
            measured("j", 1, "synthesizing", 300), measured("j", 2, "synth_done", 500,
                                                            ready=T0))),
        worker("W1", lanes=(measured("j", 3, "synthesizing", 200),
                            lane("j", 4, stage="starting"))))])
    d = doc(view)
    w0, w1 = d["gpu_workers"]
    assert (w0["lanes_synthesizing"], w0["lanes_waiting"], w0["host_memory_bytes"],
            w0["device_memory_bytes"]) == (1, 1, 800, 0)
    assert [r["host_memory_bytes"] for r in w0["lanes"]] == [None, 300, 500]
    assert (w1["lanes_synthesizing"], w1["lanes_waiting"], w1["host_memory_bytes"]) == (
        1, 0, 200)
    assert d["nodes"] == [{"node": "n", "gpus": 2, "lanes": 5, "lanes_synthesizing": 2,
                           "lanes_waiting": 1, "host_memory_bytes": 1000,
                           "device_memory_bytes": 0, "allocatable_memory_bytes": 64 << 30}]


PER_NODE = ("kuzk_gpu_workers", "kuzk_gpu_lanes", "kuzk_node_allocatable_memory_bytes")


def test_a_nodes_gpus_worker_statuses_make_one_node_line(feed: Feed, view: StatusView) -> None:
    """Each GPU has a WorkerStatus of its own: the node's line and its per-node series sum
    them, once per node."""
    allocatable = node("n", 2)
    allocatable["status"]["allocatable"]["memory"] = "64Gi"
    feed(nodes=[allocatable], workerstatuses=[
        gpu_workerstatus("n", worker("W0", "gpu", job="j", partition=0, uuid="GPU-0", lanes=(
            measured("j", 1, "synthesizing", 300), measured("j", 2, "synth_done", 500,
                                                            ready=T0)))),
        gpu_workerstatus("n", worker("W1", uuid="GPU-1", lanes=(
            measured("j", 3, "synthesizing", 200), lane("j", 4, stage="starting")))),
        gpu_workerstatus("m", worker("W2", uuid="GPU-2"))])
    d = doc(view)
    assert [(w["node"], w["gpu_uuid"]) for w in d["gpu_workers"]] == [
        ("m", "GPU-2"), ("n", "GPU-0"), ("n", "GPU-1")]
    assert d["nodes"] == [
        {"node": "m", "gpus": 1, "lanes": 0, "lanes_synthesizing": 0, "lanes_waiting": 0,
         "host_memory_bytes": 0, "device_memory_bytes": 0, "allocatable_memory_bytes": None},
        {"node": "n", "gpus": 2, "lanes": 5, "lanes_synthesizing": 2, "lanes_waiting": 1,
         "host_memory_bytes": 1000, "device_memory_bytes": 0,
         "allocatable_memory_bytes": 64 << 30}]
    text = generate_latest(metrics.registry(view)).decode()
    samples = [(s.name, tuple(sorted(s.labels.items())), s.value)
               for f in text_string_to_metric_families(text) for s in f.samples
               if s.name in PER_NODE and s.labels.get("node") == "n"]
    assert len(samples) == len(set((name, labels) for name, labels, _ in samples)), "once"
    assert ("kuzk_gpu_workers", (("node", "n"), ("state", "gpu")), 1) in samples
    assert ("kuzk_gpu_workers", (("node", "n"), ("state", "waiting")), 1) in samples
    assert ("kuzk_gpu_lanes", (("node", "n"), ("stage", "synthesizing")), 2) in samples
    assert ("kuzk_node_allocatable_memory_bytes", (("Hostname", "n"), ("node", "n")),
            64 << 30) in samples


def test_memory_gauges_carry_the_gpu_labels(feed: Feed, view: StatusView) -> None:
    allocatable = node("n", 1)
    allocatable["status"]["allocatable"]["memory"] = "1Gi"
    holder = worker("W0", "gpu", job="j", partition=0, uuid="GPU-1")
    holder = replace(holder, lanes=(replace(holder.lanes[0], memory=Memory(700, 4096)),))
    feed(nodes=[allocatable], workerstatuses=[workerstatus("n", holder)])
    text = generate_latest(metrics.registry(view)).decode()
    samples = {(s.name, s.labels.get("UUID", "")): (s.labels, s.value)
               for f in text_string_to_metric_families(text) for s in f.samples}
    labels, value = samples[("kuzk_gpu_device_memory_bytes", "GPU-1")]
    assert value == 4096
    assert (labels["node"], labels["worker"], labels["gpu_uuid"], labels["Hostname"]) == (
        "n", "W0", "GPU-1", "n")
    assert samples[("kuzk_gpu_host_memory_bytes", "GPU-1")][1] == 700
    assert samples[("kuzk_gpu_lanes_synthesizing", "GPU-1")][1] == 0
    assert samples[("kuzk_node_allocatable_memory_bytes", "")][1] == 1 << 30


def accounted(busy: float, no_lane: float, at_time: float) -> GpuTime:
    return GpuTime((("busy", busy), ("no_lane", no_lane)), at(at_time))


def test_gpu_time_is_the_workerstatus_s_and_a_new_server_shows_the_same(
        clock: Clock, view: StatusView, feed: Feed) -> None:
    kept = replace(worker("W0"), gpu_time=accounted(40.0, 60.0, T0))
    status = workerstatus("n", kept)
    feed(workerstatuses=[status])
    clock.now = T0 + 5
    first = doc(view)["gpu_workers"][0]
    restarted = StatusView(keep_finished=600, clock=clock, started=T0 + 5, open_mode_lag=0)
    for resource in RESOURCES:
        restarted.add_watch(resource, resource)
        restarted.listed(resource, [status] if resource == "workerstatuses" else [])
    again = doc(restarted)["gpu_workers"][0]
    assert first["busy_seconds_total"] == again["busy_seconds_total"] == 40.0
    assert first["idle_seconds_total"] == again["idle_seconds_total"] == {
        "no_lane": 65.0, "cpu": 0.0, "not_live": 0.0}


def test_a_mode_closed_by_a_late_write_never_shows_less_after_a_restart(clock: Clock) -> None:
    """A GPU held since T0; its release, decided at T0 + 8 (busy up to then), arrives at
    T0 + 10. A server counting the open mode up to now would have shown 10 s busy, and one
    started after the release 8: a counter reset. Counted up to the lag before now, neither
    server shows more than the object comes to store."""

    def server(status: dict[str, Any], now: float) -> float:
        clock.now = now
        view = StatusView(keep_finished=600, clock=clock, started=T0)
        for resource in RESOURCES:
            view.add_watch(resource, resource)
            view.listed(resource, [status] if resource == "workerstatuses" else [])
        return float(doc(view)["gpu_workers"][0]["busy_seconds_total"])

    held = workerstatus("n", worker("W0", "gpu", job="j", partition=0, since=T0))
    released = workerstatus("n", replace(worker("W0"), gpu_time=accounted(8.0, 0.0, T0 + 8)))
    shown = server(held, T0 + 10)
    assert shown == 10 - OPEN_MODE_LAG_S
    assert shown <= server(released, T0 + 10.5) == 8.0


def test_a_deleted_workerstatus_s_gpu_time_stays_counted(clock: Clock, view: StatusView,
                                                         feed: Feed) -> None:
    status = workerstatus("n", replace(worker("W0", uuid="GPU-1"),
                                       gpu_time=accounted(40.0, 60.0, T0)))
    feed(workerstatuses=[status])

    def busy() -> dict[str, float]:
        text = generate_latest(metrics.registry(view)).decode()
        return {s.labels["gpu_uuid"]: s.value for f in text_string_to_metric_families(text)
                for s in f.samples if s.name == "kuzk_gpu_busy_seconds_total"}

    assert busy() == {"GPU-1": 40.0}
    view.listed("ledger", [ledger_map(status)])
    view.listed("workerstatuses", [])
    clock.now = T0 + 100
    assert busy() == {"GPU-1": 40.0}


def test_a_gpu_s_name_learnt_later_continues_its_series(clock: Clock, view: StatusView,
                                                       feed: Feed) -> None:
    nameless = replace(worker("W0", uuid="GPU-1"), gpu_time=accounted(40.0, 60.0, T0))
    feed(workerstatuses=[workerstatus("n", nameless)])
    named = replace(nameless, gpu=replace(nameless.gpu, name="NVIDIA H200"),
                    gpu_time=accounted(40.0, 61.0, T0 + 1))
    clock.now = T0 + 1
    feed(workerstatuses=[workerstatus("n", named)])
    text = generate_latest(metrics.registry(view)).decode()
    busy = [(s.labels["modelName"], s.value) for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "kuzk_gpu_busy_seconds_total"]
    assert busy == [("NVIDIA H200", 40.0)]
