"""The operator's clock: runs are serialized and coalesced per key, failures are retried with
capped, jittered backoff until success, ``Gone`` forgets a key, and a paused clock is still."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable

import pytest

from kuzk.clock import Gone, WorkQueue, backoff


async def wait_for_async(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Yield to the loop until ``predicate()`` holds; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout:.0f}s waiting for {what}"
            raise TimeoutError(msg)
        await asyncio.sleep(0.005)


FAST = {"backoff_base": 0.01, "backoff_cap": 0.05}


def test_backoff_grows_is_capped_and_jittered() -> None:
    first = [backoff(1, base=0.5, cap=8) for _ in range(200)]
    late = [backoff(12, base=0.5, cap=8) for _ in range(200)]
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

    queue = WorkQueue(work, **FAST)
    queue.kick("a")
    await wait_for_async(lambda: runs == ["a"], 5, "first run")
    for _ in range(20):
        queue.kick("a")
    release.set()
    await wait_for_async(lambda: not queue.scheduled("a"), 5, "queue idle")
    assert runs == ["a", "a"]
    assert queue.tracked() == []


async def test_failures_are_retried_until_success_and_the_key_always_has_a_look() -> None:
    calls = 0
    looks: list[bool] = []

    async def work(key: Hashable) -> float | None:
        nonlocal calls
        calls += 1
        looks.append(queue.scheduled(key))
        if calls < 6:
            raise ConnectionError("apiserver unreachable")
        return 60.0

    queue = WorkQueue(work, **FAST)
    queue.kick("job")
    await wait_for_async(lambda: calls == 6, 5, "six runs")
    assert queue.failures_total == 5
    assert all(looks)
    assert queue.scheduled("job")  # the next look (60 s) is on the clock
    await queue.close()


async def test_an_unexpected_error_is_retried_too(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def work(key: Hashable) -> float | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise KeyError("bug")
        return None

    queue = WorkQueue(work, **FAST)
    queue.kick("job")
    await wait_for_async(lambda: calls == 2, 5, "retry after a bug")
    assert "retry 1" in caplog.text


async def test_gone_forgets_the_key() -> None:
    async def work(key: Hashable) -> float | None:
        raise Gone

    queue = WorkQueue(work, **FAST)
    queue.later("job", 0.01)
    await wait_for_async(lambda: not queue.tracked(), 5, "key forgotten")
    assert not queue.scheduled("job")


async def test_later_keeps_the_sooner_look() -> None:
    fired: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def work(key: Hashable) -> float | None:
        fired.append(loop.time() - start)
        return None

    queue = WorkQueue(work, **FAST)
    queue.later("k", 0.05)
    queue.later("k", 30)
    await wait_for_async(lambda: len(fired) == 1, 5, "the sooner look")
    assert fired[0] < 5


async def test_a_paused_clock_drops_its_timers_and_ignores_kicks() -> None:
    runs: list[Hashable] = []

    async def work(key: Hashable) -> float | None:
        runs.append(key)
        return 0.01

    queue = WorkQueue(work, **FAST)
    queue.kick("a")
    await wait_for_async(lambda: len(runs) >= 2, 5, "timer runs")
    queue.pause()
    await wait_for_async(lambda: not queue.tracked(), 5, "clock empty")
    count = len(runs)
    queue.kick("b")
    queue.later("a", 0)
    assert not queue.tracked()
    assert len(runs) == count
    queue.resume()
    queue.kick("b")
    await wait_for_async(lambda: "b" in runs, 5, "runs after resume")
    await queue.close()
