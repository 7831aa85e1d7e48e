"""The pure decisions of the WorkerStatus protocol (kuzk.workers ``decide_*``) on the lanes
model (kuzk.workerstatus): what each write makes of a status, when it is stale, and what it
leaves alone; then random interleavings of every write over two and three lanes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuzk import api
from kuzk.workers import (
    PREVIOUS_PODS,
    Acquired,
    Assignment,
    Gpu,
    PodRef,
    WriteDecision,
    decide_acquire,
    decide_heartbeat,
    decide_join,
    decide_leave,
    decide_release,
    decide_release_gpu,
    decide_stage,
    decide_sweep,
)
from kuzk.workerstatus import lane_priority, parse

NOW = datetime(2025, 3, 4, 5, 6, 7, 891_234, tzinfo=UTC)
GPU0, GPU1 = Gpu("GPU-0", "NVIDIA H200", 1 << 37), Gpu("GPU-1")


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def assignment(pod: str, partition: int = 3, attempt: int = 1,
               kind: str = "snap-update") -> Assignment:
    return Assignment("ns", "job", "job-uid", kind, partition, attempt, pod, f"uid-{pod}")


A, B, C = assignment("a"), assignment("b", partition=4), assignment("c", partition=5)
WINNING = assignment("w", partition=0, kind="winning-post")


def apply(status: dict[str, Any], decision: WriteDecision[Any]) -> dict[str, Any]:
    return status if decision.status is None else decision.status


def run(*steps: Callable[[dict[str, Any]], WriteDecision[Any]]) -> tuple[dict[str, Any], list[Any]]:
    status: dict[str, Any] = {}
    results = []
    for step in steps:
        decision = step(status)
        status = apply(status, decision)
        results.append(decision.result)
    return status, results


def worker(status: dict[str, Any], worker_id: str = "W0") -> dict[str, Any]:
    return next(w for w in status["workers"] if w["id"] == worker_id)


def holder(status: dict[str, Any], worker_id: str = "W0") -> str | None:
    return (worker(status, worker_id).get("holder") or {}).get("pod", {}).get("uid")


def stages(status: dict[str, Any], worker_id: str = "W0") -> dict[str, str]:
    return {lane["pod"]["name"]: lane["stage"] for lane in worker(status, worker_id)["lanes"]}


def join(who: Assignment, gpu: Gpu = GPU0, t: float = 0) -> Callable[..., WriteDecision[str]]:
    return lambda s: decide_join(s, gpu, who, at(t))


def acquire(who: Assignment, t: float = 0) -> Callable[..., WriteDecision[Acquired]]:
    return lambda s: decide_acquire(s, who, at(t))


def release_gpu(who: Assignment, t: float = 0) -> Callable[..., WriteDecision[bool]]:
    return lambda s: decide_release_gpu(s, who, at(t))


def test_stamps_are_utc_with_milliseconds() -> None:
    status, _ = run(join(A))
    assert worker(status)["lanes"][0]["since"] == "2025-03-04T05:06:07.891Z"
    assert status["updatedAt"] == api.format_time(NOW, millis=True)


def test_join_adds_the_worker_of_a_new_gpu_and_a_lane_starting() -> None:
    status, results = run(join(A), join(B, GPU1), join(C))
    assert results == ["W0", "W1", "W0"]
    w0 = worker(status)
    assert w0["gpu"] == {"uuid": "GPU-0", "name": "NVIDIA H200", "memoryBytes": 1 << 37}
    assert (w0["state"], stages(status)) == ("waiting", {"a": "starting", "c": "starting"})
    assert [lane["pod"]["uid"] for lane in w0["lanes"]] == ["uid-a", "uid-c"], "arrival order"
    assert (status["workerCount"], status["lanes"], status["proving"]) == (2, 3, 0)


def test_joining_twice_writes_nothing() -> None:
    status, _ = run(join(A))
    assert decide_join(status, GPU0, A, at(1)).status is None


def test_the_lowest_free_worker_id_is_taken() -> None:
    status = {"workers": [{"id": "W1", "gpu": {"uuid": "GPU-1"}, "state": "idle", "lanes": []}]}
    assert decide_join(status, GPU0, A, NOW).result == "W0"


def test_stage_and_heartbeat_move_only_their_lane() -> None:
    status, _ = run(join(A), join(B))
    status = apply(status, decide_stage(status, A, "synthesizing", at(2)))
    status = apply(status, decide_heartbeat(status, B, at(3)))
    lanes = {lane["pod"]["name"]: lane for lane in worker(status)["lanes"]}
    assert (lanes["a"]["stage"], lanes["a"]["since"]) == ("synthesizing", api.format_time(
        at(2), millis=True))
    assert (lanes["b"]["stage"], lanes["b"]["heartbeat"]) == ("starting", api.format_time(
        at(3), millis=True))


@pytest.mark.parametrize("stage", ["gpu", "committing", "starting", "proving"])
def test_the_prover_writes_only_synthesis_stages(stage: str) -> None:
    status, _ = run(join(A))
    with pytest.raises(ValueError, match="stage must be one of synthesizing, synth_done"):
        decide_stage(status, A, stage, NOW)


def test_acquire_grants_a_free_gpu_and_the_next_lane_waits() -> None:
    status, results = run(join(A), join(B), acquire(A, 1), acquire(B, 2))
    assert results[2:] == [Acquired.GRANTED, Acquired.WAITING]
    assert (holder(status), worker(status)["state"]) == ("uid-a", "gpu")
    assert stages(status) == {"a": "gpu", "b": "starting"}
    waiting = worker(status)["lanes"][1]
    assert waiting["readyAt"] == api.format_time(at(2), millis=True)
    assert decide_acquire(status, B, at(3)).status is None, "asking again writes nothing"
    assert decide_acquire(status, A, at(3)).status is None, "the holder holds already"
    late = decide_stage(status, A, "synth_done", at(3))
    assert (late.status, late.result) == (None, True), "a late stage report moves nothing back"


def test_release_gpu_lets_the_waiter_in_and_the_lane_commits() -> None:
    status, results = run(join(A), join(B), acquire(A), acquire(B), release_gpu(A, 4),
                          acquire(B, 5))
    assert results[4:] == [True, Acquired.GRANTED]
    assert holder(status) == "uid-b"
    assert stages(status) == {"a": "committing", "b": "gpu"}
    assert "readyAt" not in worker(status)["lanes"][1]


def test_the_seeds_race_on_the_normal_path_is_refused_and_counted() -> None:
    """A finishes its GPU phase, B acquires it, then A's late release of the GPU phase (a
    retried write) arrives: refused and counted, B stays the holder. The finalizer's release
    of A removes A's lane only; a second one finds nothing to do and counts nothing."""
    status, _ = run(join(A), join(B), acquire(A), acquire(B), release_gpu(A), acquire(B))
    late = decide_release_gpu(status, A, at(6))
    assert (late.result, late.stale) == (False, "GPU release")
    status = apply(status, late)
    assert (holder(status), status["staleWritesRejected"]) == ("uid-b", 1)
    assert "W0 GPU phase held by b" in late.notes[0]
    status = apply(status, decide_release(status, PodRef("a", "uid-a"), "succeeded", at(7)))
    assert (holder(status), stages(status), worker(status)["completed"]) == (
        "uid-b", {"b": "gpu"}, 1)
    again = decide_release(status, PodRef("a", "uid-a"), "succeeded", at(8))
    assert (again.status, again.result, again.stale) == (None, False, None)
    assert status["staleWritesRejected"] == 1


def test_a_winning_post_lane_ready_later_goes_before_waiting_snap_updates() -> None:
    assert lane_priority("winning-post") > lane_priority("window-post") > lane_priority(
        "snap-update") == lane_priority("porep-c2")
    status, results = run(join(A), join(B), join(C), join(WINNING), acquire(A, 1),
                          acquire(B, 2), acquire(C, 3), acquire(WINNING, 4), release_gpu(A, 5),
                          acquire(B, 6), acquire(C, 6), acquire(WINNING, 6))
    assert results[9:] == [Acquired.WAITING, Acquired.WAITING, Acquired.GRANTED]
    assert holder(status) == "uid-w"
    status = apply(status, decide_release_gpu(status, WINNING, at(7)))
    assert decide_acquire(status, C, at(8)).result is Acquired.WAITING, "B was ready first"
    assert decide_acquire(status, B, at(8)).result is Acquired.GRANTED


def test_leave_removes_the_lane_and_the_gpu_phase_it_held() -> None:
    status, _ = run(join(A), join(B), acquire(A), acquire(B))
    status = apply(status, decide_leave(status, A, "failed", at(3)))
    assert (worker(status).get("holder"), stages(status), worker(status)["completed"]) == (
        None, {"b": "starting"}, 0)
    assert decide_acquire(status, B, at(4)).result is Acquired.GRANTED
    status = apply(status, decide_leave(status, B, "succeeded", at(5)))
    assert (worker(status)["state"], worker(status)["lanes"], worker(status)["completed"]) == (
        "idle", [], 1)


@pytest.mark.parametrize(
    "write",
    [
        lambda s: decide_stage(s, A, "synth_done", NOW),
        lambda s: decide_heartbeat(s, A, NOW),
        lambda s: decide_acquire(s, A, NOW),
        lambda s: decide_release_gpu(s, A, NOW),
        lambda s: decide_leave(s, A, "succeeded", NOW),
    ],
    ids=["stage", "heartbeat", "acquire", "release_gpu", "leave"],
)
def test_the_provers_writes_about_a_lane_that_is_gone_are_stale(write: Any) -> None:
    status, _ = run(join(B))
    decision = write(status)
    assert decision.stale is not None
    assert decision.status["staleWritesRejected"] == 1
    assert stages(decision.status) == {"b": "starting"}, "nothing else changed"


def test_a_finalizer_release_of_a_pod_without_a_lane_writes_nothing() -> None:
    status, _ = run(join(B))
    decision = decide_release(status, PodRef("x", "uid-x"), "lost", NOW)
    assert (decision.status, decision.result, decision.stale) == (None, False, None)
    assert "holds no lane" in decision.notes[0]


def test_sweep_removes_gone_and_silent_ended_lanes_and_frees_their_gpu_phase() -> None:
    status, _ = run(join(A), join(B), join(C, GPU1), acquire(A))
    status = apply(status, decide_heartbeat(status, C, at(25)))
    live = {"uid-b": None, "uid-c": "succeeded"}  # a gone, b running, c ended
    swept = decide_sweep(status, live, at(31))
    assert [(r.worker_id, r.pod.uid, r.outcome) for r in swept.result] == [
        ("W0", "uid-a", "lost")]
    status = apply(status, swept)
    assert (worker(status).get("holder"), worker(status)["previousPodUIDs"]) == (None, ["uid-a"])
    stale = decide_release(status, PodRef("a", "uid-a"), "lost", at(32))
    assert stale.stale == "release", "a pod taken from its GPU phase is remembered"
    later = decide_sweep(status, live, at(56))
    assert [(r.pod.uid, r.outcome) for r in later.result] == [("uid-c", "succeeded")]
    assert worker(apply(status, later), "W1")["completed"] == 1
    assert decide_sweep(status, {"uid-b": None, "uid-c": None}, at(100)).status is None


def test_previous_pods_are_newest_first_and_bounded() -> None:
    status: dict[str, Any] = {}
    for k in range(PREVIOUS_PODS + 2):
        who = assignment(f"p{k}")
        status, _ = (apply(status, decide_join(status, GPU0, who, NOW)), None)
        status = apply(status, decide_acquire(status, who, NOW))
        status = apply(status, decide_sweep(status, {}, NOW))
    remembered = worker(status)["previousPodUIDs"]
    assert remembered == [f"uid-p{k}" for k in range(PREVIOUS_PODS + 1, 1, -1)]


# --- interleavings ----------------------------------------------------------------------
LANES = [assignment(f"l{k}", partition=k, kind="winning-post" if k == 2 else "snap-update")
         for k in range(3)]
OPS = ("join", "stage", "acquire", "release_gpu", "leave", "finalizer", "sweep", "die")


def _check(status: dict[str, Any], before: dict[str, Any]) -> None:
    if not status:
        return
    model = parse(status)
    assert status["staleWritesRejected"] >= before.get("staleWritesRejected", 0)
    assert status["proving"] == sum(w.holder is not None for w in model.workers)
    assert status["lanes"] == sum(len(w.lanes) for w in model.workers)
    assert status["workerCount"] == len(model.workers)
    for w, stored in zip(model.workers, status["workers"], strict=True):
        assert w.holder is None or w.lane(w.holder.pod.uid) is not None, "holder is a lane"
        assert stored["state"] == str(w.state)
        assert len({lane.pod.uid for lane in w.lanes}) == len(w.lanes)
        in_gpu = [lane.pod.uid for lane in w.lanes if lane.stage == "gpu"]
        assert in_gpu == ([w.holder.pod.uid] if w.holder else []), "gpu stage means holder"
    assert parse(model.as_status(NOW)).workers == model.workers, "the stored form reads back"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 2), st.booleans()),
                max_size=40))
def test_random_interleavings_keep_one_holder_and_lose_no_lane(steps) -> None:
    """Two GPUs, three lanes (one a winning-post); ops in any order, pods dying at random.
    A lane disappears only by its own leave, its finalizer, or a sweep that saw its pod gone
    or ended; after a sweep no holder's pod is gone."""
    status: dict[str, Any] = {}
    dead: set[str] = set()
    t = 0.0
    for op, k, flag in steps:
        t += 1
        who, now = LANES[k], at(t)
        gpu = GPU1 if flag and k == 1 else GPU0
        before = status
        lanes_before = {lane.pod.uid for w in parse(status).workers for lane in w.lanes}
        if op == "join" and who.pod_uid not in dead:
            status = apply(status, decide_join(status, gpu, who, now))
        elif op == "stage":
            status = apply(status, decide_stage(status, who, "synth_done", now))
        elif op == "acquire":
            status = apply(status, decide_acquire(status, who, now))
        elif op == "release_gpu":
            status = apply(status, decide_release_gpu(status, who, now))
        elif op == "leave":
            status = apply(status, decide_leave(status, who, "succeeded", now))
        elif op == "finalizer":
            status = apply(status, decide_release(status, who.pod, "failed", now))
        elif op == "die":
            dead.add(who.pod_uid)
        elif op == "sweep":
            live = {a.pod_uid: None for a in LANES if a.pod_uid not in dead}
            status = apply(status, decide_sweep(status, live, now))
            for w in parse(status).workers:
                assert w.holder is None or w.holder.pod.uid not in dead
        _check(status, before)
        lanes_after = {lane.pod.uid for w in parse(status).workers for lane in w.lanes}
        removed = lanes_before - lanes_after
        if op in ("leave", "finalizer"):
            assert removed <= {who.pod_uid}
        elif op == "sweep":
            assert removed <= dead
        else:
            assert not removed, f"{op} lost a lane"
