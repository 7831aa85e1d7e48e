"""``kuzk-lane``: the lane agent and the calls a prover makes to it.

    kuzk-lane run [--calls] -- CMD ARGS...   the pod's entrypoint (``lane_agent``)
    kuzk-lane stage synthesizing|synth_done|committing
    kuzk-lane acquire                        blocks until this lane holds the GPU phase
    kuzk-lane release-gpu
    kuzk-lane result FILE                    the result JSON (``-``: standard input)

Each call is a short-lived process that speaks ``lane_protocol`` to the agent named by
``KUZK_LANE_SOCKET``: exit 0 when the agent did it, 1 with one line on standard error when it
refused or no agent answers (nothing was written then), 2 for a malformed command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kuzk.contract.pod import FAILED_EXIT_CODE, OK_EXIT_CODE
from kuzk_prover.lane_protocol import (
    ACQUIRE,
    RELEASE_GPU,
    RESULT,
    SOCKET_ENV,
    STAGE,
    STAGES,
    Call,
    CallRefused,
    parse_call,
    send,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kuzk-lane",
        description="Run a prover on its GPU lane (run), or make a call to that lane's agent.",
    )
    calls = parser.add_subparsers(dest="call", required=True, metavar="CALL")
    run = calls.add_parser("run", help="run -- CMD ARGS...: the partition pod's entrypoint")
    run.add_argument("--calls", action="store_true",
                     help="CMD makes the lane calls itself; without it, the agent holds the"
                          " GPU phase for CMD's whole run")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    stage = calls.add_parser(STAGE, help="report the lane's stage")
    stage.add_argument("name", help=f"{', '.join(STAGES[:-1])} or {STAGES[-1]}")
    calls.add_parser(ACQUIRE, help="block until this lane holds its GPU's phase")
    calls.add_parser(RELEASE_GPU, help="give the GPU phase up")
    result = calls.add_parser(RESULT, help="hand over the result JSON")
    result.add_argument("file", help="a file holding the result JSON; - for standard input")
    return parser


def _refuse(message: str) -> int:
    print(f"kuzk-lane: {message}", file=sys.stderr)
    return FAILED_EXIT_CODE


def _call(args: argparse.Namespace) -> Call:
    if args.call == STAGE:
        return parse_call(f"{STAGE} {args.name}")
    if args.call != RESULT:
        return Call(args.call)
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"result: cannot read {args.file}: {exc}"
        raise CallRefused(msg) from None
    return parse_call(f"{RESULT} {' '.join(text.splitlines())}")


def main(argv: list[str] | None = None) -> int:
    """Run ``kuzk-lane``; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.call == "run":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("run needs the prover's command: kuzk-lane run -- CMD ARGS...")
        # Imported here: the agent brings the Kubernetes client, which a call does not need.
        from kuzk_prover.lane_agent import run

        return run(command, calls=args.calls)
    try:
        call = _call(args)
    except CallRefused as error:
        return _refuse(str(error))
    name = os.environ.get(SOCKET_ENV, "")
    if not name:
        return _refuse(f"{SOCKET_ENV} is not set: a prover makes lane calls when it runs"
                       " under `kuzk-lane run --calls -- CMD`")
    try:
        send(name, call)
    except CallRefused as error:
        return _refuse(str(error))
    except OSError as error:
        return _refuse(f"{args.call}: no lane agent at {name} ({error.strerror or error})")
    return OK_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
