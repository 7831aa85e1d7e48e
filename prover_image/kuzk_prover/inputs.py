"""What one partition proves, read from the pod's env or from flags, and validated in one place.

Every bad value is an InputError whose message names the variable and the value, because the
entrypoint turns it into exit code ``kuzk.contract.pod.INVALID_INPUT_EXIT_CODE`` and a one-line
termination message: the operator fails the partition at once (no retry can fix its input) and
shows that line to the user.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kuzk.contract import api, pod, proofjob
from kuzk.contract.gpu import VISIBLE_DEVICES_ENV

# One table of proof kinds for operator and prover: kuzk.contract.api.
PROOF_KINDS = tuple(api.PROOF_KINDS)
KIND_DEFAULTS = {k: (d.partitions, d.circuit_log2) for k, d in api.PROOF_KINDS.items()}
"""(partitions, circuitLog2) of each proof kind."""
MIN_LOG2, MAX_LOG2 = proofjob.CIRCUIT_LOG2_MIN, proofjob.CIRCUIT_LOG2_MAX
MAX_PARTITIONS = proofjob.PARTITIONS_MAX
_RANDOMNESS = re.compile(pod.RANDOMNESS_PATTERN)
_INPUT_KEYS = {"sector", "randomness", "circuitLog2", "partitions", pod.FILECOIN_INPUT_KEY}


class InputError(ValueError):
    """The partition's input is invalid; retrying cannot help."""


@dataclass(frozen=True)
class ProofInput:
    """One partition of one proof."""

    proof_kind: str
    miner: int
    sector: int
    randomness: bytes | None
    circuit_log2: int
    partition: int
    partitions: int

    def seed(self) -> bytes:
        """The witness seed of this partition."""
        # Imported here, not at the top: this module's reading of the pod contract serves
        # the lane agent (``kuzk_prover.lane_agent``) too, which must run without NumPy.
        from kuzk_prover.core.synthesis import derive_seed

        return derive_seed(
            self.proof_kind, self.miner, self.sector, self.randomness, self.partition
        )


# The pod's own identity, set by the downward API (kuzk.operator.decide.pods): absent when the
# prover runs outside a partition pod, where it proves without reporting its GPU worker's status.
POD_ENV = (pod.NODE_NAME_ENV, pod.POD_NAME_ENV, pod.POD_UID_ENV, pod.POD_NAMESPACE_ENV)


@dataclass(frozen=True)
class PodIdentity:
    """Who a partition pod is: the job and the partition attempt it runs, the PriorityClass
    its job resolved to, and the pod and node it runs as (empty where its env does not say)."""

    job: str
    job_uid: str
    proof_kind: str
    partition: int
    attempt: int
    priority_class: str = ""
    namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    node: str = ""
    visible_devices: str = ""

    def missing(self) -> list[str]:
        """The POD_ENV variables the env lacked."""
        values = (self.node, self.pod_name, self.pod_uid, self.namespace)
        return [name for name, value in zip(POD_ENV, values, strict=True) if not value]


@dataclass(frozen=True)
class PodInput:
    """The env of a partition pod: who it is and the partition to prove."""

    identity: PodIdentity
    proof: ProofInput
    # A real proof's inputs (``pod.FILECOIN_INPUT_KEY``), for the real prover under the lane
    # agent; the built-in prover refuses a partition that has them.
    real: bool = False


def _integer(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in [low, high], accepting decimal strings; bools are not ints."""
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{name}={value!r} is not an integer"
        raise InputError(msg)
    if value < low or (high is not None and value > high):
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        msg = f"{name}={value} is not in {bounds}"
        raise InputError(msg)
    return value


def make_input(
    *,
    proof_kind: str,
    miner: Any,
    sector: Any,
    randomness: str | None,
    circuit_log2: Any,
    partition: Any,
    partitions: Any,
    names: Mapping[str, str] | None = None,
) -> ProofInput:
    """A validated ProofInput; ``names`` says how each field is called where it came from."""
    label = {
        "proof_kind": "proofKind",
        "miner": "sector.miner",
        "sector": "sector.number",
        "randomness": "randomness",
        "circuit_log2": "circuitLog2",
        "partition": "partition",
        "partitions": "partitions",
        **(names or {}),
    }
    if proof_kind not in PROOF_KINDS:
        msg = f"{label['proof_kind']}={proof_kind!r} is not one of {', '.join(PROOF_KINDS)}"
        raise InputError(msg)
    challenge = None
    if randomness is not None:
        if not isinstance(randomness, str) or not _RANDOMNESS.fullmatch(randomness):
            msg = f"{label['randomness']}={randomness!r} is not 0x followed by 64 hex digits"
            raise InputError(msg)
        challenge = bytes.fromhex(randomness[2:])
    count = _integer(label["partitions"], partitions, 1, MAX_PARTITIONS)
    index = _integer(label["partition"], partition, 0)
    if index >= count:
        msg = f"{label['partition']}={index} is not in [0, {count}) ({label['partitions']}={count})"
        raise InputError(msg)
    return ProofInput(
        proof_kind=proof_kind,
        miner=_integer(label["miner"], miner, 0),
        sector=_integer(label["sector"], sector, 0),
        randomness=challenge,
        circuit_log2=_integer(label["circuit_log2"], circuit_log2, MIN_LOG2, MAX_LOG2),
        partition=index,
        partitions=count,
    )


def _optional(env: Mapping[str, str | None], name: str) -> str:
    return (env.get(name) or "").strip()


def _required(env: Mapping[str, str | None], name: str) -> str:
    value = _optional(env, name)
    if not value:
        msg = f"{name} is missing or empty"
        raise InputError(msg)
    return value


def identity_from_env(env: Mapping[str, str]) -> PodIdentity:
    """The one reading of who the pod is: KUZK_JOB, KUZK_JOB_UID, KUZK_PROOF_KIND,
    KUZK_PARTITION and KUZK_ATTEMPT (required), KUZK_PRIORITY_CLASS, POD_ENV and
    NVIDIA_VISIBLE_DEVICES."""
    return PodIdentity(
        job=_required(env, pod.JOB_ENV),
        job_uid=_required(env, pod.JOB_UID_ENV),
        proof_kind=_required(env, pod.PROOF_KIND_ENV),
        partition=_integer(pod.PARTITION_ENV, _required(env, pod.PARTITION_ENV), 0),
        attempt=_integer(pod.ATTEMPT_ENV, _required(env, pod.ATTEMPT_ENV), 0),
        priority_class=_optional(env, pod.PRIORITY_CLASS_ENV),
        namespace=_optional(env, pod.POD_NAMESPACE_ENV),
        pod_name=_optional(env, pod.POD_NAME_ENV),
        pod_uid=_optional(env, pod.POD_UID_ENV),
        node=_optional(env, pod.NODE_NAME_ENV),
        visible_devices=_optional(env, VISIBLE_DEVICES_ENV),
    )


def from_env(env: Mapping[str, str]) -> PodInput:
    """The pod's identity (``identity_from_env``) and the partition to prove: its proof
    kind, its partition and KUZK_INPUT (JSON: sector, randomness, circuitLog2,
    partitions)."""
    identity = identity_from_env(env)
    raw = _required(env, pod.INPUT_ENV)
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        msg = f"{pod.INPUT_ENV} is not JSON ({exc.msg} at position {exc.pos})"
        raise InputError(msg) from exc
    if not isinstance(spec, dict):
        msg = f"{pod.INPUT_ENV} must be a JSON object, got {type(spec).__name__}"
        raise InputError(msg)
    unknown = sorted(set(spec) - _INPUT_KEYS)
    if unknown:
        msg = f"{pod.INPUT_ENV} has unknown keys {unknown}; expected {sorted(_INPUT_KEYS)}"
        raise InputError(msg)
    for key in ("sector", "circuitLog2", "partitions"):
        if key not in spec:
            msg = f"{pod.INPUT_ENV}.{key} is missing"
            raise InputError(msg)
    sector = spec["sector"]
    if not isinstance(sector, dict) or set(sector) != {"miner", "number"}:
        msg = f"{pod.INPUT_ENV}.sector={sector!r} must be an object with exactly miner and number"
        raise InputError(msg)
    proof = make_input(
        proof_kind=identity.proof_kind,
        miner=sector["miner"],
        sector=sector["number"],
        randomness=spec.get("randomness"),
        circuit_log2=spec["circuitLog2"],
        partition=identity.partition,
        partitions=spec["partitions"],
        names={
            "proof_kind": pod.PROOF_KIND_ENV,
            "miner": f"{pod.INPUT_ENV}.sector.miner",
            "sector": f"{pod.INPUT_ENV}.sector.number",
            "randomness": f"{pod.INPUT_ENV}.randomness",
            "circuit_log2": f"{pod.INPUT_ENV}.circuitLog2",
            "partition": pod.PARTITION_ENV,
            "partitions": f"{pod.INPUT_ENV}.partitions",
        },
    )
    return PodInput(identity=identity, proof=proof, real=pod.FILECOIN_INPUT_KEY in spec)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that describe one partition (``kuzk-prover --local``, ``verify``)."""
    parser.add_argument("--proof-kind", choices=PROOF_KINDS, help="what kind of proof")
    parser.add_argument("--partition", type=int, help="partition index, from 0")
    parser.add_argument("--partitions", type=int, help="partitions in the proof (kind default)")
    parser.add_argument("--circuit-log2", type=int, help="log2 of constraints (kind default)")
    parser.add_argument("--miner", type=int, help="sector's miner id")
    parser.add_argument("--sector", type=int, help="sector number")
    parser.add_argument("--randomness", help="challenge: 0x and 64 hex digits")


def from_arguments(args: argparse.Namespace) -> ProofInput:
    """A ProofInput from the flags of ``add_arguments``, kind defaults filled in."""
    missing = [
        flag
        for flag, value in (
            ("--proof-kind", args.proof_kind),
            ("--partition", args.partition),
            ("--miner", args.miner),
            ("--sector", args.sector),
        )
        if value is None
    ]
    if missing:
        msg = f"missing {', '.join(missing)}"
        raise InputError(msg)
    partitions, circuit_log2 = KIND_DEFAULTS[args.proof_kind]
    return make_input(
        proof_kind=args.proof_kind,
        miner=args.miner,
        sector=args.sector,
        randomness=args.randomness,
        circuit_log2=circuit_log2 if args.circuit_log2 is None else args.circuit_log2,
        partition=args.partition,
        partitions=partitions if args.partitions is None else args.partitions,
        names={
            "miner": "--miner",
            "sector": "--sector",
            "randomness": "--randomness",
            "circuit_log2": "--circuit-log2",
            "partition": "--partition",
            "partitions": "--partitions",
        },
    )
