"""Running ``kuzk status-server`` as its own process against the test control plane."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from testenv.cluster import Cluster
from testenv.controlplane import free_port, stop_group, tail
from testenv.waiting import wait_for


@dataclass
class StatusServer:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return requests.get(self.url + path, timeout=10, **kwargs)

    def status(self, **params: str) -> dict[str, Any]:
        response = self.get("/status", params=params)
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = self.get("/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            msg = f"status server exited {self.proc.returncode}:\n{tail(self.log)}"
            raise AssertionError(msg)
        try:
            return self.get("/readyz").status_code == 200
        except requests.ConnectionError:
            return False

    def stop(self) -> None:
        stop_group(self.proc, signal.SIGTERM, grace=10)


def start(cluster: Cluster, log: Path, *args: str, port: int | None = None) -> StatusServer:
    port = port or free_port()
    argv = [sys.executable, "-m", "kuzk.cli", "status-server", "--host", "127.0.0.1",
            "--port", str(port), "--kubeconfig", str(cluster.kubeconfig), *args]
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    server = StatusServer(proc, port, log)
    wait_for(server.ready, 30, "the status server's /readyz")
    return server


@contextmanager
def running(cluster: Cluster, log: Path, *args: str) -> Iterator[StatusServer]:
    server = start(cluster, log, *args)
    try:
        yield server
    finally:
        server.stop()
