"""How the prover's lane writes ride out an API server it cannot reach (``persist``): each
write is tried again with backoff (``WRITE_BACKOFF``) through transient errors (refused
connections, 5xx, 429, and a 403 after one of those) for its outage budget
(``OUTAGE_BUDGET_S`` by default), and while its WorkerStatus or Node is not there yet for a
time of its own; then it raises what the last try raised, one of ``WRITE_ERRORS``, which
``reporter.ProverReporter`` logs and proves on without: a status write never fails the
proof."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kuzk.contract.retry import Backoff, is_transient
from kuzk.contract.workerstatus.writes import WorkerStatusMissing, WorkerWriteConflict
from kuzk_prover.termination import brief

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long one write of the prover keeps trying through an API outage (refused connections,
# 5xx, 429) before the prover proves on without status; its backoff between tries (0.2 s,
# doubling to 2 s).
OUTAGE_BUDGET_S = 30.0
WRITE_BACKOFF = Backoff(base=0.2, cap=2.0)
# What a write that ``persist`` gave up on raises: logged, never raised past the reporter (the
# operator's release and sweep repair).
WRITE_ERRORS = (ApiException, WorkerStatusMissing, WorkerWriteConflict, HTTPError, OSError)


class Quiet(Exception):
    """The reporter went quiet while a stage write was waiting to try again."""


def _forbidden(error: BaseException) -> bool:
    return isinstance(error, ApiException) and error.status == 403


def persist(
    what: str,
    write: Callable[[], T],
    *,
    node: str,
    budget: float = OUTAGE_BUDGET_S,
    missing_s: float = 0.0,
    quiet: threading.Event | None = None,
) -> T:
    """``write()`` (``what``, on ``node``, for the log), tried again with backoff while the
    WorkerStatus is missing (for ``missing_s``) and through transient errors (for ``budget``);
    then what the last try raised. With ``quiet``, raises Quiet as soon as it is set."""
    start, tries, failures = time.monotonic(), 0, 0
    while True:
        delay = WRITE_BACKOFF.delay(tries + 1)
        try:
            result = write()
        except WorkerStatusMissing:
            if time.monotonic() - start + delay > missing_s:
                raise
            log.info("WorkerStatus or node %s not there yet; %s again", node, what)
        except (ApiException, HTTPError, OSError) as error:
            # A kube-apiserver that has just come back may answer 403 until its RBAC
            # caches have synced (kubernetes#121635), so after a transient failure a 403
            # is tried again too; a first 403 is a real refusal.
            again = is_transient(error) or (failures > 0 and _forbidden(error))
            if not again or time.monotonic() - start + delay > budget:
                raise
            if failures == 0:
                log.info(
                    "%s on %s: %s; trying again for up to %g s", what, node, brief(error), budget
                )
            failures += 1
        else:
            if failures:
                log.info("%s on %s went through after %d failed tries", what, node, failures)
            return result
        if quiet is None:
            time.sleep(delay)
        elif quiet.wait(delay):
            raise Quiet
        tries += 1
