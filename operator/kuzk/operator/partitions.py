"""One partition's state machine, advanced from its status entry and the pods that exist.

The status entry is the only memory: ``attempt`` is a watermark (pods of older attempts were
already accounted for and are ignored), ``retries`` counts failures against
backoffLimitPerPartition and ``disruptions`` counts the retries that don't count. Pods at or
above the watermark are folded in attempt order, so a status write lost after a pod was
created (an operator killed between the two) is recovered from the pods themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Literal

from kuzk.contract.api import (
    COMMITTING,
    DONE,
    FAILED,
    GPU,
    PENDING,
    STATES,
    TERMINAL_STATES,
    parse_time,
)
from kuzk.contract.pod import INVALID_INPUT_EXIT_CODE
from kuzk.operator.actions import Event
from kuzk.operator.observe import Claim, Outcome, observe

# Why a partition's attempt ended early (``reason`` in its status entry).
RETRIED_FAILURE = "Failed"
RETRIED_DISRUPTION = "Disrupted"
RETRIED_SUSPEND = "Suspended"
RETRIED_LOST = "AttemptRecordLost"
FAILED_INVALID_INPUT = "InvalidInput"
FAILED_BACKOFF = "BackoffLimitExceeded"
FAILED_JOB = "JobFailed"
FAILED_POD_INVALID = "PodInvalid"
# The API server refused the attempt's pod for now (403: a quota, Pod Security admission):
# the partition stays pending and its pod is asked for again after a backoff.
POD_REFUSED = "PodRefused"
REFUSAL_BACKOFF_S = (5.0, 300.0)  # the first wait, doubling per refusal up to the last

# Attempt-scoped fields: a new attempt starts without them.
_ATTEMPT_FIELDS = (
    "pod",
    "node",
    "worker",
    "synth_ms",
    "gpu_ms",
    "started_at",
    "finished_at",
    "commitment",
    "refusals",
    "refused_at",
)
_STATUS_KEYS = {
    "synth_ms": "synthMs",
    "gpu_ms": "gpuMs",
    "started_at": "startedAt",
    "finished_at": "finishedAt",
    "refused_at": "refusedAt",
}


@dataclass
class Partition:
    """A partition's status entry, as a mutable record while one reconcile advances it."""

    index: int
    state: str = PENDING
    attempt: int = 1
    retries: int = 0
    disruptions: int = 0
    pod: str | None = None
    node: str | None = None
    worker: str | None = None
    synth_ms: int | None = None
    gpu_ms: int | None = None
    started_at: str | None = None
    finished_at: str | None = None
    commitment: str | None = None
    reason: str | None = None
    message: str | None = None
    refusals: int | None = None
    refused_at: str | None = None

    @classmethod
    def from_status(cls, index: int, entry: Mapping[str, Any] | None) -> Partition:
        """Load an entry of ``status.partitions`` (or start fresh without one)."""
        entry = entry or {}
        values = {
            f.name: entry.get(_STATUS_KEYS.get(f.name, f.name))
            for f in fields(cls)
            if f.name != "index"
        }
        part = cls(index, **{k: v for k, v in values.items() if v is not None})
        if part.state not in STATES:
            part.state = PENDING
        return part

    def to_status(self) -> dict[str, Any]:
        """The entry for ``status.partitions`` (unset fields left out)."""
        entry = {_STATUS_KEYS.get(f.name, f.name): getattr(self, f.name) for f in fields(self)}
        return {key: value for key, value in entry.items() if value is not None}

    @property
    def terminal(self) -> bool:
        """Whether the partition is done or failed for good."""
        return self.state in TERMINAL_STATES

    def next_attempt(self, attempt: int, *, counted: bool, reason: str, message: str) -> None:
        """Move to a fresh attempt: counted against the backoff limit, or as a disruption."""
        skipped = attempt - self.attempt
        if counted:
            self.retries += skipped
        else:
            self.disruptions += skipped
        self.attempt, self.state, self.reason, self.message = attempt, PENDING, reason, message
        for name in _ATTEMPT_FIELDS:
            setattr(self, name, None)

    def fail(self, reason: str, message: str, now: str) -> None:
        """End the partition as failed."""
        self.state, self.reason, self.message = FAILED, reason, message
        self.finished_at = self.finished_at or now

    def refused(self, code: int, message: str, now: str) -> Event:
        """The API server refused this attempt's pod: for good (400, 422: the same manifest
        is refused again), the partition fails; otherwise it stays pending and the pod is
        asked for again after ``retry_after``."""
        text = f"the API server refused its pod ({code}): {message}"
        if code in (400, 422):
            self.fail(FAILED_POD_INVALID, text, now)
            return _event("Warning", "PartitionFailed", self, f"failed, not retried: {text}")
        self.refusals = (self.refusals or 0) + 1
        self.refused_at, self.reason, self.message, self.pod = now, POD_REFUSED, text, None
        wait = refusal_backoff(self.refusals)
        return _event("Warning", "FailedCreate", self, f"{text}; asking again in {wait:.0f}s")

    def retry_after(self, now: datetime) -> float:
        """Seconds until a refused pod may be asked for again (0: now, or never refused)."""
        if self.reason != POD_REFUSED or not self.refused_at or not self.refusals:
            return 0.0
        due = parse_time(self.refused_at) + timedelta(seconds=refusal_backoff(self.refusals))
        return max((due - now).total_seconds(), 0.0)


def refusal_backoff(refusals: int) -> float:
    """The wait after the ``refusals``-th refusal of one attempt's pod."""
    first, most = REFUSAL_BACKOFF_S
    return float(min(first * 2 ** (refusals - 1), most))


def advance(
    part: Partition,
    pods: Mapping[int, Mapping[str, Any]],
    claims: Mapping[str, Claim],
    backoff_limit: int,
    now: str,
) -> list[Event]:
    """Fold the partition's pods (by attempt) into its entry; return the transitions' events."""
    events: list[Event] = []
    for attempt in sorted(a for a in pods if a >= part.attempt):
        if part.terminal:
            break
        if attempt > part.attempt:
            text = f"attempt {attempt} exists but attempt {part.attempt} left no record"
            events.append(_event("Normal", "PartitionRetried", part, f"{text}; resuming"))
            part.next_attempt(attempt, counted=False, reason=RETRIED_LOST, message=text)
        pod = pods[attempt]
        part.pod = (pod.get("metadata") or {}).get("name")
        if part.reason == POD_REFUSED:  # asked again and created: the refusal is over
            part.reason = part.message = part.refusals = part.refused_at = None
        events += _apply(part, observe(pod, claims), backoff_limit, now)
    return events


def _apply(part: Partition, outcome: Outcome, backoff_limit: int, now: str) -> list[Event]:
    part.node = outcome.node or part.node
    part.worker = outcome.worker or part.worker
    part.started_at = outcome.started_at or part.started_at
    if outcome.kind == "live":
        # No event: a partition's start is in its status and in its pod's own events.
        # Events are API writes, spent on what a reader must not miss (issue 12's budget).
        state = max(part.state, outcome.state, key=STATES.index)
        # A partition its lane no longer shows in the GPU phase (the lane gave it up, or left
        # before its pod ended) is past it: in gpu only while it holds the GPU.
        part.state = COMMITTING if state == GPU and outcome.state != GPU else state
        return []
    if outcome.kind == "done":
        part.state, part.commitment = DONE, outcome.commitment
        part.synth_ms, part.gpu_ms = outcome.synth_ms, outcome.gpu_ms
        part.finished_at = outcome.finished_at or now
        return [_event("Normal", "PartitionDone", part, f"done on node {part.node}")]
    message = outcome.message or outcome.kind
    part.finished_at = outcome.finished_at or now
    if outcome.kind == "invalid":
        part.fail(FAILED_INVALID_INPUT, message, now)
        text = (f"failed with exit code {INVALID_INPUT_EXIT_CODE} (invalid input), not retried:"
                f" {message}")
        return [_event("Warning", "PartitionFailed", part, text)]
    if outcome.kind == "disrupted":
        text = f"{message}; retrying as attempt {part.attempt + 1}, not counted as a failure"
        event = _event("Normal", "PartitionRetried", part, text)
        part.next_attempt(
            part.attempt + 1, counted=False, reason=RETRIED_DISRUPTION, message=message
        )
        return [event]
    if part.retries < backoff_limit:
        text = (
            f"failed: {message}; retrying as attempt {part.attempt + 1}"
            f" (retry {part.retries + 1} of {backoff_limit})"
        )
        event = _event("Warning", "PartitionRetried", part, text)
        part.next_attempt(part.attempt + 1, counted=True, reason=RETRIED_FAILURE, message=message)
        return [event]
    part.fail(FAILED_BACKOFF, message, now)
    text = f"failed after {part.retries} retries (backoffLimitPerPartition): {message}"
    return [_event("Warning", "PartitionFailed", part, text)]


def _event(kind: Literal["Normal", "Warning"], reason: str, part: Partition, text: str) -> Event:
    return Event(kind, reason, f"partition {part.index} attempt {part.attempt} {text}")
