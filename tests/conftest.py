"""Fixtures for every tier: ``cluster`` (one real control plane per test session, started on
first use, so unit tests never pay for it), ``namespace`` (a fresh namespace per test, with its
``default`` ServiceAccount ready, deleted afterwards), ``nodes`` (process-kubelet GPU nodes
for one test) and ``kuzk_installed`` (the CRDs, PriorityClasses and the prover's ClusterRole,
once per session)."""

from __future__ import annotations

import contextlib
import gc
import re
import subprocess
import uuid
import warnings
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from testenv.cluster import Cluster, install_kuzk
from testenv.controlplane import ControlPlane
from testenv.kubelet import ProcessKubelet
from testenv.nodes import NodeSpec
from testenv.waiting import wait_for


@pytest.hookimpl(tryfirst=True)  # before xdist's, which turns the groups into node IDs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the control-plane tests ``cluster``, and group the tests for ``pytest -n 3
    --dist loadgroup`` (what ``scripts/test`` runs) by the session control plane they share:
    the e2e tier on one worker's; the long tests (``worker("long")``: they wait on probes,
    deadlines and containers more than they compute) on another's; the other tests that use
    ``cluster`` on the third's, each group in file order. A test marked ``worker("e2e")``
    joins the e2e tier's. Tests that start a control plane of their own (the small
    benchmarks) and unit tests go wherever a worker is free."""
    for item in items:
        tier = item.path.relative_to(config.rootpath).parts[1:2]
        # Every test that starts a control plane (the session's through the ``cluster``
        # fixture, or one of its own as the small benchmarks do: every tier but unit) is
        # marked ``cluster``, so ``-m "not cluster"`` is the unit tier and starts none.
        if tier != ("unit",) or "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
        # The three workers then end at about the same moment (two cores: the long tests'
        # waits leave the CPU to the other two).
        worker = item.get_closest_marker("worker")
        if worker is not None:
            item.add_marker(pytest.mark.xdist_group(worker.args[0]))
        elif tier in (("e2e",), ("kind",)):
            item.add_marker(pytest.mark.xdist_group("e2e"))
        elif "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("cluster"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
        item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                     pytest.TestReport]:
    """When a test that has a namespace fails, attach what the cluster and the test's logs
    showed at that moment (its fixtures still run then): CI keeps only the test output."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    cluster, namespace = funcargs.get("cluster"), funcargs.get("namespace")
    if report.when == "call" and report.failed and cluster and namespace:
        report.sections.append(("cluster state at the failure",
                                _cluster_state(cluster, namespace, funcargs.get("tmp_path"))))
    return report


def _cluster_state(cluster: Cluster, namespace: str, logs: Path | None) -> str:
    parts = []
    for args in (("get", "nodes", "-o", "wide"),
                 ("get", "pods,proofjobs,workerstatuses", "-n", namespace, "-o", "wide"),
                 ("get", "proofjobs", "-n", namespace, "-o", "jsonpath={.items[*].status}"),
                 ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp")):
        try:
            out = cluster.kubectl(*args, check=False, timeout=20)
            text = out.stdout + out.stderr
        except subprocess.TimeoutExpired:
            text = "(timed out)"
        parts.append(f"$ kubectl {' '.join(args)}\n{text[-4000:]}")
    for log in sorted(logs.glob("*.log")) if logs else []:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        parts.append(f"--- last lines of {log.name}\n" + "\n".join(tail))
    return "\n".join(parts)


@pytest.fixture(autouse=True)
def _collect_left_connections(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a control-plane test (autouse: torn down last, once its event loops are closed),
    collect quietly what those loops (Kopf's in the in-process operator, pytest-asyncio's)
    left of their API connections: those close only when collected, and their
    ResourceWarning would otherwise fail whichever later test the collector happens to run
    in (``filterwarnings = error``)."""
    yield
    if request.node.get_closest_marker("cluster") is None:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    plane = ControlPlane()
    plane.start()
    try:
        yield Cluster(plane)
    finally:
        plane.stop()


def _short(name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:40].strip("-")


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"{_short(request.node.name)}-{uuid.uuid4().hex[:5]}"
    cluster.core.create_namespace({"metadata": {"name": name}})

    def sa_ready() -> bool:
        try:
            cluster.core.read_namespaced_service_account("default", name)
        except ApiException:
            return False
        return True

    wait_for(sa_ready, 30, f"ServiceAccount default in {name}")
    yield name
    for pod in cluster.core.list_namespaced_pod(name).items:
        with contextlib.suppress(ApiException):
            if pod.metadata.finalizers:
                cluster.core.patch_namespaced_pod(
                    pod.metadata.name, name, {"metadata": {"finalizers": None}}
                )
            cluster.core.delete_namespaced_pod(pod.metadata.name, name, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        cluster.core.delete_namespace(name)


NODE_SELECTOR = "scheduler.alpha.kubernetes.io/node-selector"
TEST_NODES = "kuzk.test/nodes"


@pytest.fixture
def nodes(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[
    Callable[..., ProcessKubelet]
]:
    """Start process-kubelet nodes for this test: ``nodes(2, gpus=2)``, with ``replicas=N``
    time-slicing replicas per GPU and ``memory`` allocatable. Node names are unique to the test;
    the nodes and their pods are removed at teardown. When the test has a ``namespace``, its
    pods are scheduled only onto these nodes (a namespace node selector), so a scheduler that
    still sees an earlier test's node, as one did after an API server restart, cannot bind a
    pod to a node that is gone."""
    stack = contextlib.ExitStack()
    prefix = f"{_short(request.node.name)[:20]}-{uuid.uuid4().hex[:4]}"
    if "namespace" in request.fixturenames:
        cluster.core.patch_namespace(request.getfixturevalue("namespace"), {"metadata": {
            "annotations": {NODE_SELECTOR: f"{TEST_NODES}={prefix}"}}})

    def start(count: int = 1, *, gpus: int = 2, replicas: int = 1, memory: str = "64Gi",
              **labels: str) -> ProcessKubelet:
        specs = [NodeSpec(f"{prefix}-n{i}", gpus=gpus, replicas=replicas, memory=memory,
                          labels={TEST_NODES: prefix, **labels})
                 for i in range(count)]
        kubelet = stack.enter_context(cluster.kubelet(specs))
        for spec in specs:
            wait_for(lambda s=spec: _node_ready(cluster.core, s.name), 60, f"node {spec.name}")
        return kubelet

    with stack:
        yield start


def _node_ready(core: client.CoreV1Api, name: str) -> bool:
    """Ready, and schedulable as kube-scheduler sees it: the node lifecycle controller taints
    a new node ``node.kubernetes.io/not-ready`` and removes the taint only once it has seen
    the node Ready, which takes seconds when kube-controller-manager is busy."""
    try:
        node = core.read_node(name)
    except ApiException:
        return False
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
    lifecycle = [t for t in node.spec.taints or [] if t.key.startswith("node.kubernetes.io/")]
    return ready and not lifecycle


@pytest.fixture(scope="session")
def kuzk_installed(cluster: Cluster) -> Cluster:
    install_kuzk(cluster)
    return cluster
