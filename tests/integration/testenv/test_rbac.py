"""A pod's process acts as its ServiceAccount, so RBAC applies to it as to a real pod."""

from __future__ import annotations

import sys

from testenv.cluster import Cluster
from tests.integration.helpers import PROGRAMS, pod, wait_phase


def _list_as_lister(cluster: Cluster, ns: str, name: str) -> str:
    cluster.core.create_namespaced_pod(
        ns, pod(name, [sys.executable, str(PROGRAMS / "list_configmaps.py")],
                serviceAccountName="lister")
    )
    got = wait_phase(cluster.core, ns, name, "Succeeded", "Failed")
    return str(got.status.container_statuses[0].state.terminated.message)


def test_service_account_is_denied_then_allowed(cluster: Cluster, namespace: str,
                                                nodes) -> None:
    nodes(1)
    cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": "lister"}})
    assert _list_as_lister(cluster, namespace, "before") == "403"

    cluster.kubectl("create", "role", "cm-reader", "-n", namespace, "--verb=list",
                    "--resource=configmaps")
    cluster.kubectl("create", "rolebinding", "cm-reader", "-n", namespace, "--role=cm-reader",
                    f"--serviceaccount={namespace}:lister")
    assert _list_as_lister(cluster, namespace, "after") == "200"
