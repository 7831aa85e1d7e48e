"""What the WorkerStatus writes carry besides lanes: each GPU's time by mode, accounted by the
write that ends a mode (so no reader keeps it), and each lane's memory, measured by its prover
for the write it makes anyway."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuzk.contract import ledger
from kuzk.contract.gputime import GPU_TIME_MODES
from kuzk.contract.workerstatus import parse
from kuzk.contract.workerstatus.decisions import (
    Assignment,
    Gpu,
    Memory,
    PodRef,
    WriteDecision,
    decide_acquire,
    decide_join,
    decide_leave,
    decide_release,
    decide_release_gpu,
    decide_stage,
    decide_sweep,
)

NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
GPU0 = Gpu("GPU-0")


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def assignment(pod: str, partition: int) -> Assignment:
    return Assignment("ns", "job", "job-uid", "snap-update", partition, 1, pod, f"uid-{pod}")


A, B = assignment("a", 3), assignment("b", 4)
Step = Callable[[dict[str, Any]], WriteDecision[Any]]


def run(*steps: Step, start: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = start or {}
    for step in steps:
        decision = step(status)
        status = status if decision.status is None else decision.status
    return status


def seconds(status: dict[str, Any], now: datetime | None = None) -> dict[str, float]:
    """The first worker's seconds by mode, accounted up to ``now`` (default: as stored)."""
    worker = parse(status).workers[0]
    time = worker.gpu_time if now is None else worker.accounted(now)
    return {mode: time.of(mode) for mode in GPU_TIME_MODES}


def test_each_write_closes_the_time_of_the_mode_the_gpu_was_in() -> None:
    status = run(
        lambda s: decide_join(s, GPU0, A, at(0)),
        lambda s: decide_stage(s, A, "synthesizing", at(1)),
        lambda s: decide_stage(s, A, "synth_done", at(4)),
        lambda s: decide_acquire(s, A, at(5)),
        lambda s: decide_release_gpu(s, A, at(12)),
        lambda s: decide_leave(s, A, "succeeded", at(14)),
        lambda s: decide_join(s, GPU0, B, at(20)),
    )
    assert seconds(status) == {"busy": 7.0, "cpu": 7.0, "not_live": 0.0, "no_lane": 6.0}
    assert parse(status).workers[0].gpu_time.accounted_at == at(20)


def test_a_reader_adds_the_open_mode_up_to_its_now_and_a_later_write_agrees() -> None:
    """What the status server shows between writes (``accounted(now)``) is what the next
    write stores: no jump when it lands."""
    held = run(lambda s: decide_join(s, GPU0, A, at(0)), lambda s: decide_acquire(s, A, at(2)))
    shown = seconds(held, at(9))
    written = run(lambda s: decide_release_gpu(s, A, at(9)), start=held)
    assert shown == seconds(written) == {"busy": 7.0, "cpu": 2.0, "not_live": 0.0,
                                         "no_lane": 0.0}


def test_a_lane_marked_not_live_counts_not_live_from_its_mark() -> None:
    """The operator's mark is the object's first word of it: the write accounts up to its own
    moment by the mode the object showed (cpu), the seconds after it as not_live."""
    status = run(lambda s: decide_join(s, GPU0, A, at(0)),
                 lambda s: decide_stage(s, A, "synthesizing", at(10)))
    assert seconds(status, at(100)) == {"busy": 0.0, "cpu": 100.0, "not_live": 0.0,
                                        "no_lane": 0.0}, "no write since: still cpu"
    marked = run(lambda s: decide_sweep(s, {A.pod_uid: None}, at(100), {A.pod_uid: at(40)}),
                 start=status)
    assert seconds(marked) == {"busy": 0.0, "cpu": 100.0, "not_live": 0.0, "no_lane": 0.0}
    assert parse(marked).workers[0].lanes[0].not_live_since == at(40)
    assert seconds(marked, at(130))["not_live"] == 30.0
    swept = run(lambda s: decide_sweep(s, {}, at(130)), start=marked)
    assert seconds(swept) == seconds(marked, at(130))


def test_a_holder_marked_not_live_is_idle_not_busy_and_busy_again_once_live() -> None:
    status = run(lambda s: decide_join(s, GPU0, A, at(0)), lambda s: decide_acquire(s, A, at(0)))
    assert seconds(status, at(100))["busy"] == 100.0, "a holder is busy without writing"
    marked = run(lambda s: decide_sweep(s, {A.pod_uid: None}, at(25), {A.pod_uid: at(20)}),
                 start=status)
    assert parse(marked).workers[0].mode() == "not_live"
    live = run(lambda s: decide_sweep(s, {A.pod_uid: None}, at(50)), start=marked)
    assert parse(live).workers[0].mode() == "busy"
    assert seconds(live, at(60)) == {"busy": 35.0, "cpu": 0.0, "not_live": 25.0,
                                     "no_lane": 0.0}


def test_lanes_are_not_live_only_when_every_one_is() -> None:
    status = run(lambda s: decide_join(s, GPU0, A, at(0)), lambda s: decide_join(s, GPU0, B, at(0)))
    one = run(lambda s: decide_sweep(s, {A.pod_uid: None, B.pod_uid: None}, at(10),
                                     {A.pod_uid: at(5)}), start=status)
    assert parse(one).workers[0].mode() == "cpu"
    both = run(lambda s: decide_sweep(s, {A.pod_uid: None, B.pod_uid: None}, at(20),
                                      {A.pod_uid: at(5), B.pod_uid: at(15)}), start=one)
    assert parse(both).workers[0].mode() == "not_live"
    assert seconds(both, at(30)) == {"busy": 0.0, "cpu": 20.0, "not_live": 10.0,
                                     "no_lane": 0.0}


def test_a_writer_whose_clock_is_behind_adds_nothing_and_keeps_accounted_at() -> None:
    status = run(lambda s: decide_join(s, GPU0, A, at(10)),
                 lambda s: decide_stage(s, A, "synthesizing", at(4)))
    assert sum(seconds(status).values()) == 0.0
    assert parse(status).workers[0].gpu_time.accounted_at == at(10)


def test_a_stale_write_accounts_too() -> None:
    status = run(lambda s: decide_join(s, GPU0, A, at(0)),
                 lambda s: decide_release(s, PodRef("x", "uid-x"), "succeeded", at(3)),
                 lambda s: decide_stage(s, B, "synthesizing", at(5)))
    assert seconds(status)["cpu"] == 5.0


WRITES = st.lists(st.tuples(st.sampled_from(["join", "synth", "acquire", "release_gpu",
                                             "mark", "leave", "sweep"]),
                            st.sampled_from([A, B]), st.floats(0.0, 50.0)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(WRITES)
def test_busy_plus_idle_is_wall_time_since_the_worker_was_added(writes: list[Any]) -> None:
    status: dict[str, Any] = {}
    clock = 0.0
    decide: dict[str, Callable[[dict[str, Any], Assignment, datetime], WriteDecision[Any]]] = {
        "join": lambda s, who, now: decide_join(s, GPU0, who, now),
        "synth": lambda s, who, now: decide_stage(s, who, "synth_done", now),
        "acquire": decide_acquire,
        "release_gpu": decide_release_gpu,
        "mark": lambda s, who, now: decide_sweep(
            s, {A.pod_uid: None, B.pod_uid: None}, now, {who.pod_uid: now - timedelta(seconds=3)}),
        "leave": lambda s, who, now: decide_leave(s, who, "succeeded", now),
        "sweep": lambda s, who, now: decide_sweep(s, {A.pod_uid: None}, now),
    }
    added: float | None = None
    for name, who, step in writes:
        clock += step
        decision = decide[name](status, who, at(clock))
        if decision.status is not None:
            status = decision.status
            if added is None and status.get("workers"):
                added = clock
    if added is None:
        return
    total = sum(seconds(status, at(clock + 7)).values())
    assert total == pytest.approx(clock + 7 - added, abs=0.01)


def test_lane_writes_carry_the_memory_their_prover_measured() -> None:
    status = run(
        lambda s: decide_join(s, GPU0, A, at(0), Memory(100)),
        lambda s: decide_stage(s, A, "synthesizing", at(1), Memory(300)),
        lambda s: decide_acquire(s, A, at(2), Memory(500, 0)),
        lambda s: decide_release_gpu(s, A, at(3), Memory(520, 4096)),
    )
    lane = status["workers"][0]["lanes"][0]
    assert (lane["hostMemoryBytes"], lane["deviceMemoryBytes"]) == (520, 4096)
    released = run(lambda s: decide_acquire(s, A, at(4), Memory(530, 0)),
                   lambda s: decide_stage(s, A, "synth_done", at(5)), start=status)
    lane = released["workers"][0]["lanes"][0]
    assert (lane["hostMemoryBytes"], lane["deviceMemoryBytes"]) == (530, 0), (
        "a write without a measurement keeps the last one")
    assert parse(released).workers[0].lanes[0].memory == Memory(530, 0)


def test_seconds_a_former_release_counted_as_unknown_go_on_as_not_live() -> None:
    """Lanes whose heartbeats had stopped were ``unknown``; nothing they counted is lost."""
    stored = {"workers": [{"id": "W0", "gpu": {"uuid": "GPU-0"}, "state": "idle", "lanes": [],
                           "gpuTime": {"busySeconds": 4.0, "unknownSeconds": 6.0,
                                       "accountedAt": "2025-03-04T05:06:07.000Z"}}]}
    assert seconds(stored)["not_live"] == 6.0
    assert "unknownSeconds" not in parse(stored).as_status(NOW)["workers"][0]["gpuTime"]
    book = ledger.parse({"data": {ledger.DATA_KEY: json.dumps({
        "schema": ledger.SCHEMA, "folded": {},
        "tally": {"gpuSeconds": [{"node": "n", "worker": "W0", "gpuUUID": "GPU-0",
                                  "seconds": {"busy": 1.0, "unknown": 2.5}}]}})}})
    assert dict(book.tally.gpu_seconds[("n", "W0", "GPU-0", "")]) == {"busy": 1.0,
                                                                     "not_live": 2.5}
