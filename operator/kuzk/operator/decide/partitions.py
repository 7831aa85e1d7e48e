"""One partition's state machine, advanced from its status entry and the pods that exist.

The status entry is the only memory: ``attempt`` is a watermark (pods of older attempts were
already accounted for and are ignored), ``retries`` counts failures against
backoffLimitPerPartition and ``disruptions`` counts the retries that don't count. Pods at or
above the watermark are folded in attempt order, so a status write lost after a pod was
created (an operator killed between the two) is recovered from the pods themselves. What
follows an attempt that ended without a result is the policies' to say
(``kuzk.operator.decide.policies.retries`` and ``refused``); ``Partition.follow`` applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from kuzk.contract.api import (
    COMMITTING,
    DONE,
    FAILED,
    GPU,
    PENDING,
    PHASE_PENDING,
    STATES,
    TERMINAL_STATES,
)
from kuzk.operator.decide import ranges
from kuzk.operator.decide.actions import Event, partition_event
from kuzk.operator.decide.observe import Claim, Outcome, observe
from kuzk.operator.decide.policies.refused import POD_REFUSED, Backoff, after_invalid_input
from kuzk.operator.decide.policies.retries import (
    GiveUp,
    Retry,
    after_disruption,
    after_failure,
    after_lost_record,
)

# A partition the job's failure ends (``reason`` in its status entry).
FAILED_JOB = "JobFailed"
# A real proof's pod that succeeded without handing back its proof: a failed attempt.
NO_PROOF = "no usable result: the real prover's result carries no proof bytes"

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
    "proof",
    "refusals",
    "refused_at",
)
# What a live attempt's entry says of its progress: its stage, node, GPU worker and start. The
# pod and the lane's WorkerStatus say each of these first and at once (the status server and
# the dashboard show them from there); the job's status may trail them
# (``kuzk.operator.controller.STAGE_SECONDS``), so that a lane's every stage is not a write.
PROGRESS_KEYS = frozenset({"state", "node", "worker", "startedAt"})
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
    proof: str | None = None
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

    def follow(self, verdict: Retry | GiveUp | Backoff, now: str) -> list[Event]:
        """Apply a policy's verdict (``kuzk.operator.decide.policies``) at ``now``: a fresh attempt,
        the partition's failure, or the backoff of its refused pod. Returns its Event, if
        any."""
        if isinstance(verdict, Retry):
            self.next_attempt(verdict.attempt, counted=verdict.counted, reason=verdict.reason,
                              message=verdict.message)
        elif isinstance(verdict, GiveUp):
            self.fail(verdict.reason, verdict.message, now)
        else:
            self.refusals, self.refused_at = verdict.refusals, now
            self.reason, self.message, self.pod = POD_REFUSED, verdict.message, None
        return [verdict.event] if verdict.event is not None else []


def advance(
    part: Partition,
    pods: Mapping[int, Mapping[str, Any]],
    claims: Mapping[str, Claim],
    backoff_limit: int,
    now: str,
    *,
    real: bool = False,
) -> list[Event]:
    """Fold the partition's pods (by attempt) into its entry; return the transitions' events
    (its end's is the sync's, ``done_event``). A ``real`` proof's partition is done only with
    its proof bytes."""
    events: list[Event] = []
    for attempt in sorted(a for a in pods if a >= part.attempt):
        if part.terminal:
            break
        if attempt > part.attempt:
            events += part.follow(after_lost_record(part.index, part.attempt, attempt), now)
        pod = pods[attempt]
        part.pod = (pod.get("metadata") or {}).get("name")
        if part.reason == POD_REFUSED:  # asked again and created: the refusal is over
            part.reason = part.message = part.refusals = part.refused_at = None
        outcome = observe(pod, claims)
        if real and outcome.kind == "done" and outcome.proof is None:
            outcome = replace(outcome, kind="failed", message=NO_PROOF)
        events += _apply(part, outcome, backoff_limit, now)
    return events


def progress_only(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether job status ``after`` differs from ``before`` only in the progress of attempts
    live in both (``PROGRESS_KEYS``): nothing ended, failed, retried or was created, and no
    count, phase or condition changed. A job's first status is news once something happened
    (a pod bound, refused or ended): while it only says Pending with the pods asked for, it
    is progress too, as a job without a status is pending."""
    old, new = before.get("partitions") or [], after.get("partitions") or []
    if not before:
        return after.get("phase") == PHASE_PENDING and all(
            entry.get("state") == PENDING and not entry.get("reason") for entry in new)
    if len(old) != len(new) or _without(before, {"partitions"}) != _without(after, {"partitions"}):
        return False
    for was, now in zip(old, new, strict=True):
        if was == now:
            continue
        live = (was.get("state") not in TERMINAL_STATES and now.get("state") not in TERMINAL_STATES
                and was.get("attempt") == now.get("attempt"))
        if not live or _without(was, PROGRESS_KEYS) != _without(now, PROGRESS_KEYS):
            return False
    return True


def _without(entry: Mapping[str, Any], keys: frozenset[str] | set[str]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key not in keys}


def done_event(done: list[Partition]) -> list[Event]:
    """The PartitionDone Event of the partitions one sync saw done: one for all of them, as
    the Kubernetes event recorder aggregates similar events. An Event is an API write, and a
    job's partitions tend to end together (their pods' ends share a sync, which waits a moment
    for them)."""
    if not done:
        return []
    if len(done) == 1:
        (part,) = done
        text = f"done on node {part.node}"
        return [partition_event("Normal", "PartitionDone", part.index, part.attempt, text)]
    nodes = ", ".join(sorted({part.node or "unknown" for part in done}))
    indexes = ranges.compress(part.index for part in done)
    return [Event("Normal", "PartitionDone", f"partitions {indexes} done on {nodes}")]


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
        # Its Event is the sync's, one for every partition it saw done (``done_event``).
        part.state, part.commitment, part.proof = DONE, outcome.commitment, outcome.proof
        part.synth_ms, part.gpu_ms = outcome.synth_ms, outcome.gpu_ms
        part.finished_at = outcome.finished_at or now
        return []
    message = outcome.message or outcome.kind
    part.finished_at = outcome.finished_at or now
    verdict: Retry | GiveUp
    if outcome.kind == "invalid":
        verdict = after_invalid_input(part.index, part.attempt, message)
    elif outcome.kind == "disrupted":
        verdict = after_disruption(part.index, part.attempt, message)
    else:
        verdict = after_failure(part.index, part.attempt, part.retries, backoff_limit, message)
    return part.follow(verdict, now)
