"""The model of a ProofJob: its spec with every default applied (``JobSpec``), the spec's
limits, its resolution from the stored object by its kind's defaults (``resolve``, on
``kuzk.contract.api.PROOF_KINDS``), and what a finished job proves (``proof_commitment``,
``proof_bytes``). The operator runs what ``resolve`` returns, and the CRD describes the same
defaults and limits.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kuzk.contract import filecoin
from kuzk.contract.api import PHASE_FAILED, PHASE_PENDING, PHASE_SUCCEEDED, PROOF_KINDS
from kuzk.contract.filecoin import FilecoinSpec
from kuzk.contract.pod import RANDOMNESS_PATTERN

PARTITIONS_MIN, PARTITIONS_MAX = 1, 64
CIRCUIT_LOG2_MIN, CIRCUIT_LOG2_MAX = 4, 27
DEFAULT_BACKOFF_LIMIT_PER_PARTITION = 3


@dataclass(frozen=True)
class Sector:
    """The sector a ProofJob proves; it seeds the witness."""

    miner: int
    number: int


@dataclass(frozen=True)
class JobSpec:
    """A ProofJob with every default applied: what the operator actually runs."""

    name: str
    namespace: str
    uid: str
    generation: int
    proof_kind: str
    partitions: int
    sector: Sector
    randomness: str
    circuit_log2: int
    backoff_limit_per_partition: int
    active_deadline_seconds: int | None
    ttl_seconds_after_finished: int | None
    suspend: bool
    priority_class_name: str
    image: str | None
    resources: Mapping[str, Any]
    node_selector: Mapping[str, str] | None
    tolerations: Sequence[Mapping[str, Any]] | None
    # A real proof's inputs (``spec.filecoin``); None: the built-in prover's synthetic witness.
    filecoin: FilecoinSpec | None = None


def resolve(job: Mapping[str, Any]) -> JobSpec:
    """Resolve a ProofJob object into a JobSpec, applying the kind's defaults.

    A real proof (``spec.filecoin``) has the chain's partition count, from its sectors. The
    partition count, circuit size and randomness define the proof, so once the job's
    status records them (``status.partitionCount``, ``status.resolved``) those win over the
    spec and the table: an operator upgrade that changes a default never reshapes a running
    job, and neither does a spec field added after the job started.
    """
    meta = job.get("metadata") or {}
    spec = job.get("spec") or {}
    status = job.get("status") or {}
    recorded = status.get("resolved") or {}
    kind = spec.get("proofKind")
    if not isinstance(kind, str) or kind not in PROOF_KINDS:
        msg = f"spec.proofKind must be one of {sorted(PROOF_KINDS)}, got {kind!r}"
        raise ValueError(msg)
    defaults = PROOF_KINDS[kind]
    real = filecoin.parse(spec)
    # A real proof's partitions are the chain's, from its sectors.
    partitions = _first(status.get("partitionCount"),
                        real.partitions(kind) if real else spec.get("partitions"),
                        defaults.partitions)
    _check_range("spec.partitions", partitions, PARTITIONS_MIN, PARTITIONS_MAX)
    circuit_log2 = _first(
        recorded.get("circuitLog2"), spec.get("circuitLog2"), defaults.circuit_log2
    )
    _check_range("spec.circuitLog2", circuit_log2, CIRCUIT_LOG2_MIN, CIRCUIT_LOG2_MAX)
    sector = _sector(spec.get("sector"))
    randomness = recorded.get("randomness") or spec.get("randomness") or default_randomness(sector)
    if not re.fullmatch(RANDOMNESS_PATTERN, randomness):
        msg = f"spec.randomness must be 0x followed by 64 hex digits, got {randomness!r}"
        raise ValueError(msg)
    prover = spec.get("prover") or {}
    deadline = spec.get("activeDeadlineSeconds", defaults.active_deadline_seconds)
    return JobSpec(
        name=meta["name"],
        namespace=meta.get("namespace", "default"),
        uid=meta.get("uid", ""),
        generation=int(meta.get("generation", 0)),
        proof_kind=kind,
        partitions=partitions,
        sector=sector,
        randomness=randomness,
        circuit_log2=circuit_log2,
        backoff_limit_per_partition=int(
            spec.get("backoffLimitPerPartition", DEFAULT_BACKOFF_LIMIT_PER_PARTITION)
        ),
        active_deadline_seconds=deadline,
        ttl_seconds_after_finished=spec.get("ttlSecondsAfterFinished"),
        suspend=bool(spec.get("suspend", False)),
        priority_class_name=prover.get("priorityClassName") or defaults.priority_class_name,
        image=prover.get("image"),
        resources=prover.get("resources") or {},
        node_selector=prover.get("nodeSelector"),
        tolerations=prover.get("tolerations"),
        filecoin=real,
    )


def default_randomness(sector: Sector) -> str:
    """The challenge used when the spec gives none: derived from the sector, so reproducible."""
    digest = hashlib.sha256(f"kuzk-randomness:{sector.miner}:{sector.number}".encode())
    return "0x" + digest.hexdigest()


def proof_commitment(commitments: Sequence[str]) -> str:
    """The job-level commitment: SHA-256 over the partition commitments' bytes, in order."""
    digest = hashlib.sha256()
    for commitment in commitments:
        digest.update(bytes.fromhex(commitment.removeprefix("0x")))
    return digest.hexdigest()


def proof_bytes(job: Mapping[str, Any]) -> bytes:
    """A succeeded real proof's bytes (``status.proof.bytes``); ValueError saying why a job
    has none."""
    status = job.get("status") or {}
    if not (job.get("spec") or {}).get("filecoin"):
        msg = "not a real proof (no spec.filecoin): its partitions prove synthetic witnesses"
        raise ValueError(msg)
    text = (status.get("proof") or {}).get("bytes")
    phase = status.get("phase") or PHASE_PENDING
    done = f"{status.get('succeeded') or 0} of {status.get('partitionCount') or '?'} partitions"
    if phase == PHASE_FAILED:
        msg = f"Failed with {done} done: a failed job has no proof"
        raise ValueError(msg)
    if phase != PHASE_SUCCEEDED or not isinstance(text, str):
        msg = f"{phase}, {done} done: the proof is there once it succeeds"
        raise ValueError(msg)
    return bytes.fromhex(text.removeprefix("0x"))


def _first(*values: Any) -> Any:
    return next(value for value in values if value is not None)


def _check_range(field: str, value: Any, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        msg = f"{field} must be an integer in {low}..{high}, got {value!r}"
        raise ValueError(msg)


def _sector(sector: Any) -> Sector:
    if not isinstance(sector, Mapping) or not {"miner", "number"} <= sector.keys():
        msg = f"spec.sector must have miner and number, got {sector!r}"
        raise ValueError(msg)
    return Sector(miner=int(sector["miner"]), number=int(sector["number"]))
