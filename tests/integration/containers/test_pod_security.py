"""Partition pods pass the Pod Security Admission ``restricted`` level, which the API server
enforces for a namespace labelled so; a pod without kuzk's hardening, or with the node-local
kernel cache (a hostPath), is refused there. The end-to-end test (tests/e2e/test_images.py)
runs them in such a namespace."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from kuzk.contract.proofjob import resolve
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from testenv.cluster import Cluster
from tests.integration.operator.conftest import proofjob

SETTINGS = PodSettings(image="localhost/kuzk-prover:any")


@pytest.fixture
def restricted(cluster: Cluster, namespace: str) -> str:
    cluster.core.patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    cluster.core.create_namespaced_service_account(
        namespace, {"metadata": {"name": SETTINGS.service_account_name}})
    return namespace


def _partition_pod(namespace: str, settings: PodSettings = SETTINGS) -> dict[str, Any]:
    job = proofjob("psa", "snap-update", partitions=2)
    job["metadata"].update(namespace=namespace, uid="00000000-0000-0000-0000-000000000001")
    pod = pod_manifest(resolve(job), 0, 1, settings)
    pod["spec"].pop("priorityClassName")  # admission of the class is not what is tested here
    return pod


def _admit(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> None:
    cluster.core.create_namespaced_pod(namespace, pod, dry_run="All")


def test_restricted_level_admits_partition_pods(cluster: Cluster, restricted: str) -> None:
    _admit(cluster, restricted, _partition_pod(restricted))


@pytest.mark.parametrize("weaken", ["pod-security-context", "container-security-context",
                                    "kernel-cache-on-the-node"])
def test_restricted_level_refuses_what_is_not_hardened(cluster: Cluster, restricted: str,
                                                       weaken: str) -> None:
    pod = _partition_pod(restricted)
    if weaken == "pod-security-context":
        del pod["spec"]["securityContext"]
    elif weaken == "container-security-context":
        del pod["spec"]["containers"][0]["securityContext"]
    else:
        pod = _partition_pod(restricted, dataclasses.replace(
            SETTINGS, kernel_cache_host_path="/var/cache/kuzk-kernels"))
    with pytest.raises(ApiException) as refused:
        _admit(cluster, restricted, pod)
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted:' in json.loads(refused.value.body)["message"]
