"""ttlSecondsAfterFinished: a finished job is deleted once this long has passed since its
completionTime (0: at once). A job without it is kept."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from kuzk.contract import api, proofjob
from kuzk.contract.api import FINISHED_PHASES
from kuzk.operator.decide.actions import DeleteJob


def decide(spec: proofjob.JobSpec, status: Mapping[str, Any],
           now: datetime) -> DeleteJob | float | None:
    """For a job with this spec and (new) status: the DeleteJob once its TTL has run out, the
    seconds until it runs out before that, and None for a job that has not finished or has no
    TTL."""
    ttl = spec.ttl_seconds_after_finished
    if status["phase"] not in FINISHED_PHASES or ttl is None:
        return None
    expiry = api.parse_time(status["completionTime"]) + timedelta(seconds=ttl)
    left = (expiry - now).total_seconds()
    if left <= 0:
        return DeleteJob(f"ttlSecondsAfterFinished={ttl}")
    return left
