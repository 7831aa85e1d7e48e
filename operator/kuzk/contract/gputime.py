"""A GPU's time by mode, kept by its WorkerStatus (``workerstatus.Worker.gpu_time``): the one
accounting rule every write applies, whoever makes it.

Every write adds the seconds since the GPU's ``accountedAt`` to the mode the GPU was in
(``GpuTime.accounted``), so its busy and idle seconds are kept by the object, not by whoever
reads it, and survive any reader's restart. A GPU's time is in one mode at a time
(``gpu_mode``): ``busy`` while a live lane holds its GPU phase (nothing else is busy), else idle
for a reason the object itself tells: ``not_live`` (the lane holding the GPU phase is not live,
or no lane holds it and none of its lanes is live: a hung prover, until its pod's liveness
probe has it killed and its lane released), ``cpu`` (lanes, none holding: starting,
synthesizing, waiting or committing), ``no_lane`` (no lane: no work for it, or its work not
here yet). A lane is not live from the operator's write that marks it
(``decisions.decide_sweep``), so every write accounts the same seconds to the same mode.

Times are stored to the millisecond (``stamp``), and accounting is cut to it, so no write
loses any.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kuzk.contract import api

BUSY, IDLE_CPU, IDLE_NOT_LIVE, IDLE_NO_LANE = "busy", "cpu", "not_live", "no_lane"
IDLE_MODES = (IDLE_NO_LANE, IDLE_CPU, IDLE_NOT_LIVE)
GPU_TIME_MODES = (BUSY, *IDLE_MODES)
_GPU_TIME_FIELDS = {BUSY: "busySeconds", IDLE_CPU: "cpuSeconds",
                    IDLE_NOT_LIVE: "notLiveSeconds", IDLE_NO_LANE: "noLaneSeconds"}
# What releases before liveness called ``not_live``: lanes whose heartbeats had stopped.
# Stored seconds and ledgers of theirs are read as ``not_live``.
_FORMER_MODES = {"unknown": IDLE_NOT_LIVE}
_FORMER_FIELDS = {"unknownSeconds": IDLE_NOT_LIVE}


def gpu_time_mode(stored: str) -> str:
    """The mode a stored name means, a former release's names included."""
    return _FORMER_MODES.get(stored, stored)


def gpu_mode(holder_live: bool | None, lanes_live: Iterable[bool]) -> str:
    """The mode (``GPU_TIME_MODES``) of a GPU whose holder is live or not (None: no lane holds
    its GPU phase) and whose lanes are each live or not: ``busy`` while its holder is live,
    ``not_live`` while its holder is not or, with no holder, while none of its lanes is live,
    ``cpu`` with lanes, else ``no_lane``."""
    if holder_live is not None:
        return BUSY if holder_live else IDLE_NOT_LIVE
    live = list(lanes_live)
    if not live:
        return IDLE_NO_LANE
    return IDLE_CPU if any(live) else IDLE_NOT_LIVE


def stamp(moment: datetime) -> str:
    """A time as a WorkerStatus stores it: RFC 3339, UTC, to the millisecond."""
    return api.format_time(moment, millis=True)


def read_time(value: Any) -> datetime | None:
    """A stored time; None when absent or unreadable."""
    if not value:
        return None
    try:
        return api.parse_time(str(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class GpuTime:
    """A GPU's seconds by mode (``GPU_TIME_MODES``) up to ``accounted_at``."""

    seconds: tuple[tuple[str, float], ...] = ()
    accounted_at: datetime | None = None

    def of(self, mode: str) -> float:
        return dict(self.seconds).get(mode, 0.0)

    def plus(self, added: Mapping[str, float], at: datetime) -> GpuTime:
        """These seconds plus ``added``, accounted up to ``at``."""
        totals = {mode: round(self.of(mode) + added.get(mode, 0.0), 3)
                  for mode in GPU_TIME_MODES}
        return GpuTime(tuple(totals.items()), at)

    def open_seconds(self, mode: str, now: datetime) -> dict[str, float]:
        """The seconds from ``accounted_at`` to ``now``, in ``mode`` (the mode the GPU was in
        since)."""
        if self.accounted_at is None:
            return {}
        start, end = self.accounted_at.timestamp(), now.timestamp()
        if end <= start:
            return {}
        return {mode: end - start}

    def accounted(self, mode: str, now: datetime) -> GpuTime:
        """These seconds up to ``now``: what is stored plus ``open_seconds`` in ``mode`` (never
        accounted: it starts counting at ``now``; a clock behind ``accounted_at`` adds
        nothing). ``now`` is cut to the millisecond a stored time keeps, so no write loses
        any."""
        now = now.replace(microsecond=now.microsecond // 1000 * 1000)
        at = self.accounted_at
        return self.plus(self.open_seconds(mode, now), now if at is None else max(at, now))

    def as_status(self) -> dict[str, Any]:
        stored: dict[str, Any] = {_GPU_TIME_FIELDS[mode]: self.of(mode)
                                  for mode in GPU_TIME_MODES}
        if self.accounted_at is not None:
            stored["accountedAt"] = stamp(self.accounted_at)
        return stored

    @classmethod
    def from_status(cls, value: Any) -> GpuTime:
        """The GPU time a stored ``gpuTime`` says (none without ``accountedAt``), a former
        release's fields included."""
        stored = value if isinstance(value, Mapping) else {}
        at = read_time(stored.get("accountedAt"))
        if at is None:
            return cls()
        seconds = {mode: float(stored.get(name) or 0.0)
                   for mode, name in _GPU_TIME_FIELDS.items()}
        for name, mode in _FORMER_FIELDS.items():
            seconds[mode] += float(stored.get(name) or 0.0)
        return cls(tuple(seconds.items()), at)


__all__ = [
    "BUSY",
    "GPU_TIME_MODES",
    "IDLE_CPU",
    "IDLE_MODES",
    "IDLE_NOT_LIVE",
    "IDLE_NO_LANE",
    "GpuTime",
    "gpu_mode",
    "gpu_time_mode",
    "read_time",
    "stamp",
]
