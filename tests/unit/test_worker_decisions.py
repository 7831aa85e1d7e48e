"""The pure decisions of the WorkerStatus protocol (kuzk.workers ``decide_*``), table by
table: what each write makes of a status, when it is stale, and what it leaves alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kuzk import api
from kuzk.workers import (
    PREVIOUS_PODS,
    Assignment,
    Gpu,
    PodRef,
    Released,
    decide_claim,
    decide_heartbeat,
    decide_release,
    decide_stage,
    decide_sweep,
)


def stamp(moment: datetime) -> str:
    return api.format_time(moment, millis=True)


NOW = datetime(2025, 3, 4, 5, 6, 7, 891_234, tzinfo=UTC)
LATER = NOW + timedelta(seconds=5)
GPU0, GPU1 = Gpu("GPU-0", "NVIDIA H200", 1 << 37), Gpu("GPU-1")


def assignment(pod: str, partition: int = 3, attempt: int = 1) -> Assignment:
    return Assignment("ns", "job", "job-uid", "snap-update", partition, attempt, pod, f"uid-{pod}")


A, B, A2 = assignment("a"), assignment("b", partition=4), assignment("a2", attempt=2)


def proving(worker_id: str, gpu: str, who: Assignment, **extra: Any) -> dict[str, Any]:
    return {
        "id": worker_id,
        "gpu": {"uuid": gpu},
        "state": "proving",
        "job": {"namespace": "ns", "name": "job", "uid": "job-uid", "proofKind": "snap-update"},
        "partition": who.partition,
        "attempt": who.attempt,
        "pod": {"name": who.pod_name, "uid": who.pod_uid},
        "since": stamp(NOW),
        "heartbeat": stamp(NOW),
        "completed": 0,
        **extra,
    }


def idle(worker_id: str, gpu: str, last: Assignment, completed: int = 0) -> dict[str, Any]:
    return {
        "id": worker_id,
        "gpu": {"uuid": gpu},
        "state": "idle",
        "pod": {"name": last.pod_name, "uid": last.pod_uid},
        "since": stamp(NOW),
        "completed": completed,
    }


def status(*workers: dict[str, Any], stale: int = 0) -> dict[str, Any]:
    return {
        "workers": list(workers),
        "proving": sum(w["state"] == "proving" for w in workers),
        "workerCount": len(workers),
        "staleWritesRejected": stale,
        "updatedAt": stamp(NOW),
    }


def test_stamp_is_utc_with_milliseconds() -> None:
    assert stamp(NOW) == "2025-03-04T05:06:07.891Z"


# --- claim -------------------------------------------------------------------------------
def test_first_claim_adds_the_worker_with_its_gpu() -> None:
    got = decide_claim({}, GPU0, A, LATER)
    assert got.result == "W0"
    worker = proving("W0", "GPU-0", A, since=stamp(LATER), heartbeat=stamp(LATER))
    worker["gpu"] = {"uuid": "GPU-0", "name": "NVIDIA H200", "memoryBytes": 1 << 37}
    assert got.status == {**status(worker), "updatedAt": stamp(LATER)}
    assert (got.stale, got.notes) == (None, ())


@pytest.mark.parametrize(
    ("workers", "gpu", "expected_id"),
    [
        ([idle("W0", "GPU-0", B)], GPU1, "W1"),
        ([idle("W0", "GPU-0", B), idle("W2", "GPU-2", B)], GPU1, "W1"),
        ([idle("W1", "GPU-9", B)], GPU1, "W0"),
        ([idle("W0", "GPU-0", B), idle("W1", "GPU-1", B)], GPU1, "W1"),
    ],
    ids=["next", "lowest-free", "gap-at-zero", "known-gpu"],
)
def test_worker_id_is_stable_per_gpu(
    workers: list[dict[str, Any]], gpu: Gpu, expected_id: str
) -> None:
    assert decide_claim(status(*workers), gpu, A, NOW).result == expected_id


def test_claim_of_an_idle_worker_keeps_its_completed_count() -> None:
    got = decide_claim(status(idle("W0", "GPU-0", B, completed=5)), GPU0, A, LATER)
    assert got.status is not None
    (worker,) = got.status["workers"]
    assert (worker["state"], worker["completed"], worker["pod"]["uid"]) == ("proving", 5, "uid-a")
    assert "stage" not in worker and got.notes == ()
    assert "previousPodUIDs" not in worker, "B released it: B's assignment is over, not stale"


def test_previous_pods_are_newest_first_unique_and_bounded() -> None:
    pods = [assignment(f"p{k}") for k in range(PREVIOUS_PODS + 3)]
    current: dict[str, Any] = {}
    for pod in [*pods, pods[-2]]:
        got = decide_claim(current, GPU0, pod, LATER)
        assert got.status is not None
        current = got.status
    (worker,) = current["workers"]
    assert worker["pod"]["uid"] == pods[-2].pod_uid
    uids = worker["previousPodUIDs"]
    assert len(uids) == PREVIOUS_PODS
    assert uids[:3] == [pods[-1].pod_uid, pods[-3].pod_uid, pods[-4].pod_uid]
    assert len(set(uids)) == len(uids)


def test_claim_over_an_older_assignment_replaces_it_and_says_so() -> None:
    got = decide_claim(status(proving("W0", "GPU-0", A, stage="gpu")), GPU0, A2, LATER)
    assert got.status is not None
    (worker,) = got.status["workers"]
    assert (worker["pod"]["uid"], worker["attempt"]) == ("uid-a2", 2)
    assert "stage" not in worker, "the new assignment has not reported a stage yet"
    assert len(got.notes) == 1 and "uid-a2" in got.notes[0] and "uid-a)" in got.notes[0]
    assert got.status["staleWritesRejected"] == 0
    assert worker["previousPodUIDs"] == ["uid-a"]


def test_a_repeated_claim_writes_nothing() -> None:
    got = decide_claim(status(proving("W0", "GPU-0", A, stage="gpu")), GPU0, A, LATER)
    assert (got.status, got.result) == (None, "W0")


# --- stage and heartbeat -----------------------------------------------------------------
def test_stage_sets_stage_since_and_heartbeat() -> None:
    got = decide_stage(status(proving("W0", "GPU-0", A)), A, "synth_done", LATER)
    assert got.result is True and got.status is not None
    (worker,) = got.status["workers"]
    assert (worker["stage"], worker["since"], worker["heartbeat"]) == (
        "synth_done",
        stamp(LATER),
        stamp(LATER),
    )


def test_stage_must_be_a_worker_stage() -> None:
    with pytest.raises(ValueError, match="'done'"):
        decide_stage(status(proving("W0", "GPU-0", A)), A, "done", LATER)


def test_heartbeat_moves_only_the_heartbeat() -> None:
    before = status(proving("W0", "GPU-0", A, stage="gpu"))
    got = decide_heartbeat(before, A, LATER)
    assert got.result is True and got.status is not None
    assert got.status["workers"] == [proving("W0", "GPU-0", A, stage="gpu", heartbeat=stamp(LATER))]


STALE_CASES = {
    "other-pod": status(proving("W0", "GPU-0", B)),
    "retried-attempt": status(proving("W0", "GPU-0", A2)),
    "released": status(idle("W0", "GPU-0", A)),
    "empty": {},
}


@pytest.mark.parametrize("before", STALE_CASES.values(), ids=STALE_CASES.keys())
@pytest.mark.parametrize(
    "write",
    [
        lambda s: decide_stage(s, A, "gpu", LATER),
        lambda s: decide_heartbeat(s, A, LATER),
    ],
    ids=["stage", "heartbeat"],
)
def test_stage_and_heartbeat_for_an_assignment_not_held_are_stale(
    before: dict[str, Any], write: Any
) -> None:
    got = write(before)
    assert got.result is False and got.stale in ("stage", "heartbeat")
    assert got.status["workers"] == before.get("workers", [])
    assert got.status["staleWritesRejected"] == before.get("staleWritesRejected", 0) + 1
    assert "uid-a)" in got.notes[0]


# --- release -----------------------------------------------------------------------------
@pytest.mark.parametrize(("outcome", "completed"), [("succeeded", 3), ("failed", 2)])
@pytest.mark.parametrize("who", [A, A.pod], ids=["assignment", "pod-ref"])
def test_release_idles_the_holder(outcome: Any, completed: int, who: Assignment | PodRef) -> None:
    before = status(proving("W0", "GPU-0", A, stage="gpu", completed=2), proving("W1", "GPU-1", B))
    got = decide_release(before, who, outcome, LATER)
    assert got.result is True and got.stale is None and got.status is not None
    assert got.status["workers"][0] == {
        **idle("W0", "GPU-0", A, completed=completed),
        "since": stamp(LATER),
    }
    assert got.status["workers"][1] == before["workers"][1]
    assert (got.status["proving"], got.status["workerCount"]) == (1, 2)


def test_release_of_a_pod_already_released_writes_nothing() -> None:
    got = decide_release(status(idle("W0", "GPU-0", A, completed=1)), A.pod, "succeeded", LATER)
    assert (got.status, got.result, got.stale) == (None, False, None)


def test_finalizer_release_after_the_provers_release_and_the_next_claim_is_not_stale() -> None:
    """On a busy node the next pod claims the GPU before the operator's finalizer release of
    the last one arrives: that release is done already, not a stale write."""
    claimed = decide_claim({}, GPU0, A, NOW).status
    assert claimed is not None
    released = decide_release(claimed, A, "succeeded", NOW).status
    assert released is not None
    reclaimed = decide_claim(released, GPU0, B, LATER).status
    assert reclaimed is not None
    got = decide_release(reclaimed, A.pod, "succeeded", LATER)
    assert (got.status, got.result, got.stale) == (None, False, None)
    (note,) = got.notes
    assert "uid-a)" in note and "holds no worker" in note


def test_finalizer_release_after_a_claim_took_the_worker_is_stale() -> None:
    """The bug kuzk exists for: A still held the GPU when B claimed it (A's pod was over, its
    prover never released), and A's late finalizer release must not touch B's worker."""
    claimed = decide_claim({}, GPU0, A, NOW).status
    assert claimed is not None
    taken = decide_claim(claimed, GPU0, B, LATER).status
    assert taken is not None
    got = decide_release(taken, A.pod, "disrupted", LATER)
    assert got.status is not None and got.stale == "release" and got.result is False
    assert got.status["staleWritesRejected"] == 1
    assert got.status["workers"][0]["pod"]["uid"] == "uid-b"


def held_before(worker: dict[str, Any], *pods: Assignment) -> dict[str, Any]:
    return {**worker, "previousPodUIDs": [p.pod_uid for p in pods]}


NEVER_HELD = {
    "other-pod": status(proving("W0", "GPU-0", B)),
    "idle-after-other-pod": status(idle("W0", "GPU-0", B)),
    "others-history": status(held_before(proving("W0", "GPU-0", B), A2)),
    "empty": {},
}


@pytest.mark.parametrize("before", NEVER_HELD.values(), ids=NEVER_HELD.keys())
def test_finalizer_release_of_a_pod_that_never_held_a_worker_writes_nothing(
    before: dict[str, Any],
) -> None:
    got = decide_release(before, A.pod, "disrupted", LATER)
    assert (got.status, got.result, got.stale) == (None, False, None)
    (note,) = got.notes
    assert "uid-a)" in note and "holds no worker" in note


@pytest.mark.parametrize("before", NEVER_HELD.values(), ids=NEVER_HELD.keys())
def test_provers_release_of_an_assignment_no_worker_holds_is_stale(
    before: dict[str, Any],
) -> None:
    """The prover releases only what it claimed: whatever the worker remembers, it held."""
    got = decide_release(before, A, "succeeded", LATER)
    assert (got.result, got.stale) == (False, "release")
    assert got.status is not None
    assert got.status["staleWritesRejected"] == before.get("staleWritesRejected", 0) + 1


LATE_RELEASES = {
    "other-pod": status(held_before(proving("W0", "GPU-0", B), A)),
    "retried-attempt": status(held_before(proving("W0", "GPU-0", A2), A)),
    "released-then-other-pod": status(held_before(idle("W0", "GPU-0", B), A)),
    "other-worker": status(
        idle("W0", "GPU-0", B), held_before(proving("W1", "GPU-1", A2), B, A), stale=4
    ),
}


@pytest.mark.parametrize("who", [A, A.pod], ids=["assignment", "pod-ref"])
@pytest.mark.parametrize("before", LATE_RELEASES.values(), ids=LATE_RELEASES.keys())
def test_late_release_is_stale_and_changes_no_worker(
    before: dict[str, Any], who: Assignment | PodRef
) -> None:
    got = decide_release(before, who, "succeeded", LATER)
    assert (got.result, got.stale) == (False, "release")
    assert got.status is not None
    assert got.status["workers"] == before.get("workers", [])
    assert got.status["staleWritesRejected"] == before.get("staleWritesRejected", 0) + 1
    (note,) = got.notes
    assert "uid-a)" in note
    for worker in before.get("workers", []):
        if worker["state"] == "proving":
            assert worker["pod"]["uid"] in note, "both assignments are named"


def test_the_aba_race_is_stale_and_a_pod_that_never_claimed_is_not() -> None:
    """Claims and releases in the order of the original bug: A proves on W0, B takes W0, A's
    late release is refused and counted; C, preempted before it claimed, releases nothing."""
    c = assignment("c", partition=5)
    current: dict[str, Any] = {}
    for write in (
        lambda s: decide_claim(s, GPU0, A, NOW),
        lambda s: decide_claim(s, GPU0, B, LATER),
    ):
        got = write(current)
        assert got.status is not None
        current = got.status
    late = decide_release(current, A.pod, "succeeded", LATER)
    assert (late.result, late.stale) == (False, "release")
    assert late.status is not None and late.status["staleWritesRejected"] == 1
    never = decide_release(late.status, c.pod, "disrupted", LATER)
    assert (never.status, never.result, never.stale) == (None, False, None)


# --- sweep -------------------------------------------------------------------------------
def test_sweep_frees_gone_pods_and_silent_pods_that_are_not_running() -> None:
    c, d, e, f = assignment("c"), assignment("d"), assignment("e"), assignment("f")
    silent = stamp(NOW - timedelta(seconds=31))
    before = status(
        proving("W0", "GPU-0", A, heartbeat=silent),  # Running: kept however silent
        proving("W1", "GPU-1", B),  # gone
        proving("W2", "GPU-2", c, heartbeat=silent),  # Succeeded and silent
        proving("W3", "GPU-3", d, heartbeat=stamp(NOW - timedelta(seconds=29))),  # Failed, fresh
        idle("W4", "GPU-4", e),
        proving("W5", "GPU-5", f, heartbeat=silent),  # evicted and silent
    )
    # None: still running; else what its pod's end means for the worker (observe.worker_outcome,
    # the finalizer's rule: an eviction is a disruption, not the prover's failure)
    live: dict[str, api.WorkerOutcome | None] = {
        "uid-a": None, "uid-c": "succeeded", "uid-d": "failed", "uid-f": "disrupted"}
    got = decide_sweep(before, live, NOW, heartbeat_interval=10)
    assert got.result == [
        Released("W1", B.pod, "lost"),
        Released("W2", c.pod, "succeeded"),
        Released("W5", f.pod, "disrupted"),
    ]
    assert got.status is not None
    states = [(w["id"], w["state"], w["completed"]) for w in got.status["workers"]]
    assert states == [
        ("W0", "proving", 0),
        ("W1", "idle", 0),
        ("W2", "idle", 1),
        ("W3", "proving", 0),
        ("W4", "idle", 0),
        ("W5", "idle", 0),
    ]
    assert got.status["proving"] == 2 and len(got.notes) == 3


def test_sweep_with_nothing_to_free_writes_nothing() -> None:
    got = decide_sweep(status(proving("W0", "GPU-0", A)), {"uid-a": None}, NOW)
    assert (got.status, got.result) == (None, [])
