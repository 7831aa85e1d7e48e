"""activeDeadlineSeconds: a job that runs longer than it fails (DeadlineExceeded).

The clock starts with the job's startTime, which a suspend clears and a resume sets again,
as for a batch/v1 Job. A job that finishes in the sync its deadline passes in has finished.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kuzk.contract import api, proofjob
from kuzk.contract.api import PHASE_PENDING, PHASE_RUNNING

DEADLINE_EXCEEDED = "DeadlineExceeded"


def exceeded(spec: proofjob.JobSpec, start_time: str, now: datetime) -> tuple[str, str] | None:
    """Why an unfinished job started at ``start_time`` fails now (reason, message), or None
    while its deadline has not passed (or it has none)."""
    deadline = spec.active_deadline_seconds
    if deadline is not None and now >= api.parse_time(start_time) + timedelta(seconds=deadline):
        return DEADLINE_EXCEEDED, f"the job ran longer than activeDeadlineSeconds={deadline}"
    return None


def seconds_left(spec: proofjob.JobSpec, phase: str, start_time: str | None,
                 now: datetime) -> float | None:
    """Seconds until the deadline of a pending or running job passes; None for any other
    job, or one without a deadline."""
    if (phase not in (PHASE_PENDING, PHASE_RUNNING) or not spec.active_deadline_seconds
            or not start_time):
        return None
    deadline = api.parse_time(start_time) + timedelta(seconds=spec.active_deadline_seconds)
    return (deadline - now).total_seconds()
