"""backoffLimitPerPartition: which ended attempts are retried, and which retries count.

A partition whose attempt failed goes on as its next attempt while it has retries left (fewer
than backoffLimitPerPartition so far), and fails for good (BackoffLimitExceeded) once it has
none. An attempt that did nothing wrong (its pod disrupted: evicted, preempted, its node
lost, deleted while it ran, or gone without a trace) is retried without counting, and so is an
attempt whose record a lost status write took (a later attempt's pod exists: the partition
resumes at it). The verdicts here are applied to the partition's record by
``kuzk.operator.decide.partitions.Partition.follow``.
"""

from __future__ import annotations

from dataclasses import dataclass

from kuzk.operator.decide.actions import Event, partition_event

# Why a partition's attempt ended early (``reason`` in its status entry).
RETRIED_FAILURE = "Failed"
RETRIED_DISRUPTION = "Disrupted"
RETRIED_LOST = "AttemptRecordLost"
FAILED_BACKOFF = "BackoffLimitExceeded"
VANISHED = "disrupted: the pod disappeared"


@dataclass(frozen=True)
class Retry:
    """The partition goes on as ``attempt``: the attempts it skips count against the backoff
    limit (``counted``) or as disruptions. ``reason`` and ``message`` go in its status entry;
    ``event`` says so on the job, if anything does."""

    attempt: int
    counted: bool
    reason: str
    message: str
    event: Event | None = None


@dataclass(frozen=True)
class GiveUp:
    """The partition fails for good, with this reason and message, and the Event that says so."""

    reason: str
    message: str
    event: Event | None = None


def after_failure(index: int, attempt: int, retries: int, backoff_limit: int,
                  message: str) -> Retry | GiveUp:
    """A counted failure of partition ``index``'s ``attempt``, which had ``retries`` before."""
    if retries < backoff_limit:
        text = (
            f"failed: {message}; retrying as attempt {attempt + 1}"
            f" (retry {retries + 1} of {backoff_limit})"
        )
        event = partition_event("Warning", "PartitionRetried", index, attempt, text)
        return Retry(attempt + 1, True, RETRIED_FAILURE, message, event)
    text = f"failed after {retries} retries (backoffLimitPerPartition): {message}"
    event = partition_event("Warning", "PartitionFailed", index, attempt, text)
    return GiveUp(FAILED_BACKOFF, message, event)


def after_disruption(index: int, attempt: int, message: str) -> Retry:
    """An attempt that ended through no fault of its own (``VANISHED``: its pod is gone
    without an outcome): the next attempt, not counted."""
    text = f"{message}; retrying as attempt {attempt + 1}, not counted as a failure"
    event = partition_event("Normal", "PartitionRetried", index, attempt, text)
    return Retry(attempt + 1, False, RETRIED_DISRUPTION, message, event)


def after_lost_record(index: int, attempt: int, found: int) -> Retry:
    """The pod of a later attempt, ``found``, exists though ``attempt`` left no record (the
    status write after its create was lost): the partition resumes at ``found``, not
    counted."""
    text = f"attempt {found} exists but attempt {attempt} left no record"
    event = partition_event("Normal", "PartitionRetried", index, attempt, f"{text}; resuming")
    return Retry(found, False, RETRIED_LOST, text, event)
