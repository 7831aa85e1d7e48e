"""One partition, start to finish: synthesis → quotient → commitment, with stage reports.

Stages use the engine's vocabulary (``synthesizing`` → ``synth_done`` → ``gpu``, then
``committing``) and are reported through ``on_stage(stage)``; by default they are only
logged. The GPU work runs inside ``gpu_phase()``, the seam where a lane takes its GPU's phase
and gives it up (``kuzk_prover.reporter.ProverReporter.gpu_phase``): the quotient comes back
to the host and the device's memory pool is emptied before the phase ends, so the commitment
(CPU work) runs after it and the next lane has the whole GPU. A Result exists only after the
self-check passed: a failing check raises SelfCheckFailed and nothing is reported.
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

from kuzk_prover import synthesis
from kuzk_prover.backend import backend_for, select_backend
from kuzk_prover.commitment import commit
from kuzk_prover.cuda import free_device_memory
from kuzk_prover.inputs import ProofInput
from kuzk_prover.quotient import Quotient, quotient
from kuzk_prover.xp import is_cupy, to_host

log = logging.getLogger(__name__)

OnStage = Callable[[str], None]
GpuPhase = Callable[[], AbstractContextManager[object]]


def log_stage(stage: str) -> None:
    """The default stage report: one log line."""
    log.info("stage=%s", stage)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Result:
    """A proven partition: its commitment, where it ran, and how long each stage took."""

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


def _free_device_memory(xp: ModuleType) -> None:
    """Give the device memory this process holds back to the GPU, for the next lane."""
    if is_cupy(xp):
        free_device_memory()


def prove(
    inputs: ProofInput,
    *,
    on_stage: OnStage | None = None,
    xp: ModuleType | None = None,
    gpu_phase: GpuPhase | None = None,
) -> Result:
    """Prove one partition on ``xp`` (default: the backend chosen for this process); the GPU
    work runs inside ``gpu_phase()`` (default: nothing to take)."""
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
    synth_ms = (time.perf_counter() - started) * 1e3
    enter("synth_done")

    with phase():
        enter("gpu")
        started = time.perf_counter()
        device_xp = backend.xp
        a, b, c = (device_xp.asarray(column) for column in (witness.a, witness.b, witness.c))
        on_device = quotient(a, b, c, xp=device_xp)
        q = Quotient(*(to_host(x) for x in (on_device.h, on_device.a, on_device.b, on_device.c)))
        del a, b, c, on_device
        _free_device_memory(device_xp)
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
