"""The metav1.Conditions of a ProofJob phase (the phases themselves are in ``kuzk.contract.api``).

All six condition types are always present (True or False, each with a reason), so
``kubectl wait --for=condition=Complete`` and dashboards never guess at a missing one. A
condition keeps its ``lastTransitionTime`` while its status stays the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kuzk.contract.api import (
    PHASE_FAILED,
    PHASE_PENDING,
    PHASE_RUNNING,
    PHASE_SUCCEEDED,
    PHASE_SUSPENDED,
)

CONDITION_TYPES = ("Running", "Complete", "Failed", "Suspended", "PodsRefused", "Rejected")
REJECTED = "Rejected"


def conditions(
    previous: Iterable[Mapping[str, Any]],
    phase: str,
    failure: tuple[str, str] | None,
    progress: str,
    generation: int,
    stamp: str,
    refused: str | None = None,
) -> list[dict[str, Any]]:
    """The job's conditions for a phase; ``failure`` is (reason, message) when Failed;
    ``refused`` says which partitions' pods the API server refuses for now, and why."""
    failed_reason, failed_message = failure or ("NoFailure", "no partition has failed")
    running_reason = {
        PHASE_RUNNING: "PartitionsRunning",
        PHASE_PENDING: "PodsPending",
        PHASE_SUSPENDED: "JobSuspended",
        PHASE_SUCCEEDED: "JobComplete",
        PHASE_FAILED: failed_reason,
    }[phase]
    wanted = {
        "Running": (phase == PHASE_RUNNING, running_reason, progress),
        "Complete": (
            phase == PHASE_SUCCEEDED,
            "AllPartitionsDone" if phase == PHASE_SUCCEEDED else "PartitionsRemaining",
            progress,
        ),
        "Failed": (phase == PHASE_FAILED, failed_reason, failed_message),
        "Suspended": (
            phase == PHASE_SUSPENDED,
            "JobSuspended" if phase == PHASE_SUSPENDED else "NotSuspended",
            "spec.suspend is true" if phase == PHASE_SUSPENDED else "spec.suspend is false",
        ),
        "Rejected": (
            failed_reason == REJECTED,
            REJECTED if failed_reason == REJECTED else "Allowed",
            failed_message if failed_reason == REJECTED
            else "the operator allows what the job chose",
        ),
        "PodsRefused": (
            refused is not None,
            "FailedCreate" if refused is not None else "PodsAccepted",
            refused or "the API server accepted every pod asked for",
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
