"""A partition pod, running as a ServiceAccount bound to the ``kuzk-prover`` ClusterRole of
charts/kuzk/files/prover-rbac.yaml, may create and write its own node's GPU's WorkerStatus
(join a lane, hold the GPU phase, and wait for it on a watch of the object) and nothing else:
ProofJobs and Pods answer 403, and with the admission policy of
charts/kuzk/files/worker-node-policy.yaml a WorkerStatus of another node's GPU is refused,
created or written, naming spec.nodeName. The token
the process kubelet requests is bound to the Pod, so it carries the node-name claim the
policy reads. A ServiceAccount that may list WorkerStatuses (as the operator does) is not
held to its node."""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

from kuzk.contract import api as kapi
from kuzk.contract.workerstatus import worker_status_name
from kuzk.contract.workerstatus.decisions import Gpu
from kuzk.contract.workerstatus.writes import join
from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.waiting import wait_for
from tests.integration.helpers import DOWNWARD, pod, wait_phase
from tests.integration.workers.conftest import (
    delete_worker_statuses,
    new_assignment,
    read_worker_status,
)

FILES = Path(__file__).parents[3] / "charts" / "kuzk" / "files"
PROGRAM = Path(__file__).parent / "programs" / "prover_permissions.py"
PLURALS = {
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
OPERATOR_LIKE_RULES = [
    {"apiGroups": ["kuzk.io"], "resources": ["workerstatuses"], "verbs": ["get", "list"]},
    {"apiGroups": ["kuzk.io"], "resources": ["workerstatuses/status"], "verbs": ["get", "update"]},
]


def load(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((FILES / name).read_text()) if doc]


@contextlib.contextmanager
def cluster_objects(api: client.ApiClient, docs: list[dict[str, Any]]) -> Iterator[None]:
    """Create cluster-scoped objects; delete them on the way out."""
    made: list[dict[str, Any]] = []
    try:
        for doc in docs:
            utils.create_from_dict(api, doc)
            made.append(doc)
        yield
    finally:
        custom = client.CustomObjectsApi(api)
        for doc in reversed(made):
            group, version = doc["apiVersion"].split("/")
            name = doc["metadata"]["name"]
            try:
                custom.delete_cluster_custom_object(group, version, PLURALS[doc["kind"]], name)
            except ApiException as error:
                if error.status != 404:
                    raise


def renamed(docs: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """The chart's objects under names unique to this test (a chart install may hold theirs)."""
    for doc in docs:
        doc["metadata"]["name"] += suffix
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += suffix
    return docs


def binding(role: str, namespace: str, account: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{role}-{namespace}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


def refused_create(cluster: Cluster, namespace: str, node: str, other: str) -> str | None:
    """What the API server answers a prover that creates a WorkerStatus of a GPU of node
    ``other``, owned by that node, when it refuses it (None while it does not: a policy takes
    a moment after its creation to be in force). The probe is a dry-run create as the
    prover's pod-bound token would make it (impersonated, with its node claim)."""
    probe = client.ApiClient(cluster.api.configuration)
    probe.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:prover")
    probe.set_default_header(
        "Impersonate-Extra-authentication.kubernetes.io%2fnode-name", node)
    owner = cluster.core.read_node(other).metadata.uid
    body = {
        "apiVersion": kapi.API_VERSION,
        "kind": kapi.WORKERSTATUS_KIND,
        "metadata": {"name": worker_status_name(other, "GPU-create"), "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": other, "uid": owner}]},
        "spec": {"nodeName": other, "gpu": {"uuid": "GPU-create"}},
    }
    try:
        client.CustomObjectsApi(probe).create_cluster_custom_object(
            kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL, body, dry_run="All")
    except ApiException as error:
        if error.status == 403 and "own node" in str(error.body):
            return str(json.loads(error.body).get("message", ""))
    finally:
        probe.close()
    return None


def run_program(
    cluster: Cluster, namespace: str, name: str, account: str, mode: str, other: str
) -> dict[str, Any]:
    env = [
        *DOWNWARD,
        {"name": "KUZK_JOB", "value": "perm-job"},
        {"name": "KUZK_JOB_UID", "value": str(uuid.uuid4())},
        {"name": "KUZK_PARTITION", "value": "0"},
        {"name": "KUZK_ATTEMPT", "value": "1"},
        {"name": "KUZK_PROOF_KIND", "value": "winning-post"},
    ]
    manifest = pod(
        name,
        [sys.executable, str(PROGRAM), mode, other],
        gpus=1,
        serviceAccountName=account,
        container={"env": env},
    )
    cluster.core.create_namespaced_pod(namespace, manifest)
    done = wait_phase(cluster.core, namespace, name, "Succeeded", "Failed", timeout=90)
    message = done.status.container_statuses[0].state.terminated.message
    assert done.status.phase == "Succeeded", message
    return dict(json.loads(message))


def test_prover_writes_only_its_own_nodes_worker_status(
    cluster: Cluster,
    admin: client.ApiClient,
    namespace: str,
    nodes: Callable[..., ProcessKubelet],
    worker_status: Callable[[], str],
) -> None:
    kubelet = nodes(1, gpus=1)
    (node,) = kubelet.nodes
    other = worker_status()
    foreign = join(admin, other, Gpu("GPU-foreign"), new_assignment())
    suffix = f"-{uuid.uuid4().hex[:6]}"
    (prover_role,) = renamed(load("prover-rbac.yaml"), suffix)
    role = prover_role["metadata"]["name"]
    lister = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"kuzk-lister{suffix}"},
        "rules": OPERATOR_LIKE_RULES,
    }
    for account in ("prover", "lister"):
        cluster.core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    client.CustomObjectsApi(admin).create_namespaced_custom_object(
        kapi.GROUP,
        kapi.VERSION,
        namespace,
        kapi.PROOFJOB_PLURAL,
        {
            "apiVersion": kapi.API_VERSION,
            "kind": kapi.PROOFJOB_KIND,
            "metadata": {"name": "perm-job"},
            "spec": {"proofKind": "winning-post", "sector": {"miner": 1, "number": 2}},
        },
    )
    rbac = [
        prover_role,
        lister,
        binding(role, namespace, "prover"),
        binding(lister["metadata"]["name"], namespace, "lister"),
    ]
    try:
        with cluster_objects(admin, rbac + renamed(load("worker-node-policy.yaml"), suffix)):
            created = wait_for(lambda: refused_create(cluster, namespace, node, other), 30,
                               "the node policy in force")
            prover = run_program(cluster, namespace, "prover", "prover", "prover", other)
            listing = run_program(cluster, namespace, "lister", "lister", "lister", other)
    finally:
        delete_worker_statuses(admin, node)

    assert prover["user"] == f"system:serviceaccount:{namespace}:prover"
    assert prover["token_node"] == node, "the pod-bound token names the node"
    assert prover["extra_node"] == [node], "the API server sees the node-name claim"
    own = worker_status_name(node, kubelet.nodes[node].gpu_uuids()[0])
    assert (prover["worker"], prover["stage"], prover["released"]) == (own, "gpu", True)
    # A lane waits for the GPU phase on a watch of its GPU's WorkerStatus: allowed.
    assert prover["neighbour_worker"] == own
    assert prover["neighbour_waiting"] == "waiting", prover["neighbour_waiting"]
    assert (prover["neighbour_after"], prover["neighbour_left"]) == ("granted", True)
    assert prover["gpu"] == kubelet.nodes[node].gpu_uuids()[0]
    for what in ("proofjob", "proofjob_status", "pod"):
        assert prover[what]["status"] == 403, (what, prover[what])
    assert prover["other"]["status"] == 403
    assert (
        f"spec.nodeName: a prover may write only the WorkerStatuses of its own node {node},"
        f" not {foreign} of node {other}" in prover["other"]["message"]
    )
    assert f"kuzk-prover-own-node{suffix}" in prover["other"]["message"]
    assert (f"spec.nodeName: a prover may write only the WorkerStatuses of its own node {node},"
            f" not {worker_status_name(other, 'GPU-create')} of node {other}" in created)
    assert listing["other"] == {"status": 200, "worker": foreign}
    (written,) = read_worker_status(admin, foreign)["status"]["workers"]
    assert (written["gpu"]["uuid"], len(written["lanes"])) == ("GPU-foreign", 2)
