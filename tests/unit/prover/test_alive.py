"""The prover's pulse, its answers to the pod's HTTP probes and ``kuzk-alive``, the exec
probe's command that reads it: fresh while the prover runs, failing when it is older than the
limit or missing, with a line that says why."""

from __future__ import annotations

import http.client
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kuzk.contract.pod import ALIVE_PATH, ALIVE_PORT, POD_IP_ENV
from kuzk_prover import alive, probes
from testenv.waiting import wait_for


def test_the_pulse_is_touched_while_it_runs_and_gone_after(tmp_path: Path) -> None:
    path = tmp_path / "pulse"
    with alive.Pulse(path, every=0.05):
        assert alive.age(path) is not None
        first = path.stat().st_mtime_ns
        wait_for(lambda: path.stat().st_mtime_ns != first, 5, "a second touch")
    assert not path.exists()


def test_kuzk_alive_passes_on_a_fresh_pulse_and_fails_on_an_old_or_missing_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pulse"
    assert alive.main(["--within", "10", "--file", str(path)]) == 1
    assert "no pulse at" in capsys.readouterr().out
    path.touch()
    assert alive.main(["--within", "10", "--file", str(path)]) == 0
    old = time.time() - 60
    os.utime(path, (old, old))
    assert alive.main(["--within", "30", "--file", str(path)]) == 1
    assert "s old (limit 30 s): it is stuck" in capsys.readouterr().out
    assert alive.main(["--within", "0", "--file", str(path)]) == 2


def test_the_probe_command_finds_the_pulse_in_the_pods_temporary_directory(
        tmp_path: Path) -> None:
    """The prover and its probe agree on the file through TMPDIR alone (no shell, no
    arguments but the limit), as the pod's exec probe runs it."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    probe = [sys.executable, "-m", "kuzk_prover.alive", "--within", "10"]
    assert subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 1
    (tmp_path / alive.FILE_NAME).touch()
    assert subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0


def _loopback() -> str:
    """An address of this machine's loopback that no other test's pod is likely to hold."""
    return f"127.254.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"


def _ask(ip: str, path: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection(ip, ALIVE_PORT, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode().strip()
    finally:
        connection.close()


def test_the_pods_probes_are_answered_from_the_pulse_over_http(tmp_path: Path) -> None:
    """200 while the last beat is at most ``within`` old, 503 once it is older (the lane
    agent's pulse stops beating while its prover is stopped); a malformed probe is told what
    the probe is."""
    ip = _loopback()
    env = {POD_IP_ENV: ip}
    with alive.Pulse(tmp_path / "pulse", every=0.05) as pulse, probes.answering(pulse, env):
        assert _ask(ip, f"{ALIVE_PATH}?within=5") == (200, "alive")
        pulse.beating = lambda: False
        wait_for(lambda: _ask(ip, f"{ALIVE_PATH}?within=0.3")[0] == 503, 10,
                 "not alive once the pulse stands still")
        assert _ask(ip, f"{ALIVE_PATH}?within=0.3") == (503, "not alive")
        assert _ask(ip, f"{ALIVE_PATH}?within=600") == (200, "alive")
        status, text = _ask(ip, f"{ALIVE_PATH}?within=-1")
        assert status == 400 and "within must be a number of seconds above 0" in text
        assert _ask(ip, f"{ALIVE_PATH}")[0] == 400
        assert _ask(ip, "/metrics") == (404, f"the probe is GET {ALIVE_PATH}?within=SECONDS")
    with pytest.raises(OSError):
        _ask(ip, f"{ALIVE_PATH}?within=5")


def test_outside_a_pod_nothing_listens_and_a_taken_address_is_a_clear_error(
        tmp_path: Path) -> None:
    with alive.Pulse(tmp_path / "pulse") as pulse:
        with probes.answering(pulse, {}) as server:
            assert server is None
        ip = _loopback()
        with socket.create_server((ip, ALIVE_PORT)), pytest.raises(
                probes.Unanswerable,
                match=f"cannot answer the pod's probes on {ip}:{ALIVE_PORT} \\(Address already"):
            probes.serve(pulse, {POD_IP_ENV: ip})
