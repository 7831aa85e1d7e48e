"""nvidia.com/gpu capacity is enforced by kube-scheduler and GPU UUIDs are never shared."""

from __future__ import annotations

import json
from pathlib import Path

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.helpers import gated, read_pod, wait_phase


def _unschedulable(cluster: Cluster, ns: str, name: str) -> bool:
    p = read_pod(cluster.core, ns, name)
    if p is None or p.status.phase != "Pending":
        return False
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in p.status.conditions or [])


def test_two_gpus_run_two_pods_and_the_third_waits(cluster: Cluster, namespace: str, nodes,
                                                   tmp_path: Path) -> None:
    nodes(1, gpus=2)
    names = ["g1", "g2", "g3"]
    for n in names:
        cluster.core.create_namespaced_pod(namespace, gated(n, tmp_path))

    def started() -> list[str]:
        return sorted(n for n in names if (tmp_path / f"{n}.started").exists())

    wait_for(lambda: len(started()) == 2, 60, "two pods running")
    running = started()
    (waiting,) = set(names) - set(running)
    wait_for(lambda: _unschedulable(cluster, namespace, waiting), 30, f"{waiting} Unschedulable")
    assert len(started()) == 2

    gpus = {n: json.loads((tmp_path / f"{n}.started").read_text())["NVIDIA_VISIBLE_DEVICES"]
            for n in running}
    assert len(set(gpus.values())) == 2

    first, second = running
    (tmp_path / f"{first}.go").touch()
    wait_phase(cluster.core, namespace, first, "Succeeded")
    wait_for(lambda: (tmp_path / f"{waiting}.started").exists(), 60, f"{waiting} running")
    third_gpu = json.loads((tmp_path / f"{waiting}.started").read_text())[
        "NVIDIA_VISIBLE_DEVICES"]
    assert third_gpu != gpus[second]
    assert third_gpu == gpus[first]
    for n in (second, waiting):
        (tmp_path / f"{n}.go").touch()
        wait_phase(cluster.core, namespace, n, "Succeeded")
