"""The operator's work queue: keyed work that is serialized, coalesced, retried and never
dropped, on the operator's clock (``kuzk.contract.clock``).

It is the rate-limited work queue of the Kubernetes controllers, on the event loop. Every key
(a job, an orphaned pod, a WorkerStatus's sweep) has at most one run in flight; a kick during a
run makes one more run after it, so a burst of events costs two runs, not one per event. A run
returns how long until its key needs another look (None: no look needed) or raises ``Gone``
when its object no longer exists, which drops everything held for the key. Any other exception
is a failed run: it is logged on one line and retried with capped, jittered exponential
backoff until it succeeds or its object is gone, so a deadline, a TTL, a grace period or a
sweep always fires eventually, even across an API server outage.

Kopf timers would give the same clock, but they put a finalizer on every object they run
for, which would leave ProofJobs and WorkerStatuses undeletable once the operator is
uninstalled. While the operator is paused by a higher-priority peer the queue is stopped:
timers are cancelled and kicks ignored; on resume the streams list every object again and
the runtime kicks every key again once they have (``kuzk.operator.runtime.Runtime.on_listed``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from kuzk.contract.clock import SYSTEM, Clock, Timer
from kuzk.contract.retry import Backoff, is_transient

log = logging.getLogger("kuzk.operator.workqueue")

# A failed run's next try: from 0.5 s doubling to 8 s, anywhere in the upper half of that (so
# retries of many keys spread out but never come much sooner than due).
RUN_BACKOFF = Backoff(base=0.5, cap=8.0, jitter=0.5)


class Gone(Exception):
    """The key's object no longer exists: forget the key."""


@dataclass
class _Entry:
    timer: Timer | None = None
    due: float | None = None
    task: asyncio.Task[None] | None = None
    dirty: bool = False
    failures: int = 0


class WorkQueue:
    """Runs ``work(key)`` for kicked and due keys; see the module docstring."""

    def __init__(
        self,
        work: Callable[[Hashable], Awaitable[float | None]],
        *,
        describe: Callable[[Hashable], str] = str,
        clock: Clock = SYSTEM,
    ) -> None:
        self._work = work
        self._clock = clock
        self._describe = describe
        self._entries: dict[Hashable, _Entry] = {}
        self._paused = False
        self._closed = False
        self.failures_total = 0
        self.runs_total = 0

    # --- what callers do -------------------------------------------------------------------
    def kick(self, key: Hashable) -> None:
        """Look at ``key`` now (after the run in flight, if any)."""
        self.later(key, 0.0)

    def later(self, key: Hashable, delay: float) -> None:
        """Look at ``key`` in ``delay`` seconds, unless a look is already due sooner."""
        if self._paused or self._closed:
            return
        entry = self._entries.setdefault(key, _Entry())
        if entry.task is not None and delay <= 0:
            entry.dirty = True
            return
        due = self._clock.monotonic() + max(delay, 0.0)
        if entry.due is not None and entry.due <= due:
            return
        self._arm(key, entry, due)

    def forget(self, key: Hashable) -> None:
        """Drop the key's timer and state (its object is gone); a run in flight finishes."""
        entry = self._entries.pop(key, None)
        if entry is not None and entry.timer is not None:
            entry.timer.cancel()

    def pause(self) -> None:
        """Stop the queue: cancel every timer and ignore kicks until ``resume``."""
        self._paused = True
        for key in list(self._entries):
            entry = self._entries[key]
            if entry.timer is not None:
                entry.timer.cancel()
            entry.timer, entry.due, entry.dirty = None, None, False
            if entry.task is None:
                del self._entries[key]

    def resume(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def scheduled(self, key: Hashable) -> bool:
        """Whether ``key`` has a run in flight or a look on the clock."""
        entry = self._entries.get(key)
        return entry is not None and (entry.task is not None or entry.timer is not None)

    def tracked(self) -> list[Hashable]:
        """Every key the queue holds state for."""
        return list(self._entries)

    async def close(self) -> None:
        """Cancel every timer and wait for the runs in flight."""
        self._closed = True
        tasks = [e.task for e in self._entries.values() if e.task is not None]
        for entry in self._entries.values():
            if entry.timer is not None:
                entry.timer.cancel()
        self._entries.clear()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- the machinery ---------------------------------------------------------------------
    def _arm(self, key: Hashable, entry: _Entry, due: float) -> None:
        if entry.timer is not None:
            entry.timer.cancel()
        entry.due = due
        entry.timer = self._clock.call_later(
            due - self._clock.monotonic(), lambda: self._fire(key))

    def _fire(self, key: Hashable) -> None:
        entry = self._entries.get(key)
        if entry is None or self._paused or self._closed:
            return
        entry.timer, entry.due = None, None
        if entry.task is not None:
            entry.dirty = True
            return
        entry.task = asyncio.get_running_loop().create_task(
            self._run(key, entry), name=f"kuzk sync {self._describe(key)}"
        )

    async def _run(self, key: Hashable, entry: _Entry) -> None:
        delay: float | None = None
        try:
            while True:
                entry.dirty = False
                self.runs_total += 1
                try:
                    delay = await self._work(key)
                except Gone:
                    self.forget(key)
                    return
                except Exception as error:
                    entry.failures += 1
                    self.failures_total += 1
                    delay = RUN_BACKOFF.delay(entry.failures)
                    self._log_failure(key, entry.failures, delay, error)
                    break
                entry.failures = 0
                if not entry.dirty:
                    break
        finally:
            entry.task = None
        if self._entries.get(key) is not entry or self._paused or self._closed:
            return
        entry.dirty = False
        if delay is not None:
            due = self._clock.monotonic() + max(delay, 0.0)
            if entry.due is None or due < entry.due:
                self._arm(key, entry, due)
        if entry.timer is None:
            del self._entries[key]

    def _log_failure(self, key: Hashable, failures: int, delay: float, error: Exception) -> None:
        what = self._describe(key)
        # An API server's answer, whatever its status, or a lost connection: expected in a
        # cluster, worth one line and no traceback.
        if isinstance(error, ApiException) or is_transient(error):
            log.warning(
                "%s failed (%s: %s); retry %d in %.1f s",
                what, type(error).__name__, _first_line(error), failures, delay,
            )
        else:
            log.error("%s failed; retry %d in %.1f s", what, failures, delay, exc_info=error)


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else ""
