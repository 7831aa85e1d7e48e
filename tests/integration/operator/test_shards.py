"""Two operator shards, each scoped to one namespace and running under its own ServiceAccount
with the chart's sharded RBAC (operator.shards), share the lanes of one GPU. Each handles only
its own jobs: every job succeeds with one pod per partition, each shard's Events and writes are
its own, and neither shard's sweep, before or after a restart, releases or marks the other
shard's lanes, though its cache holds none of their pods."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk.contract import api
from kuzk.contract.workerstatus import worker_status_name
from testenv.cluster import CHART, Cluster
from testenv.controlplane import free_port
from testenv.kubelet import ProcessKubelet
from testenv.waiting import wait_for
from tests.conftest import NODE_SELECTOR
from tests.integration.helpers import pod_ready
from tests.integration.operator.conftest import (
    OperatorProcess,
    Plan,
    apply_job,
    job_pods,
    proofjob,
    wait_job,
)

SHARD_A, SHARD_B = "a", "b"


@pytest.fixture
def second_namespace(cluster: Cluster, namespace: str, nodes: Any) -> Iterator[str]:
    """Another namespace on the test's nodes (``nodes`` gave the test's namespace their node
    selector), with the prover's ServiceAccount."""
    name = f"{namespace[:50]}-b"
    selector = cluster.core.read_namespace(namespace).metadata.annotations[NODE_SELECTOR]
    cluster.core.create_namespace({"metadata": {"name": name,
                                                "annotations": {NODE_SELECTOR: selector}}})
    cluster.core.create_namespaced_service_account(name, {"metadata": {"name": "kuzk-prover"}})
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    rbac.create_cluster_role_binding({
        "metadata": {"name": f"kuzk-prover-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kuzk-prover"},
        "subjects": [{"kind": "ServiceAccount", "name": "kuzk-prover", "namespace": name}],
    })
    yield name
    rbac.delete_cluster_role_binding(f"kuzk-prover-{name}")
    for pod in cluster.core.list_namespaced_pod(name).items:
        with contextlib.suppress(ApiException):
            if pod.metadata.finalizers:
                cluster.core.patch_namespaced_pod(pod.metadata.name, name,
                                                  {"metadata": {"finalizers": None}})
            cluster.core.delete_namespaced_pod(pod.metadata.name, name, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        cluster.core.delete_namespace(name)


@pytest.fixture
def shard_identities(cluster: Cluster, namespace: str, second_namespace: str,
                     tmp_path: Path) -> Iterator[dict[str, Path]]:
    """The chart's operator RBAC rendered with two shards (a: the test's namespace, b: the
    second; the release in the test's namespace), each shard's ServiceAccount, and a
    kubeconfig with each one's token."""
    release = f"sh{uuid.uuid4().hex[:6]}"
    shards = [{"name": SHARD_A, "namespaces": [namespace]},
              {"name": SHARD_B, "namespaces": [second_namespace]}]
    version = client.VersionApi(cluster.api).get_code().git_version
    rendered = cluster.helm(
        "template", release, str(CHART), "--namespace", namespace, "--kube-version", version,
        "--show-only", "templates/operator-rbac.yaml",
        "--set-json", f"operator.shards={json.dumps(shards)}").stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d]
    kubeconfigs = {}
    for shard in (SHARD_A, SHARD_B):
        sa = f"{release}-kuzk-operator-{shard}"
        cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
        token = cluster.core.create_namespaced_service_account_token(
            sa, namespace, client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)))
        path = tmp_path / f"shard-{shard}.kubeconfig"
        path.write_text(yaml.safe_dump(cluster.plane.kubeconfig_for(
            f"system:serviceaccount:{namespace}:{sa}", {"token": token.status.token})))
        kubeconfigs[shard] = path
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    yield kubeconfigs
    cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=yaml.safe_dump_all(
        [o for o in objects if "namespace" not in o["metadata"]]))


def sweeps(port: int) -> float:
    """How many sweeps the operator behind ``port`` has run (its /metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kuzk_operator_work_duration_seconds_count")
               and 'kind="sweep"' in line)


def test_two_shards_share_a_gpu_and_each_touches_only_its_own_jobs(
        cluster: Cluster, namespace: str, second_namespace: str, nodes, run_operator,
        plan: Plan, shard_identities: dict[str, Path]) -> None:
    kubelet: ProcessKubelet = nodes(1, gpus=1, replicas=4)
    node = next(iter(kubelet.nodes))
    gpu = worker_status_name(node, kubelet.nodes[node].gpu_uuids()[0])
    custom = client.CustomObjectsApi(cluster.api)
    spaces = {SHARD_A: namespace, SHARD_B: second_namespace}
    ports = {SHARD_A: free_port(), SHARD_B: free_port()}

    def shard(name: str) -> OperatorProcess:
        return run_operator("--metrics-port", str(ports[name]), "--metrics-address",
                            "127.0.0.1", scope_to=spaces[name],
                            env={"KUBECONFIG": str(shard_identities[name]),
                                 "POD_NAME": f"shard-{name}"})

    def lanes() -> dict[str, dict[str, Any]]:
        """The GPU's lanes by pod UID (none before its first lane creates it)."""
        try:
            ws = custom.get_cluster_custom_object(api.GROUP, api.VERSION,
                                                  api.WORKERSTATUS_PLURAL, gpu)
        except ApiException as e:
            if e.status == 404:
                return {}
            raise
        return {lane["pod"]["uid"]: lane for w in (ws.get("status") or {}).get("workers") or []
                for lane in w.get("lanes") or []}

    def of(shard_name: str) -> dict[str, dict[str, Any]]:
        return {uid: lane for uid, lane in lanes().items()
                if lane["job"]["namespace"] == spaces[shard_name]}

    plan.set(**{"*": {"hold": True, "claim": True}})
    operators = {name: shard(name) for name in (SHARD_A, SHARD_B)}
    for name, ns in spaces.items():
        apply_job(cluster, ns, proofjob(f"job-{name}", partitions=2))
    # Each stand-in joins, writes its lane synthesizing and holds there.
    wait_for(lambda: [lane["stage"] for lane in lanes().values()] == ["synthesizing"] * 4, 120,
             "four lanes, two of each shard, on one GPU, each synthesizing")
    b_lanes = of(SHARD_B)

    def read_job_b() -> dict[str, Any]:
        return dict(custom.get_namespaced_custom_object(
            api.GROUP, api.VERSION, second_namespace, api.PROOFJOB_PLURAL, f"job-{SHARD_B}"))

    def job_b_synthesizing() -> bool:
        parts = (read_job_b().get("status") or {}).get("partitions") or []
        return len(parts) == 2 and all(p.get("state") == api.SYNTHESIZING for p in parts)

    # Shard b's own status of its job trails its lanes (kuzk.operator.controller.STAGE_SECONDS):
    # once it has caught up, nothing of shard b's writes to the job while its lanes hold still,
    # so any write to it below would be shard a's.
    wait_for(job_b_synthesizing, 60, "shard b's job status to show its lanes synthesizing")

    # A's pod stops (SIGSTOP): it is not ready within seconds, and shard a sweeps the GPU to
    # mark its lane, seeing no pod of shard b's in its cache.
    (stopped_uid, _), *_ = sorted(of(SHARD_A).items())
    runner = kubelet.runners[stopped_uid]
    # A pod not yet ready is starting, not stuck: the pod is stopped once it is ready.
    wait_for(lambda: pod_ready(cluster.core, namespace, runner.name), 60, "shard a's pod ready")
    pid = runner.containers[0].proc.pid
    os.killpg(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: of(SHARD_A).get(stopped_uid, {}).get("notLiveSince"), 60,
                 "shard a marks its stopped pod's lane not live")
        assert of(SHARD_B) == b_lanes, "shard a's sweep left shard b's lanes as they were"

        # Shard a restarts: it lists again and sweeps the GPU at once (its pod is not live).
        before = sweeps(ports[SHARD_A])
        operators[SHARD_A].stop(signal.SIGKILL)
        job_b = read_job_b()
        operators[SHARD_A] = shard(SHARD_A)
        wait_for(lambda: _quietly(sweeps, ports[SHARD_A]) >= 1, 60,
                 "the restarted shard a to sweep the GPU")
        assert before >= 1
        assert of(SHARD_B) == b_lanes, "shard a's restart left shard b's lanes as they were"
        again = read_job_b()
        assert again["metadata"]["resourceVersion"] == job_b["metadata"]["resourceVersion"], (
            "shard a's restart did not touch shard b's job")
    finally:
        os.killpg(pid, signal.SIGCONT)
    wait_for(lambda: not of(SHARD_A).get(stopped_uid, {}).get("notLiveSince"), 60,
             "the restarted shard a marks its pod live again")

    plan.go()
    for name, ns in spaces.items():
        job = wait_job(cluster, ns, f"job-{name}", "Succeeded", timeout=180)
        assert [p["attempt"] for p in job["status"]["partitions"]] == [1, 1]
        pods = job_pods(cluster, ns, f"job-{name}")
        assert sorted(p.metadata.labels[api.LABEL_PARTITION] for p in pods) == ["0", "1"], (
            "one pod per partition: none created twice")

        def posted(ns: str = ns) -> list[Any]:
            return [e for e in cluster.core.list_namespaced_event(ns).items
                    if e.reporting_component == "kuzk-operator"]

        # The Events of a sync are posted after its status write, which wait_job saw.
        events = wait_for(posted, 30, f"shard {name}'s Events on its job")
        assert {e.reporting_instance for e in events} == {f"shard-{name}"}, (
            "every Event on a shard's job is its own")
    for name, operator in operators.items():
        text = operator.text()
        other = spaces[SHARD_B if name == SHARD_A else SHARD_A]
        assert not re.search(rf"(?<![-\w]){re.escape(other)}(?![-\w])", text), (
            f"shard {name} never names the other shard's namespace")
        assert "Traceback" not in text and "Forbidden" not in text, text[-3000:]


def _quietly(fn: Any, *args: Any) -> float:
    """``fn(*args)``, or 0 while the operator's /metrics is not up yet."""
    try:
        return float(fn(*args))
    except OSError:
        return 0.0
