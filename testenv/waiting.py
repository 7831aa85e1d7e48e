"""Condition waits for tests: poll a predicate until it holds, with a timeout that names
what was awaited. Polling a condition is the only pause tests use; none sleeps to sync."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
    """Return the first truthy value of ``predicate()``; raise TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: T = predicate()
    while not last:
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})"
            raise TimeoutError(msg)
        time.sleep(interval)
        last = predicate()
    return last
