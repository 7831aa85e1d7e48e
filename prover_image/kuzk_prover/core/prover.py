"""One partition, start to finish: synthesis → quotient → commitment, with stage reports.

Stages use the engine's vocabulary (``synthesizing`` → ``synth_done`` → ``gpu``, then
``committing``) and are reported through ``on_stage(stage)``; by default they are only
logged. The GPU work runs inside ``gpu_phase(device_bytes)``, the seam where a lane takes its
GPU's phase, saying how much device memory the phase will allocate, and gives it up
(``kuzk_prover.reporter.ProverReporter.gpu_phase``). The phase holds device
work only: whatever the host can do without the GPU (the witness as uint32 words in pinned
memory, the transforms' host tables on NumPy) is prepared before the lane asks for it; inside
are the uploads, the kernels and the download of what the commitment reads, and the device's
memory is given back before the phase ends, so the commitment (CPU work) runs after it and the
next lane has the whole GPU. A Result exists only after the self-check passed: a failing check
raises SelfCheckFailed and nothing is reported.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from kuzk_prover.core import quotient, synthesis
from kuzk_prover.core.backend import backend_for, select_backend
from kuzk_prover.core.commitment import commit
from kuzk_prover.inputs import ProofInput

log = logging.getLogger(__name__)

OnStage = Callable[[str], None]
GpuPhase = Callable[[int], AbstractContextManager[object]]
"""Called with the device memory the phase will allocate; the block it returns is the phase."""


def log_stage(stage: str) -> None:
    """The default stage report: one log line."""
    log.info("stage=%s", stage)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Result:
    """A proven partition: its commitment, where it ran, and how long each stage took
    (``synth_ms``: synthesis and the host's preparation of the GPU phase; ``gpu_ms``: the
    phase's device work, without the wait for it; ``commit_ms``: the commitment and its
    self-check)."""

    commitment: str
    proof_kind: str
    partition: int
    circuit_log2: int
    backend: str
    device: str
    synth_ms: float
    gpu_ms: float
    commit_ms: float
    self_check: bool
    check_points: int
    stages: dict[str, str] = field(default_factory=dict)

    def message(self, attempt: int) -> dict[str, Any]:
        """The termination-message JSON of the pod contract."""
        return {
            "commitment": self.commitment,
            "proofKind": self.proof_kind,
            "partition": self.partition,
            "attempt": attempt,
            "circuitLog2": self.circuit_log2,
            "backend": self.backend,
            "device": self.device,
            "synth_ms": round(self.synth_ms, 1),
            "gpu_ms": round(self.gpu_ms, 1),
            "commit_ms": round(self.commit_ms, 1),
            "self_check": self.self_check,
            "stages": self.stages,
        }


def prove(
    inputs: ProofInput,
    *,
    on_stage: OnStage | None = None,
    xp: ModuleType | None = None,
    gpu_phase: GpuPhase | None = None,
) -> Result:
    """Prove one partition on ``xp`` (default: the backend chosen for this process); the GPU
    work runs inside ``gpu_phase(device_bytes)`` (default: nothing to take)."""
    report = log_stage if on_stage is None else on_stage
    phase = contextlib.nullcontext if gpu_phase is None else gpu_phase
    backend = select_backend() if xp is None else backend_for(xp)
    stages: dict[str, str] = {}

    def enter(stage: str) -> None:
        stages[stage] = _now()
        report(stage)

    enter("synthesizing")
    started = time.perf_counter()
    witness = synthesis.synthesize(inputs.seed(), inputs.circuit_log2)
    held = quotient.prepare(witness.a, witness.b, witness.c, xp=backend.xp)
    del witness
    synth_ms = (time.perf_counter() - started) * 1e3
    enter("synth_done")

    with phase(held.device_bytes):
        enter("gpu")
        started = time.perf_counter()
        q = held()
        gpu_ms = (time.perf_counter() - started) * 1e3

    enter("committing")
    started = time.perf_counter()
    root, points = commit(q)
    commit_ms = (time.perf_counter() - started) * 1e3
    stages["done"] = _now()
    return Result(
        commitment="0x" + root.hex(),
        proof_kind=inputs.proof_kind,
        partition=inputs.partition,
        circuit_log2=inputs.circuit_log2,
        backend=backend.name,
        device=backend.device,
        synth_ms=synth_ms,
        gpu_ms=gpu_ms,
        commit_ms=commit_ms,
        self_check=True,
        check_points=len(points),
        stages=stages,
    )
