"""The process kubelet keeps its nodes alive as a kubelet does: it renews their Leases, so
kube-controller-manager's node lifecycle controller keeps them Ready and untainted."""

from __future__ import annotations

from kubernetes import client

from testenv.cluster import Cluster
from testenv.nodes import HEARTBEAT_SECONDS
from testenv.waiting import wait_for


def test_node_lease_is_renewed(cluster: Cluster, nodes) -> None:
    kubelet = nodes(1)
    name = next(iter(kubelet.nodes))
    coord = client.CoordinationV1Api(cluster.api)
    first = coord.read_namespaced_lease(name, "kube-node-lease").spec.renew_time
    wait_for(lambda: coord.read_namespaced_lease(name, "kube-node-lease").spec.renew_time > first,
             HEARTBEAT_SECONDS * 3, "the lease renewed")
    node = cluster.core.read_node(name)
    assert not [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
