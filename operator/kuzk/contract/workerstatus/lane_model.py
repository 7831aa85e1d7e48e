"""The typed model of one lane of a WorkerStatus (``Lane``: one partition pod on a GPU), in its
stored form (``as_status``, camelCase) and read back from it (``from_status``), which
``workerstatus.parse`` reads each of a worker's lanes with. A lane is its pod (``PodRef``),
the ProofJob it proves a partition of (``JobRef``), its stage (``LaneStage``) and since when,
when it was ready for the GPU phase, since when its pod is not live (the operator's mark), and
what its prover held at its last write (``Memory``). What a lane means to the rest of kuzk
(the partition state it shows, its rank for the GPU phase) is
``kuzk.contract.workerstatus.lanes``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from kuzk.contract import api
from kuzk.contract.gputime import read_time, stamp


class LaneStage(StrEnum):
    """Where a lane is: start-up, synthesis (CPU), ready and waiting for the GPU phase
    (``synth_done`` with ``readyAt``), the GPU phase, the commitment (CPU)."""

    STARTING = "starting"
    SYNTHESIZING = api.SYNTHESIZING
    SYNTH_DONE = api.SYNTH_DONE
    GPU = api.GPU
    COMMITTING = api.COMMITTING


@dataclass(frozen=True)
class Memory:
    """What a lane's prover holds, measured when it writes: its resident host memory (the
    witness of a lane waiting for the GPU stays there), and the device memory it holds (0
    without a device)."""

    host_bytes: int
    device_bytes: int = 0


@dataclass(frozen=True)
class PodRef:
    """A partition pod: the identity of a lane."""

    name: str
    uid: str

    @classmethod
    def from_status(cls, value: Any) -> PodRef:
        """The pod a stored ``pod`` names (empty where it is not a mapping)."""
        pod = value if isinstance(value, Mapping) else {}
        return cls(str(pod.get("name") or ""), str(pod.get("uid") or ""))

    def as_status(self) -> dict[str, Any]:
        return {"name": self.name, "uid": self.uid}


@dataclass(frozen=True)
class JobRef:
    """The ProofJob a lane proves a partition of."""

    namespace: str
    name: str
    uid: str
    proof_kind: str

    def as_status(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "proofKind": self.proof_kind,
        }


@dataclass(frozen=True)
class Lane:
    """One partition pod on a GPU."""

    pod: PodRef
    job: JobRef
    partition: int
    attempt: int
    priority: int
    stage: LaneStage
    since: datetime
    ready_at: datetime | None = None
    memory: Memory | None = None
    not_live_since: datetime | None = None

    @property
    def live(self) -> bool:
        return self.not_live_since is None

    def measured(self, memory: Memory | None) -> Lane:
        """This lane with the memory its prover measured for this write (kept if none)."""
        return self if memory is None else replace(self, memory=memory)

    @classmethod
    def from_status(cls, value: Mapping[str, Any], fallback: datetime) -> Lane:
        """The lane a stored one says; an absent ``since`` falls back to ``fallback``, a stage
        kuzk does not know to ``starting``."""
        job = value.get("job") or {}
        since = read_time(value.get("since")) or fallback
        try:
            stage = LaneStage(str(value.get("stage") or LaneStage.STARTING))
        except ValueError:
            stage = LaneStage.STARTING
        return cls(
            pod=PodRef.from_status(value.get("pod")),
            job=JobRef(
                str(job.get("namespace") or ""),
                str(job.get("name") or ""),
                str(job.get("uid") or ""),
                str(job.get("proofKind") or ""),
            ),
            partition=int(value.get("partition") or 0),
            attempt=int(value.get("attempt") or 1),
            priority=int(value.get("priority") or 0),
            stage=stage,
            since=since,
            ready_at=read_time(value.get("readyAt")),
            not_live_since=read_time(value.get("notLiveSince")),
            memory=(None if value.get("hostMemoryBytes") is None else
                    Memory(int(value["hostMemoryBytes"]),
                           int(value.get("deviceMemoryBytes") or 0))),
        )

    def as_status(self) -> dict[str, Any]:
        lane: dict[str, Any] = {
            "pod": self.pod.as_status(),
            "job": self.job.as_status(),
            "partition": self.partition,
            "attempt": self.attempt,
            "priority": self.priority,
            "stage": str(self.stage),
            "since": stamp(self.since),
        }
        if self.ready_at is not None:
            lane["readyAt"] = stamp(self.ready_at)
        if self.not_live_since is not None:
            lane["notLiveSince"] = stamp(self.not_live_since)
        if self.memory is not None:
            lane["hostMemoryBytes"] = self.memory.host_bytes
            lane["deviceMemoryBytes"] = self.memory.device_bytes
        return lane


__all__ = ["JobRef", "Lane", "LaneStage", "Memory", "PodRef"]
