"""kube-scheduler preempts a lower-priority pod on a full GPU node; the victim is marked
DisruptionTarget and terminated, and the preemptor runs."""

from __future__ import annotations

import uuid
from pathlib import Path

from kubernetes import client, watch

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.helpers import gated, read_pod


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

        # A watch sees every version of the victim, so the short-lived DisruptionTarget
        # condition cannot fall between two polls.
        victim = cluster.core.read_namespaced_pod("victim", namespace)
        stream = watch.Watch()
        cluster.core.create_namespaced_pod(namespace, gated("preemptor", tmp_path,
                                                            priorityClassName=high))
        seen_disruption = False
        for event in stream.stream(cluster.core.list_namespaced_pod, namespace,
                                   field_selector="metadata.name=victim",
                                   resource_version=victim.metadata.resource_version,
                                   timeout_seconds=60):
            pod = event["object"]
            seen_disruption |= any(c.type == "DisruptionTarget" and c.status == "True"
                                   for c in pod.status.conditions or [])
            if event["type"] == "DELETED":
                stream.stop()
        assert read_pod(cluster.core, namespace, "victim") is None, "victim not preempted"
        assert seen_disruption, "victim never carried the DisruptionTarget condition"
        assert (tmp_path / "victim.sigterm").exists()
        wait_for(lambda: (tmp_path / "preemptor.started").exists(), 60, "preemptor running")
        (tmp_path / "preemptor.go").touch()
    finally:
        sched.delete_priority_class(low)
        sched.delete_priority_class(high)
