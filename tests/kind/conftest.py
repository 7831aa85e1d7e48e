"""The kind tier: the user path on a kind cluster through pytest-kind (its ``kind_cluster``
fixture). It runs only where a Docker engine and the ``kind`` binary are available; elsewhere
every test here is skipped with the reason, never failed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def missing(config: pytest.Config) -> str | None:
    """Why the kind tier cannot run here, or None when it can."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "docker info timed out: no reachable Docker engine"
    if info.returncode != 0:
        detail = (info.stderr.strip().splitlines() or ["no detail"])[-1]
        return f"the docker client reaches no Docker engine ({detail})"
    if not (config.getoption("kind_bin") or shutil.which("kind")):
        return "kind is not installed (put it on PATH or pass --kind-bin)"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = [item for item in items if item.path.is_relative_to(Path(__file__).parent)]
    if not here:
        return
    reason = missing(config)
    if reason:
        skip = pytest.mark.skip(reason=f"kind tier needs Docker and kind: {reason}")
        for item in here:
            item.add_marker(skip)
