"""spec.suspend: a suspended job runs no pod.

While spec.suspend is true an unfinished job is Suspended: its live pods are deleted, and the
attempts they ran end without counting, so each partition goes on as its next attempt on
resume. Its startTime is cleared (``kuzk.operator.decide.reconcile``), so activeDeadlineSeconds
counts again from the resume, as for a batch/v1 Job. The job says when it is suspended and
when it resumes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kuzk.contract.api import PHASE_SUSPENDED
from kuzk.operator.decide.actions import Event
from kuzk.operator.decide.observe import is_finished
from kuzk.operator.decide.policies.retries import Retry

RETRIED_SUSPEND = "Suspended"
INTERRUPTED = "interrupted by spec.suspend"


def interrupted(attempt: int, pod: Mapping[str, Any] | None) -> Retry | None:
    """What suspending does to a partition's current ``attempt`` and its pod: one whose pod
    has not finished ends, and the partition goes on as the next attempt, not counted; None
    when it has no pod, or its pod finished (its outcome is the partition's)."""
    if pod is None or is_finished(pod):
        return None
    return Retry(attempt + 1, False, RETRIED_SUSPEND, INTERRUPTED)


def events(prev_phase: str | None, phase: str) -> list[Event]:
    """The Event of a job that is suspended now, or resumes now (any other change: none)."""
    if phase == prev_phase:
        return []
    if phase == PHASE_SUSPENDED:
        return [Event("Normal", "Suspended", "spec.suspend is true; partition pods are deleted")]
    if prev_phase == PHASE_SUSPENDED:
        return [Event("Normal", "Resumed", "spec.suspend is false; unfinished partitions resume")]
    return []
