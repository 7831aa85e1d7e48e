"""The checker the concurrency test applies to every version a watch recorded
(tests/integration/workers/model.py ``explain``): it names the one write of the protocol that
made each step, and finds none for the steps a lost update or a write applied to a version it
did not read would make. Every step the real decisions make is named (the interleavings in
test_worker_decisions check that); here, the ones no write makes are refused."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kuzk.contract.workerstatus.decisions import (
    Assignment,
    Gpu,
    PodRef,
    decide_acquire,
    decide_join,
    decide_release,
    decide_release_gpu,
    decide_stage,
    decide_sweep,
)
from tests.integration.workers.model import explain

NOW = datetime(2025, 3, 4, 5, 6, 7, 891_000, tzinfo=UTC)
GPU0, GPU1 = Gpu("GPU-0"), Gpu("GPU-1")


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def lane(pod: str, kind: str = "snap-update") -> Assignment:
    return Assignment("ns", "job", "job-uid", kind, 0, 1, pod, f"uid-{pod}")


A, B, W = lane("a"), lane("b"), lane("w", "winning-post")


def written(status: dict[str, Any], decision: Any) -> dict[str, Any]:
    assert decision.status is not None
    return dict(decision.status)


@pytest.fixture
def holding() -> dict[str, Any]:
    """W0 with A holding its GPU phase, B synthesizing."""
    status: dict[str, Any] = {}
    status = written(status, decide_join(status, GPU0, A, at(0)))
    status = written(status, decide_join(status, GPU0, B, at(1)))
    status = written(status, decide_acquire(status, A, at(2)))
    return written(status, decide_stage(status, B, "synthesizing", at(3)))


def lanes_of(status: dict[str, Any]) -> list[dict[str, Any]]:
    return list(status["workers"][0]["lanes"])


def test_each_write_is_named(holding: dict[str, Any]) -> None:
    steps: list[tuple[Callable[[dict[str, Any]], Any], str]] = [
        (lambda s: decide_stage(s, B, "synth_done", at(4)), "stage"),
        (lambda s: decide_acquire(s, B, at(5)), "acquire-wait"),
        (lambda s: decide_release_gpu(s, A, at(6)), "release_gpu"),
        (lambda s: decide_release_gpu(s, A, at(7)), "stale"),
        (lambda s: decide_acquire(s, B, at(8)), "acquire-grant"),
        (lambda s: decide_release(s, A.pod, "succeeded", at(9)), "release"),
        (lambda s: decide_join(s, GPU1, W, at(10)), "join"),
        (lambda s: decide_sweep(s, {"uid-w": None}, at(11)), "sweep"),
    ]
    status = holding
    for decide, kind in steps:
        after = written(status, decide(status))
        step = explain(status, after)
        assert step is not None and step.kind == kind, (kind, step)
        status = after
    assert step.removed == {"uid-b"}


def test_a_lost_update_is_no_single_write(holding: dict[str, Any]) -> None:
    """B's stage report and A's GPU release, both made from the same version: whichever
    lands second without a conflict check drops the other, and the step between the two
    stored versions is two writes at once."""
    staged = written(holding, decide_stage(holding, B, "synth_done", at(4)))
    both = written(staged, decide_release_gpu(staged, A, at(5)))
    assert explain(holding, both) is None


def test_a_lane_gone_together_with_another_change_is_no_single_write(
    holding: dict[str, Any],
) -> None:
    left = written(holding, decide_release(holding, B.pod, "failed", at(4)))
    broken = copy.deepcopy(left)
    broken["workers"][0]["completed"] = 2
    assert explain(holding, broken) is None, "two completed for one lane"
    broken = copy.deepcopy(left)
    newcomer = copy.deepcopy(lanes_of(holding)[1])
    newcomer["pod"], newcomer["stage"] = {"name": "c", "uid": "uid-c"}, "starting"
    broken["workers"][0]["lanes"].append(newcomer)
    broken["lanes"] += 1
    assert explain(holding, broken) is None, "a lane left and another joined in one write"


def test_a_stage_that_goes_back_or_a_holder_stolen_is_refused(holding: dict[str, Any]) -> None:
    back = copy.deepcopy(holding)
    back["workers"][0]["lanes"][1]["stage"] = "starting"
    assert explain(holding, back) is None
    stolen = written(holding, decide_acquire(holding, B, at(4)))  # B waits
    taken = copy.deepcopy(stolen)
    w0 = taken["workers"][0]
    w0["holder"]["pod"] = {"name": "b", "uid": "uid-b"}
    w0["lanes"][0]["stage"], w0["lanes"][1]["stage"] = "committing", "gpu"
    del w0["lanes"][1]["readyAt"]
    assert explain(stolen, taken) is None, "B took the GPU phase from A in one write"


def test_a_grant_out_of_order_is_refused(holding: dict[str, Any]) -> None:
    status = written(holding, decide_join(holding, GPU0, W, at(4)))
    status = written(status, decide_acquire(status, B, at(5)))
    status = written(status, decide_acquire(status, W, at(6)))
    status = written(status, decide_release_gpu(status, A, at(7)))
    right = written(status, decide_acquire(status, W, at(8)))
    assert explain(status, right).kind == "acquire-grant"
    # The same grant to B, though the winning-post lane waits with a higher priority:
    wrong = copy.deepcopy(right)
    w0 = wrong["workers"][0]
    b, w = w0["lanes"][1], w0["lanes"][2]
    w0["holder"]["pod"] = {"name": "b", "uid": "uid-b"}
    b["stage"], w["stage"], w["readyAt"] = "gpu", "starting", b.pop("readyAt")
    assert explain(status, wrong) is None


def test_counters_and_workers_only_move_as_writes_move_them(holding: dict[str, Any]) -> None:
    stale = written(holding, decide_release_gpu(holding, B, at(4)))
    assert explain(holding, stale).kind == "stale"
    worse = copy.deepcopy(stale)
    worse["workers"][0]["lanes"][1]["stage"] = "synth_done"
    assert explain(holding, worse) is None, "a refused write changed a lane"
    assert explain(stale, holding) is None, "the stale count went down"
    gone = copy.deepcopy(holding)
    gone["workers"], gone["workerCount"], gone["proving"], gone["lanes"] = [], 0, 0, 0
    assert explain(holding, gone) is None, "a worker vanished"
    joined = written(holding, decide_join(holding, GPU1, W, at(4)))
    renamed = copy.deepcopy(joined)
    renamed["workers"][1]["id"] = "W5"
    assert explain(holding, renamed) is None, "not the lowest free worker ID"


def test_a_sweep_that_forgets_the_holder_it_took_is_a_release_only_of_one_lane(
    holding: dict[str, Any],
) -> None:
    swept = written(holding, decide_sweep(holding, {}, at(4)))  # both pods gone
    step = explain(holding, swept)
    assert step is not None and (step.kind, step.removed) == ("sweep", {"uid-a", "uid-b"})
    forgot = copy.deepcopy(swept)
    del forgot["workers"][0]["previousPodUIDs"]
    assert explain(holding, forgot) is None, "two lanes gone, the holder not remembered"
    assert decide_release(swept, PodRef("a", "uid-a"), "lost", at(5)).stale == "release"
