"""Fixtures for the WorkerStatus tests: ``crds`` (kuzk's CRDs applied from ``kuzk.contract.crds``,
once per session, left installed), ``admin`` (the cluster's admin ApiClient with the CRDs in
place), ``worker_status`` (makes a Node object of a unique name for its GPUs' WorkerStatuses,
deleted at teardown with them) and ``make_assignment`` (fresh assignments with generated
UIDs); ``run_operator``, ``plan`` and ``prover_account`` come from the operator tests, for
the tests that run the operator."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk.contract import api as kapi
from kuzk.contract.crds import all_crds
from kuzk.contract.workerstatus import worker_status_name
from kuzk.contract.workerstatus.decisions import Assignment
from testenv.cluster import Cluster
from tests.integration.operator.conftest import plan, prover_account, run_operator

__all__ = ["plan", "prover_account", "run_operator"]


@pytest.fixture(scope="session")
def crds(cluster: Cluster) -> None:
    # Server-side apply with kubectl's field manager, as the suite's kuzk_installed does: the
    # second of the two is then a no-op. Any other write would update the CRDs, and an updated
    # CRD's storage is re-initialised under whoever watches it at the time.
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(all_crds()))
    for crd in all_crds():
        name = crd["metadata"]["name"]
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", f"crd/{name}")


@pytest.fixture
def admin(cluster: Cluster, crds: None) -> client.ApiClient:
    return cluster.api


def create_worker_status(api: client.ApiClient, node: str, uuid: str) -> dict[str, Any]:
    """The WorkerStatus of GPU ``uuid`` on ``node``, without an owner (the node is imaginary,
    so the garbage collector must not be given a missing owner to act on)."""
    body = {
        "apiVersion": kapi.API_VERSION,
        "kind": kapi.WORKERSTATUS_KIND,
        "metadata": {"name": worker_status_name(node, uuid)},
        "spec": {"nodeName": node, "gpu": {"uuid": uuid}},
    }
    created = client.CustomObjectsApi(api).create_cluster_custom_object(
        kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, body
    )
    return cast(dict[str, Any], created)


def delete_worker_status(api: client.ApiClient, name: str) -> None:
    with contextlib.suppress(ApiException):
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, name
        )


def read_worker_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    got = client.CustomObjectsApi(api).get_cluster_custom_object(
        kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, name
    )
    return cast(dict[str, Any], got)


def delete_node(api: client.ApiClient, node: str) -> None:
    """Delete a Node made for a test and the WorkerStatuses of its GPUs (the garbage collector
    would, later)."""
    with contextlib.suppress(ApiException):
        client.CoreV1Api(api).delete_node(node)
    delete_worker_statuses(api, node)


def delete_worker_statuses(api: client.ApiClient, node: str) -> None:
    """Delete the WorkerStatuses of ``node``'s GPUs."""
    objects = client.CustomObjectsApi(api)
    listed = objects.list_cluster_custom_object(
        kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, field_selector=f"spec.nodeName={node}")
    for item in listed.get("items") or []:
        delete_worker_status(api, item["metadata"]["name"])


@pytest.fixture
def worker_status(admin: client.ApiClient) -> Iterator[Callable[[], str]]:
    """``worker_status()`` makes a Node object named ``ws-<random>`` (no kubelet behind it)
    whose GPUs' WorkerStatuses the lanes' joins create, and returns its name; the Node and
    its WorkerStatuses are deleted at teardown."""
    names: list[str] = []

    def create() -> str:
        name = f"ws-{uuid.uuid4().hex[:10]}"
        client.CoreV1Api(admin).create_node({"metadata": {"name": name}})
        names.append(name)
        return name

    yield create
    for name in names:
        delete_node(admin, name)


def new_assignment(
    job: str = "snap", partition: int = 0, attempt: int = 1, *, job_uid: str | None = None
) -> Assignment:
    pod_uid = str(uuid.uuid4())
    return Assignment(
        job_namespace="provers",
        job_name=job,
        job_uid=job_uid or str(uuid.uuid5(uuid.NAMESPACE_URL, job)),
        proof_kind="snap-update",
        partition=partition,
        attempt=attempt,
        pod_name=f"{job}-p{partition}-a{attempt}",
        pod_uid=pod_uid,
    )


@pytest.fixture
def make_assignment() -> Callable[..., Assignment]:
    return new_assignment
