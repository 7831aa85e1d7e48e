"""ProofJob phases and their metav1.Conditions.

All four condition types are always present (True or False, each with a reason), so
``kubectl wait --for=condition=Complete`` and dashboards never guess at a missing one. A
condition keeps its ``lastTransitionTime`` while its status stays the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PENDING, RUNNING, SUCCEEDED, FAILED, SUSPENDED = (
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Suspended",
)
PHASES = (PENDING, RUNNING, SUCCEEDED, FAILED, SUSPENDED)
FINISHED_PHASES = (SUCCEEDED, FAILED)
CONDITION_TYPES = ("Running", "Complete", "Failed", "Suspended")


def conditions(
    previous: Iterable[Mapping[str, Any]],
    phase: str,
    failure: tuple[str, str] | None,
    progress: str,
    generation: int,
    stamp: str,
) -> list[dict[str, Any]]:
    """The job's conditions for a phase; ``failure`` is (reason, message) when Failed."""
    failed_reason, failed_message = failure or ("NoFailure", "no partition has failed")
    running_reason = {
        RUNNING: "PartitionsRunning",
        PENDING: "PodsPending",
        SUSPENDED: "JobSuspended",
        SUCCEEDED: "JobComplete",
        FAILED: failed_reason,
    }[phase]
    wanted = {
        "Running": (phase == RUNNING, running_reason, progress),
        "Complete": (
            phase == SUCCEEDED,
            "AllPartitionsDone" if phase == SUCCEEDED else "PartitionsRemaining",
            progress,
        ),
        "Failed": (phase == FAILED, failed_reason, failed_message),
        "Suspended": (
            phase == SUSPENDED,
            "JobSuspended" if phase == SUSPENDED else "NotSuspended",
            "spec.suspend is true" if phase == SUSPENDED else "spec.suspend is false",
        ),
    }
    old = {condition.get("type"): condition for condition in previous}
    result = []
    for kind in CONDITION_TYPES:
        truth, reason, message = wanted[kind]
        status = "True" if truth else "False"
        before = old.get(kind) or {}
        unchanged = before.get("status") == status and before.get("lastTransitionTime")
        result.append(
            {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": before["lastTransitionTime"] if unchanged else stamp,
                "observedGeneration": generation,
            }
        )
    return result
