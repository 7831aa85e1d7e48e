"""The operator's clock: runs are serialized and coalesced per key, failures are retried with
capped, jittered backoff until success, ``Gone`` forgets a key, and a paused clock is still.
Time is a ManualClock moved by the tests: nothing here sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from kuzk.operator.workqueue import RUN_BACKOFF, Gone, WorkQueue
from tests.manual_clock import ManualClock, settle


def test_backoff_grows_is_capped_and_jittered() -> None:
    first = [RUN_BACKOFF.delay(1) for _ in range(200)]
    late = [RUN_BACKOFF.delay(12) for _ in range(200)]
    assert all(0.25 <= d <= 0.5 for d in first)
    assert all(4 <= d <= 8 for d in late)
    assert len(set(late)) > 100


async def test_a_burst_of_kicks_during_a_run_costs_one_more_run() -> None:
    runs: list[Hashable] = []
    release = asyncio.Event()

    async def work(key: Hashable) -> float | None:
        runs.append(key)
        await release.wait()
        return None

    queue = WorkQueue(work, clock=ManualClock())
    queue.kick("a")
    await settle()
    assert runs == ["a"]
    for _ in range(20):
        queue.kick("a")
    release.set()
    await settle()
    assert runs == ["a", "a"]
    assert not queue.scheduled("a")
    assert queue.tracked() == []


async def test_failures_are_retried_with_growing_backoff_until_success() -> None:
    clock = ManualClock()
    calls = 0
    looks: list[bool] = []

    async def work(key: Hashable) -> float | None:
        nonlocal calls
        calls += 1
        looks.append(queue.scheduled(key))
        if calls < 6:
            raise ConnectionError("apiserver unreachable")
        return 60.0

    queue = WorkQueue(work, clock=clock)
    queue.kick("job")
    await settle()
    for failures in range(1, 6):
        assert calls == failures
        ceiling = min(RUN_BACKOFF.cap, RUN_BACKOFF.base * 2 ** (failures - 1))
        (retry,) = clock.pending()
        assert ceiling / 2 <= retry <= ceiling, (failures, retry)
        clock.advance(retry - 0.01)
        await settle()
        assert calls == failures, "no retry before its backoff"
        clock.advance(0.02)
        await settle()
    assert calls == 6
    assert queue.failures_total == 5
    assert all(looks), "the key had a look on the clock at every run"
    assert clock.pending() == [pytest.approx(60.0)], "the next look the run asked for"
    await queue.close()
    assert clock.pending() == []


async def test_an_unexpected_error_is_retried_too(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    calls = 0

    async def work(key: Hashable) -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("bug")
        return None

    queue = WorkQueue(work, clock=clock)
    queue.kick("job")
    await settle()
    assert "retry 1" in caplog.text
    clock.advance(RUN_BACKOFF.base)
    await settle()
    assert calls == 2
    assert queue.tracked() == []


async def test_gone_forgets_the_key() -> None:
    clock = ManualClock()

    async def work(key: Hashable) -> float | None:
        raise Gone

    queue = WorkQueue(work, clock=clock)
    queue.later("job", 5)
    assert queue.scheduled("job")
    clock.advance(5)
    await settle()
    assert queue.tracked() == []
    assert clock.pending() == []


async def test_later_keeps_the_sooner_look() -> None:
    clock = ManualClock()
    fired: list[float] = []

    async def work(key: Hashable) -> float | None:
        fired.append(clock.monotonic())
        return None

    queue = WorkQueue(work, clock=clock)
    queue.later("k", 5)
    queue.later("k", 30)
    assert clock.pending() == [5]
    queue.later("k", 2)
    assert clock.pending() == [2], "a sooner look replaces the later one"
    clock.advance(30)
    await settle()
    assert fired == [30.0]
    assert queue.tracked() == []


async def test_a_paused_clock_drops_its_timers_and_ignores_kicks() -> None:
    clock = ManualClock()
    runs: list[Hashable] = []

    async def work(key: Hashable) -> float | None:
        runs.append(key)
        return 10.0

    queue = WorkQueue(work, clock=clock)
    queue.kick("a")
    await settle()
    clock.advance(10)
    await settle()
    assert runs == ["a", "a"]
    queue.pause()
    assert queue.tracked() == []
    assert clock.pending() == []
    queue.kick("b")
    queue.later("a", 0)
    clock.advance(100)
    await settle()
    assert queue.tracked() == []
    assert runs == ["a", "a"]
    queue.resume()
    queue.kick("b")
    await settle()
    assert runs == ["a", "a", "b"]
    await queue.close()
