"""``kuzk-prover``: the partition pod's command, keeping the pod contract (``kuzk.contract.pod``).

Exit codes are the contract the operator acts on:
  0    proven; the result JSON is in the termination message;
  2    invalid input (KUZK_* env or flags); the reason is on stderr and in the message, and the
       partition fails without retry;
  1    anything else (no usable backend, a failed self-check, a crash): retryable;
  143  stopped by SIGTERM: no message is written, the attempt simply did not finish.

A failure's message is one readable line with the exception's type; its traceback goes to the
log (stderr) only. The GPU worker's status is best effort: its writes try again through an API
outage for a bounded time, then the prover proves on without status and still writes its
result.

``kuzk-prover --local --proof-kind … --partition … --miner … --sector …`` proves one partition
without Kubernetes and prints the result JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType

from kuzk.contract import logs
from kuzk.contract.api import version
from kuzk.contract.gpu import Gpu
from kuzk.contract.pod import (
    FAILED_EXIT_CODE,
    FILECOIN_INPUT_KEY,
    INPUT_ENV,
    INVALID_INPUT_EXIT_CODE,
    LOG_FORMAT_ENV,
    OK_EXIT_CODE,
    TERMINATED_EXIT_CODE,
)
from kuzk.contract.workerstatus.lane_model import LaneStage
from kuzk_prover.alive import Pulse
from kuzk_prover.core.backend import Backend, BackendChoiceError, BackendUnavailable, select_backend
from kuzk_prover.core.commitment import SelfCheckFailed
from kuzk_prover.core.prover import Result, prove
from kuzk_prover.inputs import (
    InputError,
    PodIdentity,
    ProofInput,
    add_arguments,
    from_arguments,
    from_env,
)
from kuzk_prover.outage import OUTAGE_BUDGET_S
from kuzk_prover.probes import Unanswerable, answering
from kuzk_prover.reporter import ProverReporter, for_partition_pod
from kuzk_prover.termination import brief, message_path, one_line, write_message

log = logging.getLogger("kuzk_prover")

# How long each WorkerStatus write keeps trying through an API outage.
STATUS_OUTAGE_S = OUTAGE_BUDGET_S


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, so that no ``except Exception`` can swallow it."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kuzk-prover",
        description="Prove one partition. In a pod, input comes from KUZK_* env variables.",
    )
    parser.add_argument("--version", action="version", version=f"kuzk-prover {version()}")
    parser.add_argument("--local", action="store_true", help="prove from flags, without Kubernetes")
    parser.add_argument(
        "--backend", choices=("auto", "numpy", "cupy"), help="override KUZK_BACKEND"
    )
    parser.add_argument(
        "--log-format", choices=logs.FORMATS,
        help="text or json (contract.logs); default: KUZK_LOG_FORMAT, which the operator sets to"
        " its own, else text",
    )
    add_arguments(parser)
    return parser


def _fail(path: Path | None, code: int, reason: str) -> int:
    line = one_line(reason)
    print(f"kuzk-prover: {line}", file=sys.stderr)
    if path is not None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            write_message(path, line + "\n")
        except OSError as exc:
            log.warning("could not write the termination message to %s: %s", path, exc)
    return code


def _prove(
    proof: ProofInput, backend: Backend, context: str, reporter: ProverReporter | None
) -> Result:
    def on_stage(stage: str) -> None:
        log.info("stage=%s %s", stage, context)
        if reporter is not None:
            reporter.on_stage(stage)

    gpu_phase = None if reporter is None else reporter.gpu_phase
    return prove(proof, on_stage=on_stage, xp=backend.xp, gpu_phase=gpu_phase)


def _run(
    proof: ProofInput, env: Mapping[str, str], path: Path | None, pod: PodIdentity | None
) -> int:
    """Choose the backend and prove; the result or the failure as an exit code."""
    try:
        backend = select_backend(env)
    except BackendChoiceError as exc:
        return _fail(path, INVALID_INPUT_EXIT_CODE, f"invalid input: {exc}")
    except BackendUnavailable as exc:
        return _fail(path, FAILED_EXIT_CODE, f"no backend: {exc}")
    reporter = None
    if path is not None and pod is not None:
        reporter = for_partition_pod(pod, env, STATUS_OUTAGE_S)
    attempt = 0 if pod is None else pod.attempt
    context = "local" if pod is None else f"attempt={attempt}"
    if reporter is None:
        return _prove_and_report(proof, backend, path, attempt, context, None)
    device = None
    if backend.gpu_uuid:
        device = Gpu(backend.gpu_uuid, backend.gpu_name or "", backend.memory_bytes)
    # It synthesizes at once: its lane joins in that stage (one write fewer).
    reporter.join_or_go_on(device, LaneStage.SYNTHESIZING)
    # The prover leaves its own lane, SIGTERM included; after a SIGKILL the operator's
    # finalizer release removes it (and the GPU phase, if it held it).
    code = FAILED_EXIT_CODE
    try:
        code = _prove_and_report(proof, backend, path, attempt, context, reporter)
    finally:
        try:
            reporter.release("succeeded" if code == OK_EXIT_CODE else "failed")
        except Exception:
            # The result is written by now; a bug in the status write must not undo it.
            log.exception("releasing the GPU worker failed; the operator's finalizer will")
    return code


def _prove_and_report(
    proof: ProofInput,
    backend: Backend,
    path: Path | None,
    attempt: int,
    context: str,
    reporter: ProverReporter | None,
) -> int:
    try:
        result = _prove(proof, backend, context, reporter)
    except SelfCheckFailed as exc:
        return _fail(path, FAILED_EXIT_CODE, f"self-check failed, result withheld: {exc}")
    except MemoryError:
        return _fail(path, FAILED_EXIT_CODE, "out of memory")
    except Exception as exc:
        log.exception("proving failed")
        return _fail(path, FAILED_EXIT_CODE, f"proving failed: {brief(exc)}")
    return _report(result, path, attempt)


def _report(result: Result, path: Path | None, attempt: int) -> int:
    text = json.dumps(result.message(attempt), separators=(",", ":"), sort_keys=True)
    # From here on the result is final: a late SIGTERM must not leave it half-written.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if path is None:
        print(text)
        return OK_EXIT_CODE
    try:
        write_message(path, text)
    except OSError as exc:
        log.error("could not write the result to %s: %s", path, exc)
        return FAILED_EXIT_CODE
    log.info("result commitment=%s written to %s", result.commitment, path)
    return OK_EXIT_CODE


def main(argv: list[str] | None = None) -> int:
    """Run the prover; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    log_format = args.log_format or os.environ.get(LOG_FORMAT_ENV) or "text"
    if log_format not in logs.FORMATS:
        parser.error(f"{LOG_FORMAT_ENV}={log_format!r}: expected one of {', '.join(logs.FORMATS)}")
    logs.configure(log_format)
    env = dict(os.environ)
    if args.backend:
        env["KUZK_BACKEND"] = args.backend
    signal.signal(signal.SIGTERM, _on_sigterm)
    path = None if args.local else message_path(env)
    try:
        if args.local:
            try:
                proof = from_arguments(args)
            except InputError as exc:
                return _fail(None, INVALID_INPUT_EXIT_CODE, f"invalid input: {exc}")
            logs.set_context(partition=proof.partition)
            return _run(proof, env, None, None)
        if any(getattr(args, name) is not None for name in ("proof_kind", "partition", "miner")):
            return _fail(path, INVALID_INPUT_EXIT_CODE,
                         "invalid input: partition flags need --local")
        try:
            pod = from_env(env)
        except InputError as exc:
            return _fail(path, INVALID_INPUT_EXIT_CODE, f"invalid input: {exc}")
        if pod.real:
            return _fail(path, INVALID_INPUT_EXIT_CODE,
                         f"invalid input: {INPUT_ENV}.{FILECOIN_INPUT_KEY} is a real proof's;"
                         " kuzk-prover proves synthetic witnesses only (the operator's real"
                         " prover command runs kuzk-fil-prover)")
        who = pod.identity
        logs.set_context(job=f"{who.namespace}/{who.job}", partition=who.partition,
                         pod=who.pod_name or None)
        # The pod's probes are answered from this pulse: a prover that stops is killed, and
        # its lane freed.
        with Pulse() as pulse, answering(pulse, env):
            return _run(pod.proof, env, path, who)
    except Unanswerable as exc:
        return _fail(path, FAILED_EXIT_CODE, str(exc))
    except Terminated:
        log.warning("SIGTERM: stopped before finishing; no result written")
        return TERMINATED_EXIT_CODE
    except Exception as exc:
        # The traceback is for the log; the partition's message gets one line.
        log.exception("kuzk-prover failed")
        return _fail(path, FAILED_EXIT_CODE, f"unexpected error: {brief(exc)}")


if __name__ == "__main__":
    sys.exit(main())
