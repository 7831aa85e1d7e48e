"""What is refused: a partition pod the API server refuses, and input the prover refuses.

An answer to a pod create is a refusal (``refusal``) when the API server refuses the pod: 400
and 422 invalid, 403 forbidden (Pod Security admission, a ResourceQuota, RBAC). An invalid pod
fails its partition (PodInvalid): the same manifest would be refused again. Any other refusal
leaves the partition pending (PodRefused) and its pod is asked for again after a backoff that
doubles with each refusal of the attempt, from 5 s up to 5 min; a refusal that comes while
that backoff runs answers a create made from a stale view of the job (another replica's, a
lagging cache's) and is not counted again. A prover that exits with code 2 (invalid input)
fails its partition, never retried: the same input fails again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kuzk.contract.api import parse_time
from kuzk.contract.pod import INVALID_INPUT_EXIT_CODE
from kuzk.operator.decide.actions import Event, Refusal, partition_event
from kuzk.operator.decide.policies.retries import GiveUp

POD_REFUSED = "PodRefused"
FAILED_POD_INVALID = "PodInvalid"
FAILED_INVALID_INPUT = "InvalidInput"
REFUSAL_BACKOFF_S = (5.0, 300.0)  # the first wait, doubling per refusal up to the last
# A restarting API server answers 403 with this until its admission plugins have synced.
NOT_READY = "not yet ready to handle request"


@dataclass(frozen=True)
class Backoff:
    """The partition stays pending (PodRefused, with ``message``): this is its attempt's
    ``refusals``-th refusal, and its pod is asked for again after ``refusal_backoff``."""

    refusals: int
    message: str
    event: Event


def refusal(status: int, message: str) -> Refusal | None:
    """The Refusal an error answer to a pod create is, or None for an outage to retry at once
    (any other status, or the 403 of an API server that is not ready yet)."""
    if status in (400, 403, 422) and NOT_READY not in message:
        return Refusal(status, message)
    return None


def refusal_backoff(refusals: int) -> float:
    """The wait after the ``refusals``-th refusal of one attempt's pod."""
    first, most = REFUSAL_BACKOFF_S
    return float(min(first * 2 ** (refusals - 1), most))


def retry_after(reason: str | None, refusals: int | None, refused_at: str | None,
                now: datetime) -> float:
    """Seconds until a partition with this reason, count of refusals and time of the last
    may ask for its pod again (0: now, or its pod was never refused)."""
    if reason != POD_REFUSED or not refused_at or not refusals:
        return 0.0
    due = parse_time(refused_at) + timedelta(seconds=refusal_backoff(refusals))
    return max((due - now).total_seconds(), 0.0)


def after_refusal(index: int, attempt: int, refusals: int, answer: Refusal) -> GiveUp | Backoff:
    """The API server refused the pod of partition ``index``'s ``attempt``, refused
    ``refusals`` times before: for good (400, 422), or for now."""
    text = f"the API server refused its pod ({answer.code}): {answer.message}"
    if answer.code in (400, 422):
        event = partition_event("Warning", "PartitionFailed", index, attempt,
                                f"failed, not retried: {text}")
        return GiveUp(FAILED_POD_INVALID, text, event)
    wait = refusal_backoff(refusals + 1)
    event = partition_event("Warning", "FailedCreate", index, attempt,
                            f"{text}; asking again in {wait:.0f}s")
    return Backoff(refusals + 1, text, event)


def after_invalid_input(index: int, attempt: int, message: str) -> GiveUp:
    """The prover refused its input (``INVALID_INPUT_EXIT_CODE``): the partition fails, not
    retried."""
    text = (f"failed with exit code {INVALID_INPUT_EXIT_CODE} (invalid input), not retried:"
            f" {message}")
    event = partition_event("Warning", "PartitionFailed", index, attempt, text)
    return GiveUp(FAILED_INVALID_INPUT, message, event)


def pods_refused(refused: list[tuple[int, str | None]]) -> str | None:
    """The PodsRefused condition's message from the pending partitions whose pods are refused
    now (index and message, in order); None when there are none."""
    if not refused:
        return None
    (index, message), more = refused[0], len(refused) - 1
    also = f" (and {more} more partitions)" if more else ""
    return f"partition {index}{also}: {message}"
