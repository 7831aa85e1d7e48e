"""Status-server integration fixtures: ``status_server`` (``kuzk status-server`` for this
test's namespace, stopped afterwards) and ``operator`` (``kuzk operator`` for this namespace:
the stand-in prover by default, the real one with ``operator(real_prover=True)``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testenv.cluster import Cluster
from testenv.controlplane import stop_group

# The operator tests' fixtures ``plan`` and ``prover_account``, shared with these tests.
from tests.integration.operator.conftest import STANDIN, Plan, plan, prover_account  # noqa: F401
from tests.integration.status.server import StatusServer, start


@pytest.fixture
def status_server(kuzk_installed: Cluster, namespace: str,
                  tmp_path: Path) -> Iterator[Callable[..., StatusServer]]:
    """``status_server(*extra_flags)`` starts one watching this test's namespace."""
    started: list[StatusServer] = []

    def launch(*extra: str) -> StatusServer:
        server = start(kuzk_installed, tmp_path / f"status-{len(started)}.log",
                       "--namespace", namespace, *extra)
        started.append(server)
        return server

    yield launch
    for server in started:
        server.stop()


@pytest.fixture
def operator(prover_account: Cluster, namespace: str, plan: Plan,  # noqa: F811
             tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    cluster = prover_account
    started: list[subprocess.Popen[bytes]] = []

    def launch(*extra: str, real_prover: bool = False) -> subprocess.Popen[bytes]:
        prover = ["kuzk-prover"] if real_prover else [sys.executable, str(STANDIN),
                                                      str(plan.dir)]
        argv = [sys.executable, "-m", "kuzk.cli", "operator", "--namespace", namespace,
                "--standalone", "--prover-command", json.dumps(prover),
                "--prover-image", "kuzk-prover:test", *extra]
        with (tmp_path / f"operator-{len(started)}.log").open("wb") as out:
            proc = subprocess.Popen(argv, env=cluster.env(), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        return proc

    yield launch
    for proc in started:
        stop_group(proc, grace=20)
