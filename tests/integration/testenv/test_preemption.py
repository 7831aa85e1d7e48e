"""kube-scheduler preempts a lower-priority pod on a full GPU node; the victim is marked
DisruptionTarget and terminated, and the preemptor runs."""

from __future__ import annotations

import uuid
from pathlib import Path

from kubernetes import client

from tests.integration.helpers import gated, read_pod
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for


def test_high_priority_pod_preempts(cluster: Cluster, namespace: str, nodes,
                                    tmp_path: Path) -> None:
    sched = client.SchedulingV1Api(cluster.api)
    low, high = f"low-{uuid.uuid4().hex[:6]}", f"high-{uuid.uuid4().hex[:6]}"
    sched.create_priority_class({"metadata": {"name": low}, "value": 100})
    sched.create_priority_class({"metadata": {"name": high}, "value": 1000})
    try:
        nodes(1, gpus=1)
        cluster.core.create_namespaced_pod(namespace, gated("victim", tmp_path,
                                                            priorityClassName=low))
        wait_for(lambda: (tmp_path / "victim.started").exists(), 60, "victim running")

        seen_disruption: list[bool] = []

        def victim_disrupted_and_gone() -> bool:
            p = read_pod(cluster.core, namespace, "victim")
            if p is None:
                return True
            if any(c.type == "DisruptionTarget" and c.status == "True"
                   for c in p.status.conditions or []):
                seen_disruption.append(True)
            return False

        cluster.core.create_namespaced_pod(namespace, gated("preemptor", tmp_path,
                                                            priorityClassName=high))
        wait_for(victim_disrupted_and_gone, 60, "victim preempted", interval=0.02)
        assert seen_disruption, "victim never carried the DisruptionTarget condition"
        assert (tmp_path / "victim.sigterm").exists()
        wait_for(lambda: (tmp_path / "preemptor.started").exists(), 60, "preemptor running")
        (tmp_path / "preemptor.go").touch()
    finally:
        sched.delete_priority_class(low)
        sched.delete_priority_class(high)
