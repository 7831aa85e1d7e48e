"""The real ``kuzk-prover`` as a partition pod under the process kubelet: it ends Succeeded and
its termination message carries a commitment that an independent ``verify`` accepts."""

from __future__ import annotations

import json

from kuzk.contract.proofjob import resolve
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from kuzk_prover import inputs as prover_inputs
from kuzk_prover.verify import verify
from testenv.cluster import Cluster
from tests.integration.helpers import wait_phase


def test_prover_pod_succeeds_with_a_verifiable_commitment(cluster: Cluster, namespace: str,
                                                          nodes) -> None:
    nodes(1, gpus=1)
    job = {
        "apiVersion": "kuzk.io/v1alpha1", "kind": "ProofJob",
        "metadata": {"name": "e2e", "namespace": namespace, "uid": "0" * 8 + "-e2e"},
        "spec": {"proofKind": "snap-update", "circuitLog2": 12,
                 "sector": {"miner": 1234, "number": 5678}},
    }
    manifest = pod_manifest(resolve(job), 3, 1, PodSettings(image="kuzk-prover:test"))
    # Standalone: no owner (the garbage collector would remove an orphan), no finalizer, no
    # PriorityClass, the namespace's default ServiceAccount.
    manifest["metadata"].pop("ownerReferences")
    manifest["metadata"].pop("finalizers")
    manifest["spec"].pop("priorityClassName")
    manifest["spec"]["serviceAccountName"] = "default"
    manifest["spec"]["containers"][0]["env"].append({"name": "KUZK_BACKEND", "value": "numpy"})
    cluster.core.create_namespaced_pod(namespace, manifest)

    pod = wait_phase(cluster.core, namespace, manifest["metadata"]["name"], "Succeeded",
                     "Failed", timeout=120)
    term = pod.status.container_statuses[0].state.terminated
    assert pod.status.phase == "Succeeded", term.message
    result = json.loads(term.message)
    assert result["backend"] == "numpy"
    assert result["circuitLog2"] == 12
    assert result["self_check"] is True or result["self_check"] == "passed"
    env = {e["name"]: e.get("value") for e in manifest["spec"]["containers"][0]["env"]}
    proof = prover_inputs.from_env({**env, "KUZK_PARTITION": "3"}).proof
    assert verify(proof, result["commitment"])
