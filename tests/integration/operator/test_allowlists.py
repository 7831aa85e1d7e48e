"""What a ProofJob author may choose is allowlisted twice: the chart's admission policy
refuses a ProofJob naming a prover image or PriorityClass off the lists (and a node path,
which the CRD no longer has, or memory above the chart's limit) at ``kubectl apply``, with a
message that names the field and the allowed values; a ProofJob that got in without the
policy is failed by the operator with the condition Rejected and the same message, and gets no
pod (memory excepted: admission only)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from testenv.cluster import Cluster, chart_objects
from testenv.waiting import wait_for
from tests.integration.operator.conftest import Plan, condition, job_pods, proofjob, wait_job

CHART_IMAGE = "ghcr.io/kuzk/prover:0.1.0"  # the chart's default prover.image
BAD = {
    "image": ({"image": "evil/miner:latest"},
              f"spec.prover.image 'evil/miner:latest' is not allowed; allowed images: "
              f"{CHART_IMAGE}"),
    "class": ({"priorityClassName": "system-node-critical"},
              "spec.prover.priorityClassName 'system-node-critical' is not allowed; allowed"
              " classes: kuzk-critical, kuzk-high, kuzk-normal"),
}


def _apply(cluster: Cluster, namespace: str, job: dict[str, Any], *extra: str) -> Any:
    return cluster.kubectl("apply", "-n", namespace, *extra, "-f", "-",
                           input=yaml.safe_dump(job), check=False)


@pytest.fixture
def policy(kuzk_installed: Cluster, namespace: str) -> Iterator[None]:
    """The chart's ProofJob policy with its default lists, bound to this test's namespace;
    returns once it is in force (a policy takes a moment after its creation)."""
    cluster = kuzk_installed
    docs = chart_objects(cluster, "proofjob-policy.yaml")
    for doc in docs:
        doc["metadata"]["name"] += f"-{namespace}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += f"-{namespace}"
            doc["spec"]["matchResources"] = {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": namespace}}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    probe = proofjob("probe", prover=BAD["image"][0])
    wait_for(lambda: BAD["image"][1] in _apply(cluster, namespace, probe,
                                               "--dry-run=server").stderr,
             30, "the policy in force")
    try:
        yield
    finally:
        for doc in docs:
            with contextlib.suppress(Exception):
                cluster.kubectl("delete", doc["kind"], doc["metadata"]["name"],
                                "--ignore-not-found")


def test_admission_refuses_choices_off_the_lists_and_passes_the_allowed(
        cluster: Cluster, namespace: str, policy: None) -> None:
    for name, (prover, message) in BAD.items():
        out = _apply(cluster, namespace, proofjob(f"bad-{name}", prover=prover))
        assert out.returncode != 0, name
        assert message in out.stderr, out.stderr
    out = _apply(cluster, namespace,
                 proofjob("node-path", prover={"kernelCacheHostPath": "/etc"}))
    assert out.returncode != 0 and "kernelCacheHostPath" in out.stderr, out.stderr
    # Memory above the chart's prover.filecoin.maxMemory (256Gi), asked or limited.
    for kind in ("requests", "limits"):
        out = _apply(cluster, namespace, proofjob(
            f"greedy-{kind}", prover={"resources": {kind: {"memory": "300Gi"}}}))
        assert out.returncode != 0, kind
        assert (f"spec.prover.resources.{kind}.memory 300Gi is above the administrator's"
                " limit 256Gi") in out.stderr, out.stderr
    for prover in ({}, {"image": CHART_IMAGE}, {"priorityClassName": "kuzk-high"},
                   {"resources": {"requests": {"memory": "254Gi", "cpu": 2}}}):
        out = _apply(cluster, namespace, proofjob("fine", prover=prover), "--dry-run=server")
        assert out.returncode == 0, (prover, out.stderr)


def test_the_operator_rejects_what_got_past_admission(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    plan.set(**{"*": {"seconds": 0.2}})
    run_operator("--allowed-prover-image=kuzk-standin:test",
                 "--allowed-prover-image=registry.example/kuzk/*",
                 "--allowed-priority-class=kuzk-normal")
    for name, (prover, message) in {
        "image": ({"image": "evil/miner:latest"},
                  "spec.prover.image 'evil/miner:latest' is not allowed; allowed images:"
                  " kuzk-standin:test, registry.example/kuzk/* (an entry ending in * is a"
                  " prefix)"),
        "class": ({"priorityClassName": "kuzk-critical"},
                  "spec.prover.priorityClassName 'kuzk-critical' is not allowed; allowed"
                  " classes: kuzk-normal"),
    }.items():
        assert _apply(cluster, namespace, proofjob(f"bad-{name}", prover=prover)).returncode == 0
        job = wait_job(cluster, namespace, f"bad-{name}", "Failed", timeout=60)
        rejected = condition(job, "Rejected")
        assert rejected is not None and rejected["status"] == "True"
        assert rejected["message"] == message
        assert job_pods(cluster, namespace, f"bad-{name}") == []
    assert _apply(cluster, namespace, proofjob("fine", partitions=1)).returncode == 0
    job = wait_job(cluster, namespace, "fine", "Succeeded", timeout=60)
    assert condition(job, "Rejected")["status"] == "False"
