"""The partition pod's contract between the operator, which writes the pod
(``kuzk.operator.decide.pods``), and the prover or the lane agent, which runs in it: the env the pod
gets, the randomness format of its input, its exit codes and its termination message. Both
sides import these names; neither writes them as literals (``tests/unit/test_pod_contract.py``).

A prover that succeeds writes one JSON object to its termination message: ``commitment`` (hex),
and ``synth_ms`` and ``gpu_ms`` (its stages' milliseconds); a real proof's partition adds
``proof``, its proof bytes (hex; a Groth16 proof is 192 bytes). One that fails writes
``{"error": ...}``; exit code ``INVALID_INPUT_EXIT_CODE`` says its input can never prove (the
operator does not retry it), any other non-zero code a failure that may not recur.

This module imports only the standard library: ``kuzk-alive``, the pod's probe, imports it.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The env the operator gives the prover's container: who the pod is (required by the prover)...
JOB_ENV = "KUZK_JOB"
JOB_UID_ENV = "KUZK_JOB_UID"
PROOF_KIND_ENV = "KUZK_PROOF_KIND"
PARTITION_ENV = "KUZK_PARTITION"
ATTEMPT_ENV = "KUZK_ATTEMPT"
# ...the PriorityClass its job resolved to (``spec.prover.priorityClassName``, else its kind's
# default), which ranks its lane for the GPU phase
# (``kuzk.contract.workerstatus.lanes.lane_priority``; the downward API does not give a pod its
# priority; optional: a pod of an earlier release lacks it)...
PRIORITY_CLASS_ENV = "KUZK_PRIORITY_CLASS"
# ...what it proves: JSON with sector (miner, number), randomness, circuitLog2, partitions...
INPUT_ENV = "KUZK_INPUT"
# A real proof's inputs are INPUT_ENV's key FILECOIN_INPUT_KEY (``kuzk.contract.filecoin``:
# sectorSize, proverId, randomness, partition, partitions and this partition's sectors).
FILECOIN_INPUT_KEY = "filecoin"
# ...how it logs (text or json, ``kuzk.contract.logs``) and where CuPy keeps its kernels...
LOG_FORMAT_ENV = "KUZK_LOG_FORMAT"
CUPY_CACHE_DIR_ENV = "CUPY_CACHE_DIR"
# ...and, for a real proof, where filecoin-proofs reads its Groth16 parameters.
PARAMETER_CACHE_ENV = "FIL_PROOFS_PARAMETER_CACHE"
# ...and, through the downward API, the pod and node it runs as (absent outside a pod).
POD_NAME_ENV = "POD_NAME"
POD_UID_ENV = "POD_UID"
POD_NAMESPACE_ENV = "POD_NAMESPACE"
NODE_NAME_ENV = "NODE_NAME"
# ...and the pod's own address, where the prover answers its probes (``ALIVE_PORT``).
POD_IP_ENV = "POD_IP"
ENV_NAMES = (JOB_ENV, JOB_UID_ENV, PROOF_KIND_ENV, PARTITION_ENV, ATTEMPT_ENV,
             PRIORITY_CLASS_ENV, INPUT_ENV, LOG_FORMAT_ENV, CUPY_CACHE_DIR_ENV,
             PARAMETER_CACHE_ENV, POD_NAME_ENV, POD_UID_ENV, POD_NAMESPACE_ENV, NODE_NAME_ENV,
             POD_IP_ENV)
"""Every variable of the partition pod's env, and nothing else."""
REAL_PROOF_ENV_NAMES = (PARAMETER_CACHE_ENV,)
"""The variables only a real proof's pods get (``kuzk.contract.filecoin``)."""

# The pod's readiness and liveness probes: an HTTP GET of ALIVE_PATH on the pod's address
# (POD_IP_ENV) at ALIVE_PORT, with the query ALIVE_WITHIN=<seconds>. The prover (or the lane
# agent) answers 200 while its pulse is at most that old, 503 once it is older; a prover that
# is stopped or hung does not answer at all. The port is below the kernel's ephemeral range,
# so that no client's socket takes it.
ALIVE_PORT = 8476
ALIVE_PATH = "/alive"
ALIVE_WITHIN = "within"

# A proof's challenge, in the ProofJob's spec and in INPUT_ENV: 0x and 32 bytes in hex.
RANDOMNESS_PATTERN = "^0x[0-9a-fA-F]{64}$"

# The exit codes of the pod's commands (``kuzk-prover``, ``kuzk-lane``, ``kuzk-alive``).
OK_EXIT_CODE = 0
"""Done: the result is in the termination message (a lane call or a probe: it succeeded)."""
FAILED_EXIT_CODE = 1
"""A failure that may not recur: the operator retries the partition."""
INVALID_INPUT_EXIT_CODE = 2
"""The input can never prove: the operator fails the partition without retrying it."""
NOT_STARTED_EXIT_CODE = 127
"""The lane agent could not start the prover's command (the shell's code for it)."""
TERMINATED_EXIT_CODE = 143
"""Stopped by SIGTERM (128 + 15) before finishing: no result is written."""

# Where the kubelet reads the container's termination message from.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# What the operator keeps of a prover's words: a condition's message, an Event's note.
MESSAGE_LIMIT = 512
_HEX = re.compile("(?:[0-9a-fA-F]{2})+")


def parse_result(message: str | None) -> tuple[str, int | None, int | None, str | None]:
    """Read a prover's success JSON: (commitment, synth_ms, gpu_ms, proof); proof is a real
    partition's proof bytes (``0x`` and lower-case hex), None where it carries none."""
    try:
        result = json.loads(message or "")
    except json.JSONDecodeError as error:
        msg = f"termination message is not JSON ({error.msg}): {clip(message or '')!r}"
        raise ValueError(msg) from None
    if not isinstance(result, dict):
        msg = f"termination message is not a JSON object: {clip(message or '')!r}"
        raise ValueError(msg)
    commitment = result.get("commitment")
    if not isinstance(commitment, str) or not _HEX.fullmatch(commitment.removeprefix("0x")):
        msg = f"termination message has no hex commitment: {clip(message or '')!r}"
        raise ValueError(msg)
    proof = result.get("proof")
    if proof is not None:
        if not isinstance(proof, str) or not _HEX.fullmatch(proof.removeprefix("0x")):
            msg = f"termination message's proof is not hex: {clip(str(proof))!r}"
            raise ValueError(msg)
        proof = "0x" + proof.removeprefix("0x").lower()
    return commitment, _millis(result.get("synth_ms")), _millis(result.get("gpu_ms")), proof


def clip(text: str) -> str:
    """``text`` within ``MESSAGE_LIMIT`` characters, an ellipsis saying it was cut."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _millis(value: Any) -> int | None:
    return round(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
