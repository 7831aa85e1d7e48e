"""Reading partition pods and WorkerStatuses: what one attempt's pod says right now.

The reconciler never remembers events; it reads the pods that exist. This module turns one
pod (plus the worker that may hold its assignment) into an Outcome, and decides when a pod's
``kuzk.io/release-worker`` finalizer may go.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from kuzk.contract import api
from kuzk.contract.api import DONE, PENDING, SCHEDULED, WORKER_STAGES
from kuzk.contract.pod import INVALID_INPUT_EXIT_CODE, clip, parse_result
from kuzk.contract.workerstatus.lanes import lane_views
from kuzk.operator.decide.actions import ReleaseWorker

# Pod-level reasons the kubelet and controllers give for killing a pod that did nothing wrong.
DISRUPTION_REASONS = frozenset({"Evicted", "Preempting", "Terminated", "NodeLost"})

OutcomeKind = Literal["live", "done", "invalid", "failed", "disrupted"]


@dataclass(frozen=True)
class Claim:
    """A WorkerStatus worker that holds a pod's assignment."""

    node: str
    worker: str
    stage: str | None


@dataclass(frozen=True)
class Outcome:
    """What one attempt's pod says: still live (with its state), or how it ended."""

    kind: OutcomeKind
    state: str = PENDING
    message: str | None = None
    node: str | None = None
    worker: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    commitment: str | None = None
    proof: str | None = None
    synth_ms: int | None = None
    gpu_ms: int | None = None


def worker_claims(workers: Iterable[Mapping[str, Any]]) -> dict[str, Claim]:
    """Index the lanes of all WorkerStatuses by the pod UID they belong to, as a partition
    sees them (``lanes.lane_views``)."""
    claims: dict[str, Claim] = {}
    for status_object in workers:
        for uid, view in lane_views(status_object).items():
            claims[uid] = Claim(view.node, view.worker, view.state)
    return claims


def controller_of(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod's controlling ProofJob reference, or None (orphaned with --cascade=orphan, or
    not a partition pod): with ``api.pod_partition``, the one rule of which job and partition
    a pod belongs to."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == api.PROOFJOB_KIND and owner.get("controller"):
            return dict(owner)
    return None


def controlled_by(pod: Mapping[str, Any], uid: str) -> bool:
    """Whether the pod's controller is the ProofJob with this UID (not a deleted namesake)."""
    return (controller_of(pod) or {}).get("uid") == uid


def is_finished(pod: Mapping[str, Any]) -> bool:
    """Whether the pod ran to an end (Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_deleting(pod: Mapping[str, Any]) -> bool:
    """Whether someone asked the API server to delete the pod."""
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def observe(pod: Mapping[str, Any], claims: Mapping[str, Claim]) -> Outcome:
    """Classify a pod of the partition's current attempt."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    claim = claims.get(meta.get("uid", ""))
    worker = claim.worker if claim else None
    started_at = status.get("startTime")
    phase = status.get("phase")
    terminated = _terminated(status)
    finished_at = (terminated or {}).get("finishedAt")
    common: dict[str, Any] = {
        "node": node,
        "worker": worker,
        "started_at": started_at,
        "finished_at": finished_at,
    }
    if phase == "Succeeded":
        try:
            commitment, synth_ms, gpu_ms, proof = parse_result((terminated or {}).get("message"))
        except ValueError as error:
            return Outcome("failed", message=f"no usable result: {error}", **common)
        return Outcome("done", DONE, commitment=commitment, proof=proof, synth_ms=synth_ms,
                       gpu_ms=gpu_ms, **common)
    disruption = _disruption(meta, status)
    if disruption is not None:
        return Outcome("disrupted", message=disruption, **common)
    if phase == "Failed":
        if terminated is None:
            reason = status.get("reason") or "Failed"
            text = clip(f"pod failed: {reason}: {status.get('message') or 'no message'}")
            return Outcome("failed", message=text, **common)
        code = terminated.get("exitCode")
        text = prover_message(terminated)
        if code == INVALID_INPUT_EXIT_CODE:
            return Outcome("invalid", message=text, **common)
        detail = f" ({terminated['reason']})" if terminated.get("reason") else ""
        return Outcome("failed", message=clip(f"exit {code}{detail}: {text}"), **common)
    if not node:
        state = PENDING
    elif phase == "Running" and claim is not None and claim.stage in WORKER_STAGES:
        state = claim.stage
    else:
        state = SCHEDULED
    return Outcome("live", state, **common)


def worker_outcome(pod: Mapping[str, Any]) -> api.WorkerOutcome:
    """How the worker of a pod being released ended, by the rule that decides its partition
    (``observe``): a usable result is a success, a disruption (an eviction, a preemption, a
    lost node, a deletion while it ran) is not the prover's failure, anything else is."""
    kind = observe(pod, {}).kind
    if kind == "done":
        return "succeeded"
    if kind in ("failed", "invalid"):
        return "failed"
    return "disrupted"


def sweep_outcome(pod: Mapping[str, Any]) -> api.WorkerOutcome | None:
    """What the sweep releases a lane of ``pod`` with: None while the lane is its prover's or
    its finalizer release's to end (the pod runs, or has not started as the cache shows it,
    or it ended and still carries the finalizer), else ``worker_outcome`` (it ended, and its
    finalizer is gone with a lane left behind)."""
    finalizers = (pod.get("metadata") or {}).get("finalizers") or []
    if not is_finished(pod) or api.FINALIZER in finalizers:
        return None
    return worker_outcome(pod)


def prover_message(terminated: Mapping[str, Any]) -> str:
    """The prover's own words: ``{"error": ...}`` JSON, or the plain termination message."""
    text = (terminated.get("message") or "").strip()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("error"):
        text = str(parsed["error"])
    return clip(text or f"exit code {terminated.get('exitCode')} and no message")


def awaits_release(pod: Mapping[str, Any]) -> bool:
    """Whether the pod's finalizer release may be due: it still carries the finalizer and it
    has ended or is being deleted (``release_action`` says when)."""
    meta = pod.get("metadata") or {}
    return api.FINALIZER in (meta.get("finalizers") or []) and (
        is_finished(pod) or is_deleting(pod))


def release_action(pod: Mapping[str, Any], now: datetime) -> ReleaseWorker | None:
    """The ReleaseWorker a pod needs now, or None while it is running or already released.

    A finished pod is released at once. A deleting pod is released when its container has
    stopped, when it never reached a node, or when its grace period is over (a lost node never
    reports the container's end, and the finalizer must not keep the pod forever).
    """
    meta = pod.get("metadata") or {}
    if api.FINALIZER not in (meta.get("finalizers") or []):
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    releasable = is_finished(pod) or (
        is_deleting(pod)
        and (
            not node
            or _terminated(pod.get("status") or {}) is not None
            or api.parse_time(meta["deletionTimestamp"]) <= now
        )
    )
    if not releasable:
        return None
    return ReleaseWorker(pod_name=meta.get("name", ""), pod_uid=meta.get("uid", ""), node=node)


def _disruption(meta: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            why = condition.get("message") or "no message"
            return clip(f"disrupted ({condition.get('reason') or 'DisruptionTarget'}): {why}")
    if status.get("reason") in DISRUPTION_REASONS:
        return clip(f"disrupted ({status['reason']}): {status.get('message') or 'no message'}")
    if meta.get("deletionTimestamp") and _deleted_first(meta, status):
        return "disrupted: the pod was deleted while it ran"
    return None


def _deleted_first(meta: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether a deleting pod was asked to go before its container ended on its own. One
    deleted while it ran is disrupted, whether a sync sees it still stopping or already
    Failed (exit 143); one that had failed on its own and was deleted afterwards is not.
    The request's time is the deletionTimestamp less the grace period it was given."""
    if status.get("phase") != "Failed":
        return True
    finished = (_terminated(status) or {}).get("finishedAt")
    if not finished:
        return False
    grace = timedelta(seconds=int(meta.get("deletionGracePeriodSeconds") or 0))
    return api.parse_time(meta["deletionTimestamp"]) - grace <= api.parse_time(finished)


def _terminated(status: Mapping[str, Any]) -> dict[str, Any] | None:
    containers = status.get("containerStatuses") or []
    if not containers:
        return None
    terminated = (containers[0].get("state") or {}).get("terminated")
    return terminated if isinstance(terminated, dict) else None
