"""The Helm chart renders what kuzk's code defines, and bad values fail at render time with a
message that names the value (real helm, no cluster)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuzk import install
from tests.testenv import binaries

CHART = Path(__file__).resolve().parents[2] / "charts" / "kuzk"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.find("helm")), *args], capture_output=True, text=True,
                          timeout=60)


def render(*sets: str) -> list[dict[str, Any]]:
    args = ["template", "kz", str(CHART), "-n", "kuzk-system", "--kube-version", "1.37.2"]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_chart_lints() -> None:
    out = helm("lint", str(CHART), "--kube-version", "1.37.2")
    assert out.returncode == 0, out.stdout + out.stderr


def test_priority_classes_match_the_proof_kinds() -> None:
    rendered = {d["metadata"]["name"]: d for d in render() if d["kind"] == "PriorityClass"}
    for pc in install.priority_classes():
        got = rendered[pc["metadata"]["name"]]
        assert got["value"] == pc["value"]
        assert got["preemptionPolicy"] == pc["preemptionPolicy"]
    assert not [d for d in render("priorityClasses.create=false") if d["kind"] == "PriorityClass"]


def test_prover_role_is_the_shared_file_and_bound_cluster_wide() -> None:
    docs = render("prover.namespaces={a,b}")
    shared = yaml.safe_load((CHART / "files" / "prover-rbac.yaml").read_text())
    role = next(d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"] == "kz-kuzk-prover")
    assert role["rules"] == shared["rules"]
    assert role["metadata"]["labels"]["app.kubernetes.io/instance"] == "kz"
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding"
                and d["roleRef"]["name"] == "kz-kuzk-prover"]
    assert sorted(b["subjects"][0]["namespace"] for b in bindings) == ["a", "b"]
    kinds = {d["kind"] for d in docs}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds
    assert "ValidatingAdmissionPolicy" not in {
        d["kind"] for d in render("prover.nodeRestriction=false")}


def test_containers_are_locked_down() -> None:
    for doc in render():
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        spec = doc["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert sc["seccompProfile"]["type"] == "RuntimeDefault"


def test_operator_args_follow_values() -> None:
    (deploy,) = [d for d in render("operator.watchNamespaces={x,y}", "operator.replicas=3")
                 if d["kind"] == "Deployment"]
    assert deploy["spec"]["replicas"] == 3
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "operator"
    assert "--namespace=x" in args and "--namespace=y" in args
    assert '--prover-command=["kuzk-prover"]' in args


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("operator.logFormat=xml", "logFormat"),
        ("operator.replicas=0", "replicas"),
        ("prover.gpuResource=gpu", "gpuResource"),
        ("operator.bogus=1", "bogus"),
        ("priorityClasses.normal=-5", "normal"),
    ],
)
def test_bad_values_fail_at_render_time(setting: str, named: str) -> None:
    out = helm("template", "kz", str(CHART), "--kube-version", "1.37.2", "--set", setting)
    assert out.returncode != 0
    assert named in out.stderr
