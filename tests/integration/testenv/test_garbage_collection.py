"""kube-controller-manager's garbage collector deletes a pod whose owner is deleted."""

from __future__ import annotations

from pathlib import Path

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.helpers import gated, wait_gone


def test_pod_owned_by_configmap_is_collected(cluster: Cluster, namespace: str, nodes,
                                             tmp_path: Path) -> None:
    nodes(1)
    owner = cluster.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "owner"}, "data": {"k": "v"}}
    )
    manifest = gated("owned", tmp_path)
    manifest["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    ]
    cluster.core.create_namespaced_pod(namespace, manifest)
    wait_for(lambda: (tmp_path / "owned.started").exists(), 60, "owned pod running")

    cluster.core.delete_namespaced_config_map("owner", namespace)
    wait_gone(cluster.core, namespace, "owned", timeout=60)
    assert (tmp_path / "owned.sigterm").exists()
