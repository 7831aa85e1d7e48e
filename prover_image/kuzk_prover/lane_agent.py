"""The lane agent, ``kuzk-lane run [--calls] -- CMD ARGS...``: the partition pod's entrypoint for
a prover that is not kuzk's own (any language, no Kubernetes client in it).

It reads the pod contract's env (``inputs.from_env``, the built-in prover's one parse), joins
the pod's GPU lane through ``reporter.ProverReporter`` (the built-in prover's lane, with its
retries through API outages and its wait on a watch for the GPU phase), serves the line
protocol of ``lane_protocol`` on ``KUZK_LANE_SOCKET``, and starts CMD with that variable set.
When CMD exits it writes the termination message (the result CMD handed it, else one line on
how CMD ended), leaves the lane (which frees the GPU phase if CMD still held it), and exits
with the pod contract's code (``kuzk.contract.pod``): 0 done, 2 invalid input, anything else a
failure.

Without ``--calls`` CMD is taken to make no calls: the agent holds the GPU phase for CMD's
whole run, so the screen shows the GPU busy while it may use it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import socketserver
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import IO, cast

from kuzk.contract import logs
from kuzk.contract.api import COMMITTING
from kuzk.contract.pod import (
    FAILED_EXIT_CODE,
    INVALID_INPUT_EXIT_CODE,
    LOG_FORMAT_ENV,
    NOT_STARTED_EXIT_CODE,
    OK_EXIT_CODE,
    TERMINATED_EXIT_CODE,
    parse_result,
)
from kuzk.contract.workerstatus.decisions import Acquired
from kuzk_prover import inputs
from kuzk_prover.alive import Pulse, stopped
from kuzk_prover.inputs import InputError, PodIdentity
from kuzk_prover.lane_protocol import (
    ACQUIRE,
    MAX_LINE,
    RESULT,
    SOCKET_ENV,
    STAGE,
    Call,
    CallRefused,
    address,
    ok,
    parse_call,
    refused,
)
from kuzk_prover.probes import Unanswerable, answering
from kuzk_prover.reporter import ProverReporter, for_partition_pod, host_memory_bytes
from kuzk_prover.termination import MAX_BYTES, brief, message_path, one_line, write_message

log = logging.getLogger("kuzk_prover.lane")

_WHOLE_RUN = (
    "this lane holds the GPU phase for the prover's whole run; a prover that makes lane calls"
    " runs under `kuzk-lane run --calls -- CMD`"
)


class LaneAgent:
    """What the prover's calls do to its lane, one call at a time. ``reporter`` is None
    outside a partition pod: calls are checked the same, and nothing is written."""

    def __init__(self, reporter: ProverReporter | None, *, calls: bool) -> None:
        self.reporter, self.calls = reporter, calls
        self.holding = False
        self.result: str | None = None
        self._lock = threading.Lock()

    def handle(self, line: str) -> str:
        """The reply to one protocol line: ``ok`` once the call is done, or ``error`` and
        what was wrong, having written nothing."""
        try:
            call = parse_call(line)
            with self._lock:
                return ok(self._apply(call))
        except CallRefused as error:
            log.warning("refused the prover's call %r: %s", one_line(line, 80), error)
            return refused(str(error))

    def _apply(self, call: Call) -> str:
        if call.verb == RESULT:
            self.result = contract_result(call.argument)
            return ""
        name = f"{call.verb} {call.argument}".strip()
        if not self.calls:
            msg = f"{name}: {_WHOLE_RUN}"
            raise CallRefused(msg)
        if call.verb == STAGE and call.argument != COMMITTING:
            if self.holding:
                msg = f"{name}: this lane holds the GPU phase; release-gpu first"
                raise CallRefused(msg)
            if self.reporter is not None:
                self.reporter.on_stage(call.argument)
            return ""
        if call.verb == ACQUIRE:
            if self.holding:
                msg = "acquire: this lane already holds the GPU phase"
                raise CallRefused(msg)
            return self.acquire()
        # release-gpu, or stage committing: the GPU phase is over.
        if not self.holding:
            msg = f"{name}: this lane does not hold the GPU phase"
            raise CallRefused(msg)
        self.holding = False
        if self.reporter is not None:
            self.reporter.release_gpu()
        return ""

    def acquire(self) -> str:
        """Hold the GPU phase (waiting for it); CallRefused saying why it is not held."""
        if self.reporter is None:
            self.holding = True
            return "not in a partition pod: no lane to share"
        got = self.reporter.acquire()
        if got is Acquired.GRANTED:
            self.holding = True
            return ""
        worker = self.reporter.worker_status
        if got is Acquired.WAITING:
            msg = (f"acquire: another lane held the GPU phase of WorkerStatus {worker} for"
                   f" {self.reporter.gpu_wait:.0f} s")
        elif got is Acquired.GONE:
            msg = (f"acquire: this lane was removed from WorkerStatus {worker} (the operator's"
                   " release or sweep)")
        else:
            msg = (f"acquire: no lane to hold the GPU phase with on {self.reporter.node} (it"
                   f" never joined, or the API server stayed unreachable for"
                   f" {self.reporter.outage_budget:.0f} s)")
        raise CallRefused(msg)


def contract_result(text: str) -> str:
    """``text`` as the pod contract's result JSON (the operator's own reading,
    ``kuzk.contract.pod.parse_result``), compacted; CallRefused saying what is wrong."""
    try:
        parse_result(text)
    except ValueError as error:
        msg = f"result: {error}"
        raise CallRefused(msg) from None
    compact = json.dumps(json.loads(text), separators=(",", ":"), sort_keys=True)
    if len(compact.encode()) >= MAX_BYTES:
        msg = f"result: {len(compact.encode())} bytes, the termination message holds {MAX_BYTES}"
        raise CallRefused(msg)
    return compact


def settle(returncode: int, result: str | None, own_message: bool,
           last_words: str = "") -> tuple[int, str | None]:
    """The agent's exit code and the termination message it writes (None: it writes none),
    from how CMD ended, the result CMD handed over, whether CMD wrote a message itself, and
    the last line CMD wrote on its standard error (its reason, when it failed)."""
    if returncode == OK_EXIT_CODE:
        if result is not None:
            return OK_EXIT_CODE, result
        if own_message:
            return OK_EXIT_CODE, None
        return FAILED_EXIT_CODE, (f"the prover exited {OK_EXIT_CODE} without a result"
                                  " (kuzk-lane result FILE)")
    said = f": {last_words}" if last_words else ""
    if returncode < 0:
        reason = f"the prover was killed by {signal.Signals(-returncode).name}"
        return FAILED_EXIT_CODE, None if own_message else reason
    if returncode == INVALID_INPUT_EXIT_CODE:
        reason = f"invalid input: {last_words}" if last_words else (
            f"invalid input: the prover exited {returncode}")
        return INVALID_INPUT_EXIT_CODE, None if own_message else reason
    return returncode, None if own_message else f"the prover exited {returncode}{said}"


class LastWords(threading.Thread):
    """Copies the prover's standard error to the agent's, line by line as it comes, and keeps
    its last non-empty line: the reason a failed prover gives is what the user reads."""

    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(name="kuzk-lane-stderr", daemon=True)
        self.stream, self.line = stream, ""

    def run(self) -> None:
        out = sys.stderr.buffer
        for raw in iter(functools.partial(self.stream.readline, MAX_LINE), b""):
            out.write(raw)
            out.flush()
            if text := one_line(raw.decode(errors="replace")):
                self.line = text


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        agent = cast(LaneServer, self.server).agent
        while line := self.rfile.readline(MAX_LINE):
            self.wfile.write((agent.handle(line.decode(errors="replace")) + "\n").encode())


class LaneServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The agent's socket: one thread per connection, each line one call to ``agent``."""

    daemon_threads = True

    def __init__(self, name: str, agent: LaneAgent) -> None:
        self.agent = agent
        super().__init__(address(name), _Handler)


def _write(path: Path, text: str) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        write_message(path, text)
    except OSError as exc:
        log.error("could not write the termination message to %s: %s", path, exc)


def _has_message(path: Path) -> bool:
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def run(command: list[str], *, calls: bool, env: Mapping[str, str] | None = None) -> int:
    """Run ``command`` as the pod's prover on its lane; the pod contract's exit code."""
    env = dict(os.environ if env is None else env)
    log_format = env.get(LOG_FORMAT_ENV) or "text"
    logs.configure(log_format if log_format in logs.FORMATS else "text")
    path = message_path(env)
    try:
        pod = inputs.from_env(env).identity
    except InputError as exc:
        line = one_line(f"invalid input: {exc}")
        log.error("%s", line)
        _write(path, line + "\n")
        return INVALID_INPUT_EXIT_CODE
    logs.set_context(job=f"{pod.namespace}/{pod.job}", partition=pod.partition,
                     pod=pod.pod_name or None)
    # The agent answers the pod's probes from its pulse: an agent that stops is killed, and
    # its lane freed. Once the prover runs, the pulse stops while the prover is stopped
    # (SIGSTOP, a debugger), so a stopped prover holding the GPU phase loses it as the
    # built-in one does; a prover that hangs while running is not seen.
    try:
        with Pulse() as pulse, answering(pulse, env):
            return _run_on_lane(command, calls, env, path, pod, pulse)
    except Unanswerable as exc:
        log.error("%s", exc)
        _write(path, f"{exc}\n")
        return FAILED_EXIT_CODE


def _run_on_lane(command: list[str], calls: bool, env: dict[str, str], path: Path,
                 pod: PodIdentity, pulse: Pulse) -> int:
    reporter = for_partition_pod(pod, env)
    if reporter is not None:
        reporter.join_or_go_on()
    agent = LaneAgent(reporter, calls=calls)
    name = f"@kuzk-lane-{pod.pod_uid or 'local'}-{os.getpid()}"
    server = LaneServer(name, agent)
    threading.Thread(target=server.serve_forever, name="kuzk-lane", daemon=True).start()
    if not calls and reporter is not None and reporter.acquire() is Acquired.GRANTED:
        agent.holding = True
    terminated = threading.Event()
    note: str | None = None
    last_words: LastWords | None = None
    try:
        child = subprocess.Popen(command, env={**env, SOCKET_ENV: name}, stderr=subprocess.PIPE)
    except OSError as exc:
        returncode = NOT_STARTED_EXIT_CODE
        note = f"cannot start the prover {command[0]!r}: {brief(exc)}"
    else:
        pulse.beating = lambda: not stopped(child.pid)
        assert child.stderr is not None
        last_words = LastWords(child.stderr)
        last_words.start()
        if reporter is not None:
            # The lane's memory is the prover's, measured on the writes its calls make; its
            # device memory is not the agent's to see and stays 0.
            reporter.host_memory = functools.partial(host_memory_bytes, child.pid)
            reporter.device_memory = lambda: 0
        def forward(signum: int, frame: FrameType | None) -> None:
            terminated.set()
            child.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        returncode = child.wait()
        # Its standard error ends when it exits (unless a child of its own keeps it open).
        last_words.join(timeout=1)
        log.info("the prover exited with %d", returncode)
    server.shutdown()
    server.server_close()
    if terminated.is_set():
        code, message = TERMINATED_EXIT_CODE, None
        log.warning("SIGTERM: the prover was stopped before finishing; no result written")
    elif note is not None:
        code, message = returncode, note
    else:
        code, message = settle(returncode, agent.result, _has_message(path),
                               last_words.line if last_words else "")
    if message is not None:
        log.log(logging.INFO if code == OK_EXIT_CODE else logging.ERROR, "%s",
                "result written" if code == OK_EXIT_CODE else message)
        _write(path, message)
    if reporter is not None:
        reporter.release("succeeded" if code == OK_EXIT_CODE else "failed")
    return code
