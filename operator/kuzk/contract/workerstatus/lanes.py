"""What a lane (``lane_model.Lane``: one partition pod on a GPU) means to the rest of kuzk: the
partition state each of its stages shows as, the stages its prover writes itself, its rank
when lanes wait for the GPU phase, and the view of a WorkerStatus's lanes that a ProofJob's
partitions are decided and woken from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from kuzk.contract import api
from kuzk.contract.workerstatus import parse
from kuzk.contract.workerstatus.lane_model import LaneStage

# The ProofJob partition state a lane's stage shows as: the engine's vocabulary, plus
# ``committing`` for the CPU work after the GPU phase, so that a partition shows ``gpu`` only
# while its lane holds the GPU.
PARTITION_STATE = {
    LaneStage.STARTING: api.SCHEDULED,
    LaneStage.SYNTHESIZING: api.SYNTHESIZING,
    LaneStage.SYNTH_DONE: api.SYNTH_DONE,
    LaneStage.GPU: api.GPU,
    LaneStage.COMMITTING: api.COMMITTING,
}

# The stages a prover reports itself (``decisions.decide_stage``); ``starting`` is its join, the
# GPU phase and the commitment after it are its acquire and its GPU release.
REPORTED_STAGES = (LaneStage.SYNTHESIZING, LaneStage.SYNTH_DONE)
# Of those, the one the acquire that follows it writes (``decisions.decide_acquire``): a lane
# that waits for the GPU phase shows ``synth_done``, one granted at once goes straight to
# ``gpu``. kuzk's prover does not write it on its own: one write fewer per partition.
ACQUIRE_STAGE = LaneStage.SYNTH_DONE
# The stages a lane may join in: ``starting``, or ``synthesizing`` for a prover that starts
# synthesizing at once (kuzk's own): its join says so, one write fewer per partition, and one
# fewer in the burst of a GPU's lanes joining together.
JOIN_STAGES = (LaneStage.STARTING, LaneStage.SYNTHESIZING)

# The PriorityClasses kuzk knows, lowest first: the ones the proof kinds default to
# (``api.PROOF_KINDS``), which the chart creates with ascending values (``priorityClasses`` in
# its values.yaml).
PRIORITY_CLASSES = ("kuzk-normal", "kuzk-high", "kuzk-critical")


def lane_priority(proof_kind: str, priority_class: str) -> int:
    """The rank a lane waits for the GPU phase with (higher first): the index in
    ``PRIORITY_CLASSES`` of its job's resolved PriorityClass (in its pod's env,
    ``kuzk.contract.pod.PRIORITY_CLASS_ENV``: what the job's ``spec.prover.priorityClassName``
    names, else its kind's default), so that a job an administrator marks critical goes first
    on a busy GPU. A class kuzk does not know (or none: a pod of an earlier release) ranks as
    the class its proof kind defaults to, and a kind kuzk does not know ranks 0."""
    if priority_class in PRIORITY_CLASSES:
        return PRIORITY_CLASSES.index(priority_class)
    defaults = api.PROOF_KINDS.get(proof_kind)
    if defaults is None:
        return 0
    return PRIORITY_CLASSES.index(defaults.priority_class_name)


@dataclass(frozen=True)
class LaneView:
    """What a ProofJob's partition sees of a lane: the node and worker (GPU) it is on, the
    partition state its stage shows as (``PARTITION_STATE``), and its job; not its memory or
    liveness marks, which tell a job nothing."""

    node: str
    worker: str
    state: str
    job_namespace: str
    job_name: str


def lane_views(worker_status: Mapping[str, Any] | None) -> Mapping[str, LaneView]:
    """The lanes of one WorkerStatus object, by the UID of their pod. A version of an object
    (its name and resourceVersion) is read once: the operator asks for the same version's
    lanes where it files it, where it compares it with the last, and in each sync that
    reads it (``_VIEWS``)."""
    worker_status = worker_status or {}
    meta = worker_status.get("metadata") or {}
    name, version = meta.get("name"), meta.get("resourceVersion")
    if name and version:
        kept = _VIEWS.get(name)
        if kept is not None and kept[0] == version:
            return kept[1]
    node = str((worker_status.get("spec") or {}).get("nodeName") or "")
    views = MappingProxyType({
        lane.pod.uid: LaneView(node, worker.id, PARTITION_STATE[lane.stage],
                               lane.job.namespace, lane.job.name)
        for worker in parse(worker_status.get("status")).workers
        for lane in worker.lanes
    })
    if name and version:
        _VIEWS[name] = (version, views)
    return views


# WorkerStatus name -> the lanes of the newest version read (one entry per GPU): a version is
# immutable, so its lanes are too.
_VIEWS: dict[str, tuple[str, Mapping[str, LaneView]]] = {}


# A lane's job namespace and name, partition and attempt.
LaneKey = tuple[str, str, int, int]


def lane_states(worker_statuses: Iterable[Mapping[str, Any]]) -> dict[LaneKey, str]:
    """The partition state each lane of ``worker_statuses`` shows (``PARTITION_STATE``), by
    its job, partition and attempt: what a job's live partitions are doing now, which the
    job's own status may trail (the operator writes their progress coalesced)."""
    return {(lane.job.namespace, lane.job.name, lane.partition, lane.attempt):
            PARTITION_STATE[lane.stage]
            for ws in worker_statuses
            for worker in parse(ws.get("status")).workers for lane in worker.lanes}


__all__ = [
    "ACQUIRE_STAGE",
    "JOIN_STAGES",
    "PARTITION_STATE",
    "PRIORITY_CLASSES",
    "REPORTED_STAGES",
    "LaneKey",
    "LaneView",
    "lane_priority",
    "lane_states",
    "lane_views",
]
