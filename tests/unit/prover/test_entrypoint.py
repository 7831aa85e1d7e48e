"""``kuzk-prover`` keeps the pod contract when run as a process: exit 2 with a one-line reason
(on stderr and in the termination message) for bad input, the result JSON and exit 0 on
success, and a prompt non-zero exit with no result file on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuzk.contract import api
from kuzk_prover.inputs import make_input
from kuzk_prover.verify import verify

COMMAND = [sys.executable, "-m", "kuzk_prover.entrypoint"]
GOOD_INPUT = {"sector": {"miner": 1234, "number": 5678}, "circuitLog2": 10, "partitions": 4}


def _env(tmp_path: Path, **overrides: str | None) -> dict[str, str]:
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    env.update(
        KUZK_JOB="default/proof-1",
        KUZK_JOB_UID="0d4c0c1e-1111-2222-3333-444455556666",
        KUZK_PARTITION="2",
        KUZK_ATTEMPT="1",
        KUZK_PROOF_KIND="snap-update",
        KUZK_INPUT=json.dumps(GOOD_INPUT),
        KUZK_BACKEND="numpy",
        TERMINATION_MESSAGE_PATH=str(tmp_path / "termination-log"),
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _input_with(**changes: object) -> str:
    return json.dumps({**GOOD_INPUT, **changes})


BAD_ENV: dict[str, tuple[dict[str, str | None], str]] = {
    "missing partition": ({"KUZK_PARTITION": None}, "KUZK_PARTITION is missing"),
    "partition out of range": ({"KUZK_PARTITION": "4"}, "KUZK_PARTITION=4 is not in [0, 4)"),
    "negative partition": ({"KUZK_PARTITION": "-1"}, "KUZK_PARTITION=-1 is not in"),
    "partition not a number": ({"KUZK_PARTITION": "two"}, "KUZK_PARTITION='two' is not an"),
    "bad proof kind": ({"KUZK_PROOF_KIND": "stark"}, "KUZK_PROOF_KIND='stark' is not one of"),
    "circuitLog2 too small": (
        {"KUZK_INPUT": _input_with(circuitLog2=3)},
        "KUZK_INPUT.circuitLog2=3 is not in [4, 27]",
    ),
    "circuitLog2 too large": (
        {"KUZK_INPUT": _input_with(circuitLog2=28)},
        "KUZK_INPUT.circuitLog2=28 is not in [4, 27]",
    ),
    "too many partitions": (
        {"KUZK_INPUT": _input_with(partitions=65)},
        "KUZK_INPUT.partitions=65 is not in [1, 64]",
    ),
    "bad randomness": (
        {"KUZK_INPUT": _input_with(randomness="0x12")},
        "KUZK_INPUT.randomness='0x12' is not 0x followed by 64 hex digits",
    ),
    "input not json": ({"KUZK_INPUT": "{sector"}, "KUZK_INPUT is not JSON"),
    "unknown input key": ({"KUZK_INPUT": _input_with(extra=1)}, "unknown keys ['extra']"),
    "a real proof's partition": ({"KUZK_INPUT": _input_with(filecoin={"sectorSize": 2048})},
                                 "KUZK_INPUT.filecoin is a real proof's; kuzk-prover proves"
                                 " synthetic witnesses only"),
    "missing attempt": ({"KUZK_ATTEMPT": None}, "KUZK_ATTEMPT is missing"),
    "unknown backend": ({"KUZK_BACKEND": "tpu"}, "KUZK_BACKEND='tpu' is not one of"),
}


@pytest.mark.parametrize("case", sorted(BAD_ENV))
def test_bad_env_exits_2_with_a_one_line_reason(tmp_path: Path, case: str) -> None:
    overrides, reason = BAD_ENV[case]
    done = subprocess.run(COMMAND, env=_env(tmp_path, **overrides), capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0], done.stderr
    message = (tmp_path / "termination-log").read_text()
    assert message.count("\n") == 1 and reason in message


def test_success_writes_the_result_and_exits_0(tmp_path: Path) -> None:
    done = subprocess.run(COMMAND, env=_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    raw = (tmp_path / "termination-log").read_bytes()
    assert len(raw) < 4096
    result = json.loads(raw)
    assert result["self_check"] is True
    assert (result["partition"], result["attempt"], result["circuitLog2"]) == (2, 1, 10)
    assert (result["backend"], result["device"]) == ("numpy", "cpu")
    assert result["synth_ms"] >= 0 and result["gpu_ms"] > 0
    assert list(tmp_path.iterdir()) == [tmp_path / "termination-log"]
    inputs = make_input(
        proof_kind="snap-update",
        miner=1234,
        sector=5678,
        randomness=None,
        circuit_log2=10,
        partition=2,
        partitions=4,
    )
    assert verify(inputs, result["commitment"])


def test_local_mode_prints_the_result(tmp_path: Path) -> None:
    flags = ["--local", "--proof-kind", "snap-update", "--partition", "3", "--circuit-log2", "8"]
    flags += ["--miner", "1234", "--sector", "5678", "--randomness", "0x" + "cd" * 32]
    done = subprocess.run([*COMMAND, *flags], env=_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["self_check"] is True and result["commitment"].startswith("0x")
    assert not (tmp_path / "termination-log").exists()


@pytest.mark.parametrize(
    "flags",
    [["--circuit-log2", "many"], ["--no-such-flag"], ["--proof-kind", "stark"]],
)
def test_argument_errors_exit_2_without_a_traceback(tmp_path: Path, flags: list[str]) -> None:
    done = subprocess.run([*COMMAND, *flags], env=_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "error:" in done.stderr


def test_partition_flags_without_local_are_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [*COMMAND, "--partition", "1"], env=_env(tmp_path), capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "need --local" in done.stderr


def test_forcing_cupy_without_a_device_is_a_clear_retryable_error(tmp_path: Path) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", "import cupy, sys; sys.exit(0 if cupy.is_available() else 1)"],
        capture_output=True,
    )
    if probe.returncode == 0:
        pytest.skip("CuPy runs here, so forcing it is not an error")
    env = _env(tmp_path, KUZK_BACKEND="cupy")
    done = subprocess.run(COMMAND, env=env, capture_output=True, text=True)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "KUZK_BACKEND=cupy but" in lines[0]
    assert "Traceback" not in done.stderr


@pytest.fixture
def big_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    env = _env(tmp_path, KUZK_INPUT=_input_with(circuitLog2=22))
    with subprocess.Popen(
        COMMAND, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            yield process, tmp_path / "termination-log"
        finally:
            if process.poll() is None:
                process.kill()


@pytest.mark.parametrize("stage", ["synthesizing", "gpu"])
def test_sigterm_mid_run_exits_non_zero_without_a_result(
    big_run: tuple[subprocess.Popen[str], Path], stage: str
) -> None:
    process, message = big_run
    entered = threading.Event()
    lines: list[str] = []

    def watch() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if f"stage={stage} " in line:
                entered.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert entered.wait(timeout=120), "".join(lines)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 143, "".join(lines)
    watcher.join(timeout=10)
    assert not message.exists()
    assert list(message.parent.iterdir()) == []


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    done = subprocess.run([*COMMAND, "--version"], env=_env(tmp_path), capture_output=True,
                          text=True)
    assert (done.returncode, done.stdout.strip()) == (0, f"kuzk-prover {api.version()}")
