"""A clock that moves only when a test moves it: the test double of ``contract.clock.Clock``, as
client-go's ``testingclock.FakeClock`` is of its clock. Timers fire, in the order they are
due, on the event loop that set them, when ``advance`` passes their time; a blocking
``sleep`` advances the clock by what it would have slept."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kuzk.contract.clock import Clock

START = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@dataclass(order=True)
class _Timer:
    due: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    loop: asyncio.AbstractEventLoop = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock(Clock):
    def __init__(self, start: datetime = START) -> None:
        self.start = start
        self.elapsed = 0.0
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed)

    def monotonic(self) -> float:
        return self.elapsed

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    async def wait(self, seconds: float) -> None:
        done = asyncio.get_running_loop().create_future()
        self.call_later(seconds, lambda: done.done() or done.set_result(None))
        await done

    def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer:
        loop = asyncio.get_running_loop()
        with self._lock:
            timer = _Timer(self.elapsed + max(delay, 0.0), next(self._seq), callback, loop)
            if delay <= 0:
                loop.call_soon(self._run, timer)
            else:
                heapq.heappush(self._timers, timer)
        return timer

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds`` and queue every timer that has come due."""
        with self._lock:
            self.elapsed += max(seconds, 0.0)
            while self._timers and self._timers[0].due <= self.elapsed:
                timer = heapq.heappop(self._timers)
                timer.loop.call_soon_threadsafe(self._run, timer)

    def pending(self) -> list[float]:
        """Seconds from now until each live timer is due, soonest first."""
        with self._lock:
            return sorted(t.due - self.elapsed for t in self._timers if not t.cancelled)

    @staticmethod
    def _run(timer: _Timer) -> None:
        if not timer.cancelled:
            timer.callback()


async def settle(rounds: int = 50) -> None:
    """Let the event loop run what is ready (tasks a fired timer started, and theirs), without
    waiting for any time to pass."""
    for _ in range(rounds):
        await asyncio.sleep(0)
