"""How kuzk tries again: one backoff rule (``Backoff``) and one rule of which failures a later
try may get past (``is_transient``).

Every loop that tries again waits ``Backoff.delay`` with parameters of its own, named where the loop
is: the operator's work queue (``workqueue.RUN_BACKOFF``), the WorkerStatus writes through 409
conflicts (``workerstatus.writes.CONFLICT_BACKOFF``), the ledger's folds
(``ledger_store.FOLD_BACKOFF``), the peering watch (``peering.PEERING_BACKOFF``), the list+watch
streams (``listwatch.WATCH_BACKOFF``) and the prover's lane writes through API outages
(``kuzk_prover.outage.WRITE_BACKOFF``). When each gives up, and on which errors it tries again at
all, stays the loop's own rule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: ``base`` seconds after the first failure, doubled after each next
    one up to ``cap``. ``jitter`` is the share of each delay drawn at random, so that many
    retries spread out: 0 waits exactly, 0.5 anywhere in the upper half, 1 anywhere from 0."""

    base: float
    cap: float
    jitter: float = 0.0

    def delay(self, failures: int) -> float:
        """Seconds to wait after failure number ``failures`` (from 1) before the next try."""
        ceiling = min(self.cap, self.base * 2.0 ** max(failures - 1, 0))
        if not self.jitter:
            return ceiling
        return random.uniform(ceiling * (1 - self.jitter), ceiling)


def is_transient(error: BaseException) -> bool:
    """Whether a later try of the same request may succeed: no connection (urllib3's errors,
    OSError, TimeoutError among them), no answer (status 0), or an API server that answers 5xx
    or 429 (restarting, overloaded). Any other answer is final for that request, a 409
    Conflict included: what the request was decided from is stale, and only a fresh read and
    decision go on (the guarded writes' own loop, ``workerstatus.writes.guarded_write``)."""
    if isinstance(error, ApiException):
        code = int(error.status or 0)
        return code in (0, 429) or code >= 500
    return isinstance(error, HTTPError | OSError)
