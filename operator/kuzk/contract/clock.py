"""kuzk's one source of time. ``Clock`` is where kuzk reads the time: the wall clock (UTC) that
timestamps and deadlines are compared with, a monotonic count for budgets and timers, sleeping,
and timers on the running event loop. ``SYSTEM`` reads the machine's clocks; the operator's
parts (its work queue, ``kuzk.operator.workqueue``, the controller, peering, the ledger's
retries) and the WorkerStatus write protocol take it as an argument, so that a test can give
them a clock it moves by hand and check a deadline, a backoff or a lease without sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol


class Timer(Protocol):
    """A callback on the clock; ``asyncio.TimerHandle`` is one."""

    def cancel(self) -> None: ...


class Clock:
    """The machine's clocks. Subclass it to move time by hand (``tests/manual_clock.py``)."""

    def now(self) -> datetime:
        """The wall clock, in UTC: what API timestamps and deadlines are compared with."""
        return datetime.now(UTC)

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back: for budgets and timers."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        """Block the calling thread (the WorkerStatus writes' backoff)."""
        time.sleep(max(seconds, 0.0))

    async def wait(self, seconds: float) -> None:
        """Let the event loop run for ``seconds``."""
        await asyncio.sleep(max(seconds, 0.0))

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Call ``callback`` on the running event loop in ``delay`` seconds."""
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback)


SYSTEM = Clock()
