"""A kube-apiserver restart while partitions start costs nothing: each real prover's join
meets refused connections, tries again, and gets through once the API server is back; no
partition is retried (with ``backoffLimitPerPartition: 0`` a counted retry would fail the job)
and no partition's message carries a traceback.

The partition pods run the real prover behind a gate that the test opens once kube-apiserver
is down, so the provers start (and join) during the outage, every time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, job_pods, proofjob, wait_job

RETRYING = "trying again for up to"


def _gated_prover(gate: Path) -> tuple[str, str]:
    script = f"until [ -e '{gate}' ]; do sleep 0.05; done; exec kuzk-prover"
    return ("--prover-command", json.dumps(["sh", "-c", script]))


def _prover_logs(kubelet: ProcessKubelet) -> dict[str, Path]:
    with kubelet.lock:
        runners = list(kubelet.runners.values())
    return {r.name: r.containers[0].log for r in runners}


def _met_the_outage(kubelet: ProcessKubelet, seen: dict[str, Path]) -> bool:
    """Whether every started prover has met the outage in its join: it says it is trying
    again, or it has already exited."""
    with kubelet.lock:
        runners = list(kubelet.runners.values())
    for runner in runners:
        seen[runner.name] = runner.containers[0].log
    return len(runners) == 2 and all(
        r.containers[0].terminated is not None
        or (
            r.containers[0].log.exists()
            and RETRYING in r.containers[0].log.read_text(errors="replace")
        )
        for r in runners
    )


def test_provers_ride_out_an_api_server_restart(
    cluster: Cluster, namespace: str, nodes: Any, run_operator: Any, tmp_path: Path
) -> None:
    kubelet = nodes(1, gpus=2)
    gate = tmp_path / "start-provers"
    run_operator(*_gated_prover(gate))
    job = proofjob("outage", partitions=3, circuitLog2=12, backoffLimitPerPartition=0)
    apply_job(cluster, namespace, job)

    def two_running() -> bool:
        pods = job_pods(cluster, namespace, "outage")
        return sum(p.status.phase == "Running" for p in pods) == 2

    wait_for(two_running, 60, "two partition pods running", interval=0.02)
    seen: dict[str, Path] = {}
    with cluster.plane.apiserver_down():
        gate.touch()
        wait_for(lambda: _met_the_outage(kubelet, seen), 30, "both provers joining")

    done = wait_job(cluster, namespace, "outage", "Succeeded", timeout=180)
    status = done["status"]
    assert status["retries"] == 0 and status["failed"] == 0
    assert [p["attempt"] for p in status["partitions"]] == [1, 1, 1]
    for part in status["partitions"]:
        assert "Traceback" not in (part.get("message") or ""), part
    for pod in job_pods(cluster, namespace, "outage"):
        (container,) = pod.status.container_statuses
        terminated = container.state.terminated
        assert terminated.exit_code == 0, terminated.message
        assert json.loads(terminated.message)["self_check"] is True
    for name, path in _prover_logs(kubelet).items() | seen.items():
        text = path.read_text(errors="replace")
        assert "Traceback" not in text, f"{name}:\n{text}"
    met = [name for name, path in seen.items() if RETRYING in path.read_text(errors="replace")]
    assert len(met) >= 2
    for name in met:
        text = seen[name].read_text(errors="replace")
        assert "join on" in text and "went through after" in text, f"{name}:\n{text}"
        assert "joined the lanes" in text, f"{name} joined once the API server was back"
