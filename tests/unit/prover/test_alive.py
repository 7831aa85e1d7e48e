"""The prover's pulse and ``kuzk-alive``, the probe command that reads it: fresh while the
prover runs, failing when it is older than the limit or missing, with a line that says why."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kuzk_prover import alive
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
