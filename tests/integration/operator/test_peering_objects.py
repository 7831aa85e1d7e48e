"""``kuzk operator`` creates the peering object its replicas share in every watched namespace
that lacks one, whichever of them already has it."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk.operator.peering import GROUP, VERSION, PeeringError, ensure_peering
from testenv.cluster import Cluster


def _peering(cluster: Cluster, namespace: str, name: str) -> bool:
    try:
        client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "kopfpeerings", name)
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def test_every_watched_namespace_gets_its_peering(kuzk_installed: Cluster,
                                                  namespace: str) -> None:
    cluster = kuzk_installed
    second = f"{namespace}-b"
    cluster.core.create_namespace({"metadata": {"name": second}})
    try:
        ensure_peering(cluster.api, "kz", [namespace])
        ensure_peering(cluster.api, "kz", [namespace, second])  # the first exists already
        assert _peering(cluster, namespace, "kz") and _peering(cluster, second, "kz")
        with pytest.raises(PeeringError, match="namespace 'no-such-namespace-here' does not"):
            ensure_peering(cluster.api, "kz", ["no-such-namespace-here"])
    finally:
        cluster.core.delete_namespace(second)
