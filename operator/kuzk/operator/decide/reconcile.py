"""The level-triggered ProofJob reconciler: from what exists now to what should exist.

``reconcile`` reads the ProofJob (its spec and its previous status, the only durable memory),
the pods it controls and the WorkerStatuses, and returns a Decision: actions and the complete
new status. It is pure and never relies on having seen an earlier event, so an operator that
restarts mid-job converges from a fresh list, and running it twice on the same inputs after
its actions were applied decides nothing new.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kuzk.contract import api, proofjob
from kuzk.contract.api import (
    DONE,
    FAILED,
    FINISHED_PHASES,
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    PHASE_SUSPENDED,
    STARTED_STATES,
)
from kuzk.operator.decide import actions, ranges
from kuzk.operator.decide.actions import Action, Decision, Event, Refusal
from kuzk.operator.decide.conditions import REJECTED, conditions
from kuzk.operator.decide.observe import (
    controlled_by,
    is_deleting,
    is_finished,
    release_action,
    worker_claims,
)
from kuzk.operator.decide.partitions import FAILED_JOB, Partition, advance, done_event
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from kuzk.operator.decide.policies import deadline, suspend, ttl
from kuzk.operator.decide.policies.refused import (
    POD_REFUSED,
    after_refusal,
    pods_refused,
    retry_after,
)
from kuzk.operator.decide.policies.retries import VANISHED, after_disruption

Pod = Mapping[str, Any]
Failure = tuple[str, str]


def reconcile(
    job: Mapping[str, Any],
    pods: Iterable[Pod],
    workers: Iterable[Mapping[str, Any]],
    now: datetime,
    *,
    settings: PodSettings,
    refused: Mapping[int, Refusal] | None = None,
) -> Decision:
    """Decide the actions and the new status of one ProofJob.

    ``pods`` are the pods found through the job's label selector (pods controlled by another
    object, such as a deleted namesake job, are ignored); ``workers`` are the WorkerStatus
    objects; ``settings`` shape the pods to create. ``refused`` holds, by partition, what the
    API server answered when the applier asked for the current attempt's pod and was refused
    (the applier then decides again with it, so the refusal is recorded in the status).
    """
    spec = proofjob.resolve(job)
    prev: Mapping[str, Any] = job.get("status") or {}
    stamp = api.format_time(now)
    prev_phase = prev.get("phase")
    finished = prev_phase in FINISHED_PHASES
    parts = _load_partitions(prev, spec.partitions)
    by_part, strays = _pods_by_partition(pods, spec)
    events: list[Event] = []
    if not finished:
        events += _advance_all(parts, by_part, workers, spec, stamp)
        for index, refusal in sorted((refused or {}).items()):
            part = parts[index]
            # A refusal while the last one's backoff runs answers a create made from a stale
            # view of the job (another replica's, a lagging cache's): it is not counted again.
            if (not part.terminal and part.attempt not in by_part.get(index, {})
                    and not retry_after(part.reason, part.refusals, part.refused_at, now)):
                verdict = after_refusal(part.index, part.attempt, part.refusals or 0, refusal)
                events += part.follow(verdict, stamp)
    rejected = None if finished else settings.rejections(job)
    # A job's start is its first sync's moment; for one never written, its creation, as its
    # first status may wait (``partitions.progress_only``) and its deadline must not.
    started = (stamp if prev else (job.get("metadata") or {}).get("creationTimestamp") or stamp)
    phase, failure, start_time = _judge(prev, parts, spec, now, started, rejected)
    _stop_partitions(parts, by_part, phase, failure, stamp)
    wanted = phase in (PHASE_PENDING, PHASE_RUNNING) and not is_deleting(job)
    creates, refusal_waits = _creates(parts, by_part, spec, settings, now) if wanted else ([], [])
    active = sum(1 for part in parts if wanted and not part.terminal)
    status = _status(spec, prev, parts, phase, failure, start_time, active, stamp)
    events += _job_events(prev_phase, phase, failure, status)
    to_apply: list[Action] = [*creates, *_pod_cleanup(by_part, strays, parts, wanted, phase, now)]
    to_apply += events
    waits = [*refusal_waits, *_grace_waits([*strays, *_all(by_part)], now)]
    if (left := deadline.seconds_left(spec, phase, status["startTime"], now)) is not None:
        waits.append(left)
    expiry = ttl.decide(spec, status, now)
    if isinstance(expiry, actions.DeleteJob):
        to_apply.append(expiry)
    elif expiry is not None:
        waits.append(expiry)
    requeue = min(waits) if waits else None
    return Decision(status=status, actions=to_apply, requeue_after=requeue)


def _load_partitions(prev: Mapping[str, Any], count: int) -> list[Partition]:
    entries = {
        entry.get("index"): entry
        for entry in prev.get("partitions") or []
        if isinstance(entry, Mapping)
    }
    return [Partition.from_status(index, entries.get(index)) for index in range(count)]


def _pods_by_partition(
    pods: Iterable[Pod], spec: proofjob.JobSpec
) -> tuple[dict[int, dict[int, Pod]], list[Pod]]:
    """Group the job's own pods by partition and attempt; the rest of its pods are strays."""
    by_part: dict[int, dict[int, Pod]] = {}
    strays: list[Pod] = []
    for pod in pods:
        if not controlled_by(pod, spec.uid):
            continue
        identity = api.pod_partition(pod)
        if identity is None or identity[0] >= spec.partitions:
            strays.append(pod)
        else:
            by_part.setdefault(identity[0], {})[identity[1]] = pod
    return by_part, strays


def _all(by_part: Mapping[int, Mapping[int, Pod]]) -> list[Pod]:
    return [pod for attempts in by_part.values() for pod in attempts.values()]


def _advance_all(
    parts: list[Partition],
    by_part: Mapping[int, Mapping[int, Pod]],
    workers: Iterable[Mapping[str, Any]],
    spec: proofjob.JobSpec,
    stamp: str,
) -> list[Event]:
    claims = worker_claims(workers)
    events: list[Event] = []
    done: list[Partition] = []
    for part in parts:
        attempts = by_part.get(part.index, {})
        was_done = part.state == DONE
        events += advance(part, attempts, claims, spec.backoff_limit_per_partition, stamp,
                          real=spec.filecoin is not None)
        if part.state == DONE and not was_done:
            done.append(part)
        if part.state in STARTED_STATES and part.attempt not in attempts:
            # Seen running before, gone now without an outcome: its end was never observed.
            events += part.follow(after_disruption(part.index, part.attempt, VANISHED), stamp)
    return [*events, *done_event(done)]


def _stop_partitions(
    parts: list[Partition],
    by_part: Mapping[int, Mapping[int, Pod]],
    phase: str,
    failure: Failure | None,
    stamp: str,
) -> None:
    """A failing job fails its unfinished partitions; a suspended one ends their attempts."""
    for part in parts:
        if part.terminal:
            continue
        if failure is not None:
            part.fail(FAILED_JOB, f"JobFailed: {failure[0]}", stamp)
            continue
        if phase == PHASE_SUSPENDED:
            pod = by_part.get(part.index, {}).get(part.attempt)
            if (interrupted := suspend.interrupted(part.attempt, pod)) is not None:
                part.follow(interrupted, stamp)


def _creates(
    parts: list[Partition],
    by_part: Mapping[int, Mapping[int, Pod]],
    spec: proofjob.JobSpec,
    settings: PodSettings,
    now: datetime,
) -> tuple[list[Action], list[float]]:
    """A pod for every unfinished partition whose current attempt has none, except where the
    API server refused it and its backoff has not passed (the seconds left are returned)."""
    creates: list[Action] = []
    waits: list[float] = []
    for part in parts:
        if not part.terminal and part.attempt not in by_part.get(part.index, {}):
            if wait := retry_after(part.reason, part.refusals, part.refused_at, now):
                waits.append(wait)
                continue
            manifest = pod_manifest(spec, part.index, part.attempt, settings)
            creates.append(actions.CreatePod(manifest, part.index, part.attempt))
            part.pod = manifest["metadata"]["name"]
    return creates, waits


def _judge(
    prev: Mapping[str, Any],
    parts: list[Partition],
    spec: proofjob.JobSpec,
    now: datetime,
    started: str,
    rejected: list[str] | None = None,
) -> tuple[str, Failure | None, str | None]:
    """The job's phase, why it fails now (reason, message) if it does, and its startTime
    (``started`` where it has none yet).

    The rules in their order: a finished job stays so; a job that chose what the operator
    does not allow (``rejected``) fails at once; then a failed partition fails it, all done
    is success, spec.suspend suspends it (clearing its startTime: ``policies.suspend``), and
    its deadline (``policies.deadline``) fails it.
    """
    prev_phase = prev.get("phase")
    start_time: str | None = prev.get("startTime")
    if prev_phase in FINISHED_PHASES:
        return prev_phase, None, start_time
    if rejected:
        return PHASE_FAILED, (REJECTED, "; ".join(rejected)), start_time or started
    for part in parts:
        if part.state == FAILED:
            failure = part.reason or "PartitionFailed", f"partition {part.index}: {part.message}"
            return PHASE_FAILED, failure, start_time or started
    if all(part.state == DONE for part in parts):
        return PHASE_SUCCEEDED, None, start_time or started
    if spec.suspend:
        return PHASE_SUSPENDED, None, None
    start_time = start_time or started
    if (overdue := deadline.exceeded(spec, start_time, now)) is not None:
        return PHASE_FAILED, overdue, start_time
    progressed = any(part.state in (*STARTED_STATES, DONE) for part in parts)
    return (PHASE_RUNNING if progressed else PHASE_PENDING), None, start_time


def _pod_cleanup(
    by_part: Mapping[int, Mapping[int, Pod]],
    strays: list[Pod],
    parts: list[Partition],
    wanted: bool,
    phase: str,
    now: datetime,
) -> list[Action]:
    """Delete the live pods nobody wants any more; release the ones that ended."""
    unwanted_reason = {
        PHASE_SUCCEEDED: "JobComplete", PHASE_FAILED: "JobFailed", PHASE_SUSPENDED: "Suspended"
    }.get(phase, "JobDeleted")
    deletes: list[Action] = []
    releases: list[Action] = []
    judged = [(pod, "UnknownPartition") for pod in strays]
    for index, attempts in sorted(by_part.items()):
        part = parts[index]
        for attempt, pod in sorted(attempts.items()):
            if not wanted:
                judged.append((pod, unwanted_reason))
            elif part.terminal or attempt != part.attempt:
                judged.append((pod, "Superseded"))
            else:
                judged.append((pod, ""))
    for pod, reason in judged:
        meta = pod.get("metadata") or {}
        if reason and not is_finished(pod) and not is_deleting(pod):
            deletes.append(actions.DeletePod(meta.get("name", ""), meta.get("uid", ""), reason))
        release = release_action(pod, now)
        if release is not None:
            releases.append(release)
    return [*deletes, *releases]


def _status(
    spec: proofjob.JobSpec,
    prev: Mapping[str, Any],
    parts: list[Partition],
    phase: str,
    failure: Failure | None,
    start_time: str | None,
    active: int,
    stamp: str,
) -> dict[str, Any]:
    done = [part.index for part in parts if part.state == DONE]
    failed = [part.index for part in parts if part.state == FAILED]
    progress = f"{len(done)}/{spec.partitions} partitions done, {active} active"
    if phase in FINISHED_PHASES and prev.get("phase") == phase:
        job_conditions = [dict(condition) for condition in prev.get("conditions") or []]
    else:
        job_conditions = conditions(
            prev.get("conditions") or [], phase, failure, progress, spec.generation, stamp,
            pods_refused([(part.index, part.message) for part in parts
                          if not part.terminal and part.reason == POD_REFUSED]),
        )
    proof = None
    if phase == PHASE_SUCCEEDED:
        commitments = [part.commitment or "" for part in parts]
        proof = {"commitment": proofjob.proof_commitment(commitments),
                 "partitions": spec.partitions}
        if spec.filecoin is not None:
            # The chain takes a real proof's partitions concatenated in partition order
            # (filecoin-proofs' merge_window_post_partition_proofs).
            proof["bytes"] = "0x" + "".join((p.proof or "").removeprefix("0x") for p in parts)
    return {
        "observedGeneration": spec.generation,
        "phase": phase,
        "partitionCount": spec.partitions,
        "resolved": {
            "circuitLog2": spec.circuit_log2,
            "priorityClassName": spec.priority_class_name,
            "activeDeadlineSeconds": spec.active_deadline_seconds,
            "randomness": spec.randomness,
        },
        "startTime": start_time,
        "completionTime": (prev.get("completionTime") or stamp)
        if phase in FINISHED_PHASES
        else None,
        "active": active,
        "succeeded": len(done),
        "failed": len(failed),
        "retries": sum(part.retries + part.disruptions for part in parts),
        "completedPartitions": ranges.compress(done),
        "failedPartitions": ranges.compress(failed),
        "partitions": [part.to_status() for part in parts],
        "proof": proof,
        "conditions": job_conditions,
    }


def _job_events(
    prev_phase: str | None, phase: str, failure: Failure | None, status: Mapping[str, Any]
) -> list[Event]:
    if phase == prev_phase:
        return []
    if phase == PHASE_SUCCEEDED:
        proof = status["proof"]
        text = f"all {proof['partitions']} partitions done; proof {proof['commitment']}"
        return [Event("Normal", "JobComplete", text)]
    if phase == PHASE_FAILED:
        reason, message = failure or ("JobFailed", "the job failed")
        return [Event("Warning", "JobFailed", f"{reason}: {message}")]
    return suspend.events(prev_phase, phase)


def _grace_waits(pods: list[Pod], now: datetime) -> list[float]:
    """Seconds until each deleting pod whose finalizer waits for its container to stop is
    released anyway: the end of its grace period."""
    waits = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        waiting = api.FINALIZER in (meta.get("finalizers") or []) and is_deleting(pod)
        if waiting and release_action(pod, now) is None:
            waits.append((api.parse_time(meta["deletionTimestamp"]) - now).total_seconds())
    return waits
