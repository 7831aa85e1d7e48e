"""The lane agent outside a partition pod (no lane: nothing to write), as processes: a prover
under ``kuzk-lane run`` hands over its result and the agent writes it; how the prover ended
becomes the pod contract's exit code and message; every bad call is refused with one line and
changes nothing; and the agent and its calls run without NumPy. What the calls write to a
WorkerStatus is tested against the API server in tests/integration/operator/test_foreign_prover.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuzk_prover.alive import FILE_NAME, PULSE_S, age, stopped
from kuzk_prover.lane_agent import LaneAgent, LaneServer, settle
from kuzk_prover.lane_protocol import SOCKET_ENV, address
from testenv.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "foreign-prover" / "prover.sh"
C_SOURCE = ROOT / "examples" / "foreign-prover" / "prover.c"
BIN = Path(sys.executable).parent
LANE = [sys.executable, "-m", "kuzk_prover.lane"]
POD_ENV = {
    "KUZK_JOB": "job",
    "KUZK_JOB_UID": "job-uid",
    "KUZK_PARTITION": "3",
    "KUZK_ATTEMPT": "1",
    "KUZK_PROOF_KIND": "snap-update",
    "KUZK_INPUT": '{"circuitLog2":8,"partitions":16,"sector":{"miner":1,"number":2}}',
    "PROVER_SYNTH_SECONDS": "0",
    "PROVER_GPU_SECONDS": "0",
}


def _env(message: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("KUZK_", "POD_", "NODE_NAME", "KUBECONFIG"))}
    return {**base, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "TERMINATION_MESSAGE_PATH": str(message), **POD_ENV, **extra}


def _run(command: list[str], message: Path, *, calls: bool = True,
         **extra: str) -> subprocess.CompletedProcess[str]:
    flags = ["--calls"] if calls else []
    return subprocess.run([*LANE, "run", *flags, "--", *command], env=_env(message, **extra),
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_agent_and_its_calls_import_no_numpy() -> None:
    probe = ("import sys, kuzk_prover.lane, kuzk_prover.lane_agent;"
             " print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'cupy')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_the_shell_prover_hands_its_result_to_the_agent(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    done = _run(["sh", str(SCRIPT)], message)
    assert done.returncode == 0, done.stderr
    result = json.loads(message.read_text())
    assert result["commitment"] == "0x" + hashlib.sha256(b"job-uid/3").hexdigest()
    assert set(result) == {"commitment", "synth_ms", "gpu_ms"}


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler here")
def test_the_c_prover_speaks_the_line_protocol(tmp_path: Path) -> None:
    binary = tmp_path / "prover"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", str(binary), str(C_SOURCE)],
                   check=True, timeout=60)
    message = tmp_path / "termination-log"
    done = _run([str(binary)], message)
    assert done.returncode == 0, done.stderr
    assert json.loads(message.read_text())["commitment"] == "0x" + fnv1a64(b"job-uid/3")


def fnv1a64(data: bytes) -> str:
    """The C example's stand-in commitment."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) % 2**64
    return f"{value:016x}"


@pytest.mark.parametrize(
    ("script", "code", "line"),
    [
        ("exit 2", 2, "invalid input: the prover exited 2"),
        ("echo reading sectors >&2; echo 'sectors[1].replica: /s/sealed: no such file' >&2;"
         " exit 2", 2, "invalid input: sectors[1].replica: /s/sealed: no such file"),
        ("echo out of memory >&2; exit 3", 3, "the prover exited 3: out of memory"),
        ("kill -KILL $$", 1, "the prover was killed by SIGKILL"),
        ("echo own words > $TERMINATION_MESSAGE_PATH; exit 3", 3, "own words\n"),
    ],
)
def test_how_the_prover_ended_is_the_pods_exit_code_and_message(
        tmp_path: Path, script: str, code: int, line: str) -> None:
    message = tmp_path / "termination-log"
    done = _run(["sh", "-c", script], message)
    assert (done.returncode, message.read_text()) == (code, line)


def test_a_command_that_cannot_start_fails_with_its_name(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    done = _run([str(tmp_path / "no-such-prover")], message)
    assert done.returncode == 127
    assert message.read_text().startswith(f"cannot start the prover '{tmp_path}/no-such-prover'")


def test_a_bad_pod_contract_env_is_invalid_input(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    done = _run(["true"], message, KUZK_PARTITION="three")
    assert done.returncode == 2
    assert message.read_text() == "invalid input: KUZK_PARTITION='three' is not an integer\n"


def test_sigterm_reaches_the_prover_and_writes_no_result(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    started = tmp_path / "started"
    agent = subprocess.Popen(
        [*LANE, "run", "--calls", "--", "sh", "-c",
         f"trap 'exit 143' TERM; touch {started}; while :; do sleep 0.05; done"],
        env=_env(message), stderr=subprocess.DEVNULL)
    try:
        wait_for(started.exists, 30, "the prover started")
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=30) == 143
    finally:
        agent.kill()
        agent.wait()
    assert not message.exists() or message.read_text() == ""


def test_a_stopped_prover_stops_the_agents_pulse(tmp_path: Path) -> None:
    """The pod's probes read the agent's pulse: while the prover is stopped (SIGSTOP) it is not
    touched, so a stopped prover's pod turns not ready and is killed as the built-in prover's
    is; once the prover runs again the pulse goes on."""
    message, pid_file = tmp_path / "termination-log", tmp_path / "pid"
    pulse = tmp_path / FILE_NAME
    agent = subprocess.Popen(
        [*LANE, "run", "--calls", "--", "sh", "-c",
         f"echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; kill -STOP $$; exit 3"],
        env=_env(message, TMPDIR=str(tmp_path)), stderr=subprocess.DEVNULL)
    try:
        wait_for(pid_file.exists, 30, "the prover started")
        prover = int(pid_file.read_text())
        # Two periods of the pulse without a touch: it has stopped.
        wait_for(lambda: (age(pulse) or 0) > 2 * PULSE_S + 0.5, 20, "the pulse growing old")
        assert agent.poll() is None
        os.kill(prover, signal.SIGCONT)
        assert agent.wait(timeout=30) == 3
    finally:
        agent.kill()
        agent.wait()


def test_stopped_reads_the_process_state() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert not stopped(child.pid)
        child.send_signal(signal.SIGSTOP)
        wait_for(lambda: stopped(child.pid), 10, "the child stopped")
        child.send_signal(signal.SIGCONT)
        wait_for(lambda: not stopped(child.pid), 10, "the child running again")
    finally:
        child.kill()
        child.wait()
    assert not stopped(child.pid)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[LaneAgent, str]]:
    """An agent with no lane behind it, serving the protocol on an abstract socket."""
    lane = LaneAgent(None, calls=True)
    name = f"@kuzk-lane-test-{os.getpid()}-{id(lane)}"
    server = LaneServer(name, lane)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield lane, name
    server.shutdown()
    server.server_close()


def _call(name: str, *args: str, stdin: str = "") -> tuple[int, str]:
    done = subprocess.run([*LANE, *args], env={**os.environ, SOCKET_ENV: name}, input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)
    return done.returncode, done.stderr


def test_bad_calls_are_refused_with_one_line_and_change_nothing(
        agent: tuple[LaneAgent, str], tmp_path: Path) -> None:
    lane, name = agent
    bad = tmp_path / "result.json"
    bad.write_text('{"synth_ms": 3}')
    assert _call(name, "release-gpu") == (
        1, "kuzk-lane: release-gpu: this lane does not hold the GPU phase\n")
    assert _call(name, "stage", "committing") == (
        1, "kuzk-lane: stage committing: this lane does not hold the GPU phase\n")
    assert _call(name, "stage", "proving") == (
        1, "kuzk-lane: unknown stage 'proving'; expected one of synthesizing, synth_done,"
           " committing\n")
    code, line = _call(name, "result", str(bad))
    assert (code, line) == (
        1, "kuzk-lane: result: termination message has no hex commitment:"
           " '{\"synth_ms\": 3}'\n")
    assert _call(name, "result", "-", stdin="not json") == (
        1, "kuzk-lane: result: termination message is not JSON (Expecting value):"
           " 'not json'\n")
    assert _call(name, "result", str(tmp_path / "missing.json"))[1].startswith(
        f"kuzk-lane: result: cannot read {tmp_path}/missing.json: ")
    assert (lane.holding, lane.result) == (False, None)

    assert _call(name, "acquire") == (0, "")
    assert _call(name, "acquire") == (
        1, "kuzk-lane: acquire: this lane already holds the GPU phase\n")
    assert _call(name, "stage", "synthesizing") == (
        1, "kuzk-lane: stage synthesizing: this lane holds the GPU phase; release-gpu first\n")
    assert lane.holding
    assert _call(name, "release-gpu") == (0, "")
    assert not lane.holding


def test_the_line_protocol_answers_each_line(agent: tuple[LaneAgent, str]) -> None:
    _, name = agent
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(address(name))
        replies = connection.makefile("r")
        for line, reply in [("acquire", "ok not in a partition pod: no lane to share"),
                            ("hold", "error unknown call 'hold'; expected one of stage,"
                                     " acquire, release-gpu, result"),
                            ("acquire now", "error acquire takes nothing after it, got 'now'"),
                            ("stage committing", "ok"),
                            ('result {"commitment": "0xab"}', "ok")]:
            connection.sendall(f"{line}\n".encode())
            assert replies.readline() == reply + "\n"


def test_a_call_with_no_agent_behind_the_socket_says_so(tmp_path: Path) -> None:
    assert _call("@kuzk-lane-test-nobody", "acquire") == (
        1, "kuzk-lane: acquire: no lane agent at @kuzk-lane-test-nobody (Connection refused)\n")
    done = subprocess.run([*LANE, "stage", "synthesizing"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != SOCKET_ENV},
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (
        1, "kuzk-lane: KUZK_LANE_SOCKET is not set: a prover makes lane calls when it runs"
           " under `kuzk-lane run --calls -- CMD`\n")


def test_without_calls_the_agent_holds_the_gpu_for_the_whole_run(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    script = ('kuzk-lane acquire 2> "$TERMINATION_MESSAGE_PATH.err";'
              ' echo \'{"commitment": "0x01"}\' | kuzk-lane result -')
    done = _run(["sh", "-c", script], message, calls=False)
    assert done.returncode == 0, done.stderr
    assert message.read_text() == '{"commitment":"0x01"}'
    assert Path(f"{message}.err").read_text() == (
        "kuzk-lane: acquire: this lane holds the GPU phase for the prover's whole run; a"
        " prover that makes lane calls runs under `kuzk-lane run --calls -- CMD`\n")


@pytest.mark.parametrize(
    ("returncode", "result", "own", "expected"),
    [
        (0, '{"commitment":"0x01"}', False, (0, '{"commitment":"0x01"}')),
        (0, '{"commitment":"0x01"}', True, (0, '{"commitment":"0x01"}')),
        (0, None, True, (0, None)),
        (0, None, False, (1, "the prover exited 0 without a result (kuzk-lane result FILE)")),
        (7, None, False, (7, "the prover exited 7")),
        (2, None, False, (2, "invalid input: the prover exited 2")),
        (2, None, True, (2, None)),
        (-15, None, False, (1, "the prover was killed by SIGTERM")),
        (1, '{"commitment":"0x01"}', False, (1, "the prover exited 1")),
    ],
)
def test_settle(returncode: int, result: str | None, own: bool,
                expected: tuple[int, str | None]) -> None:
    assert settle(returncode, result, own) == expected
