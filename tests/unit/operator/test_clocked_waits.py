"""The operator's waits read the one injected clock: a pause for a higher-priority peer lifts
when that peer's record expires, and a ledger fold that fails is tried again 1 s later,
then 2 s, until it lands. Time is a ManualClock moved by the tests: nothing here sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from kubernetes import client

from kuzk.contract import api
from kuzk.contract.ledger import Tally
from kuzk.operator.ledger_store import FOLD_BACKOFF, FoldQueue, LedgerStore
from kuzk.operator.peering import Peering, PeerWatch
from tests.manual_clock import ManualClock, settle


async def test_a_pause_for_a_peer_lifts_when_its_record_expires() -> None:
    clock = ManualClock()
    changes: list[bool] = []
    watch = PeerWatch(client.ApiClient(), Peering("kuzk", "me", 10), changes.append, clock)
    record = {"priority": 20, "lifetime": 60, "lastseen": api.format_time(clock.now())}
    watch.seen(None, {"me": {"priority": 10, "lifetime": 60}, "other": record})
    assert changes == [True]
    clock.advance(59)
    await settle()
    assert changes == [True], "the peer's record is still live"
    clock.advance(2)
    await settle()
    assert changes == [True, False]
    assert clock.pending() == []
    watch.stop()


class FlakyLedger(LedgerStore):
    """A ledger whose first ``failures`` folds fail as an unreachable API server does."""

    def __init__(self, clock: ManualClock, failures: int) -> None:
        super().__init__(client.ApiClient(), "kuzk", "ledger", set, clock)
        self.failures = failures
        self.tries: list[float] = []
        self.landed: list[str] = []

    def fold(self, entries: Sequence[tuple[str, Tally]], now: datetime | None = None) -> int:
        self.tries.append(self.clock.monotonic())
        if len(self.tries) <= self.failures:
            raise ConnectionRefusedError("apiserver unreachable")
        self.landed += [uid for uid, _ in entries]
        return len(entries)


async def until(predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """The fold runs in a thread: wait (on the wall clock) for it to answer."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


async def test_a_failed_fold_is_tried_again_with_backoff_until_it_lands() -> None:
    clock = ManualClock()
    store = FlakyLedger(clock, failures=2)
    folds = FoldQueue(store)
    folds.add("uid-a", Tally(stale_writes_rejected=1))
    await until(lambda: clock.pending() == [FOLD_BACKOFF.base], "the first retry on the clock")
    assert store.tries == [0.0]
    clock.advance(FOLD_BACKOFF.base)
    await until(lambda: clock.pending() == [2 * FOLD_BACKOFF.base], "the second, doubled")
    assert store.tries == [0.0, 1.0]
    folds.add("uid-b", Tally(stale_writes_rejected=2))
    clock.advance(2 * FOLD_BACKOFF.base)
    await until(lambda: not folds.pending, "the folds to land")
    assert store.tries == [0.0, 1.0, 3.0]
    assert sorted(store.landed) == ["uid-a", "uid-b"], "one batch, with what came meanwhile"
    assert clock.pending() == []
    await folds.close()

