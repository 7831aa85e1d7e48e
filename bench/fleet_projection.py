"""``bench/fleet_scale.py``'s per-attempt figures carried to a fleet: arithmetic, no model.
Each count per attempt times the fleet's attempts per second (no write is made for time
passing: the run measures the writes that moved no lane, and their goal is 0), at two rates:
a fleet of 10,000 GPUs with 2 lanes each and 60 s partitions (``FLEET``, 333 attempts a
second), and the Filecoin network's all-time peak of onboarding (``PEAK``, 215 a second)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from fleet_measure import JOB, KUZK, OPERATOR, by_prefix, own_writer, system_side, total


@dataclass(frozen=True)
class Fleet:
    """The fleet the per-attempt counts are carried to."""

    gpus: int = 10_000
    lanes: int = 2
    partition_s: float = 60.0

    @property
    def attempts_per_s(self) -> float:
        """Every lane of every GPU starts a partition each ``partition_s``."""
        return self.gpus * self.lanes / self.partition_s


@dataclass(frozen=True)
class Peak:
    """A rate of partition attempts the network has seen."""

    attempts_per_s: float
    what: str


FLEET = Fleet()
# 56.7 PiB of sectors a day (September 2021): about 215 PoRep partition proofs a second.
PEAK = Peak(215.0, "the network's all-time peak of onboarding, 56.7 PiB/day (Sep 2021)")
# The process whose CPU is each system's controller: kuzk's operator, or the Job run's
# kube-controller-manager (its job controller and the rest).
CONTROLLER_PROCESS = {KUZK: OPERATOR, JOB: "kube-controller-manager"}


def projection(figures: Mapping[str, float], system: str, fleet: Fleet | Peak) -> dict[str, float]:
    """A system's per-attempt counts at ``fleet``'s attempts per second; ``processes`` is
    how many controller processes that takes at one core each (a Python operator uses one)."""
    rate = fleet.attempts_per_s
    own = total(figures, "writes", who=own_writer(system))
    every = total(figures, "writes", who=system_side)
    events = sum(by_prefix(figures, "events").values())
    cores = figures.get(f"cpu_ms|{CONTROLLER_PROCESS[system]}", 0.0) * rate / 1000
    return {"attempts_per_s": rate, "own_writes_per_s": own * rate,
            "all_writes_per_s": every * rate, "controller_events_per_s": events * rate,
            "controller_cores": cores, "processes": float(max(1, math.ceil(cores))),
            "apiserver_cores": figures.get("cpu_ms|kube-apiserver", 0.0) * rate / 1000,
            "etcd_wal_mb_per_s": figures.get("etcd_wal_bytes", 0.0) * rate / 1e6}
