"""The Helm chart renders what kuzk's code defines, and bad values fail at render time with a
message that names the value (real helm, no cluster)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kuzk import api
from tests.testenv import binaries

CHART = Path(__file__).resolve().parents[2] / "charts" / "kuzk"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.find("helm")), *args], capture_output=True, text=True,
                          timeout=60)


KUBE = "1.37.2"
# Every optional part of the chart switched on.
ALL_ON = (
    "metrics.serviceMonitor.enabled=true",
    "metrics.serviceMonitor.labels.release=prometheus",
    "operator.watchNamespaces={team-a,team-b}",
    "prover.namespaces={team-a,team-b}",
    "statusServer.serviceType=NodePort",
)


def render(*sets: str, release: str = "kz", extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = ["template", release, str(CHART), "-n", "kuzk-system", "--kube-version", KUBE, *extra]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("sets", [(), ALL_ON], ids=["defaults", "all-on"])
def test_chart_lints_strict(sets: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART), "--kube-version", KUBE]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("sets", [(), ALL_ON], ids=["defaults", "all-on"])
def test_manifests_validate_against_the_kubernetes_schemas(sets: tuple[str, ...]) -> None:
    docs = render(*sets, extra=("--include-crds",))
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "Service", "ValidatingAdmissionPolicy",
            "Job", "PriorityClass"} <= kinds
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            continue  # a Prometheus Operator kind: no Kubernetes schema; checked below
        kubernetes_validate.validate(doc, KUBE, strict=True)
    assert ("ServiceMonitor" in kinds) == bool(sets)


def test_status_server_deployment_service_and_probes() -> None:
    docs = render()
    deploy = one(docs, "Deployment", "kz-kuzk-status")
    assert deploy["spec"]["replicas"] == 2
    pod = deploy["spec"]["template"]
    assert deploy["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kuzk-status-server", "app.kubernetes.io/instance": "kz"}
    (c,) = pod["spec"]["containers"]
    assert c["args"][0] == "status-server"
    assert "--port=9821" in c["args"] and "--keep-finished=10m" in c["args"]
    assert c["ports"] == [{"name": "http", "containerPort": 9821}]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert pod["spec"]["serviceAccountName"] == "kz-kuzk-status"
    operator = one(docs, "Deployment", "kz-kuzk-operator")["spec"]["template"]["spec"]
    assert pod["spec"]["securityContext"] == operator["securityContext"]
    assert c["securityContext"] == operator["containers"][0]["securityContext"]

    svc = one(docs, "Service", "kz-kuzk-status")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 9821, "targetPort": "http",
                                     "protocol": "TCP"}]
    assert svc["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    scrape = {"prometheus.io/scrape": "true", "prometheus.io/port": "9821",
              "prometheus.io/path": "/metrics"}
    assert pod["metadata"]["annotations"] == scrape
    # On the pods only: annotation-based discovery of pods and endpoints would otherwise
    # scrape every replica twice.
    assert "annotations" not in svc["metadata"]
    quiet = render("metrics.annotations=false", "statusServer.replicas=3")
    assert "annotations" not in one(quiet, "Service", "kz-kuzk-status")["metadata"]
    assert one(quiet, "Deployment", "kz-kuzk-status")["spec"]["replicas"] == 3


def test_status_server_rbac_is_read_only() -> None:
    docs = render()
    role = one(docs, "ClusterRole", "kz-kuzk-status")
    granted = {(g, r): set(rule["verbs"]) for rule in role["rules"]
               for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == {("kuzk.io", "proofjobs"): {"get", "list", "watch"},
                       ("kuzk.io", "workerstatuses"): {"get", "list", "watch"},
                       ("", "pods"): {"get", "list", "watch"},
                       ("", "nodes"): {"get", "list", "watch"}}
    binding = one(docs, "ClusterRoleBinding", "kz-kuzk-status")
    assert binding["roleRef"]["name"] == "kz-kuzk-status"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kz-kuzk-status",
                                    "namespace": "kuzk-system"}]


def test_service_monitor_when_enabled_or_when_its_api_exists() -> None:
    assert "ServiceMonitor" not in {d["kind"] for d in render()}
    sm = one(render("metrics.serviceMonitor.enabled=true",
                    "metrics.serviceMonitor.labels.release=prom"), "ServiceMonitor",
             "kz-kuzk-status")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "kuzk-status-server"
    assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s",
                                        "scrapeTimeout": "10s"}]
    detected = render(extra=("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor"))
    assert "ServiceMonitor" in {d["kind"] for d in detected}


def test_two_releases_share_no_cluster_scoped_name() -> None:
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding"}
    names = {}
    for release in ("one", "two"):
        docs = render("priorityClasses.create=false", release=release)
        names[release] = {(d["kind"], d["metadata"]["name"]) for d in docs
                          if d["kind"] in cluster_scoped}
        policies = sorted(d["metadata"]["name"] for d in docs
                          if d["kind"] == "ValidatingAdmissionPolicy")
        bound = sorted(d["spec"]["policyName"] for d in docs
                       if d["kind"] == "ValidatingAdmissionPolicyBinding")
        assert policies == bound == [f"{release}-kuzk-proofjob-choices",
                                     f"{release}-kuzk-prover-own-node"]
        assert {k for k, _ in names[release]} == cluster_scoped
    assert not names["one"] & names["two"]


def test_priority_classes_rank_the_proof_kinds_by_deadline() -> None:
    """Every proof kind's default class is rendered, and a kind with a shorter deadline
    preempts one with a longer (or none): a WinningPoSt beats a WindowPoSt beats the rest."""
    rendered = {d["metadata"]["name"]: d for d in render() if d["kind"] == "PriorityClass"}
    assert set(rendered) == {d.priority_class_name for d in api.PROOF_KINDS.values()}
    assert {d["preemptionPolicy"] for d in rendered.values()} == {"PreemptLowerPriority"}
    for a in api.PROOF_KINDS.values():
        for b in api.PROOF_KINDS.values():
            if (a.active_deadline_seconds or float("inf")) < (b.active_deadline_seconds
                                                               or float("inf")):
                value_a = rendered[a.priority_class_name]["value"]
                assert value_a > rendered[b.priority_class_name]["value"]
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
    assert "kz-kuzk-prover-own-node" not in {
        d["metadata"]["name"] for d in render("prover.nodeRestriction=false")}


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
    docs = render("operator.watchNamespaces={x,y}", "operator.replicas=3")
    deploy = one(docs, "Deployment", "kz-kuzk-operator")
    assert deploy["spec"]["replicas"] == 3
    args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "operator"
    assert "--namespace=x" in args and "--namespace=y" in args
    assert '--prover-command=["kuzk-prover"]' in args
    status = one(docs, "Deployment", "kz-kuzk-status")["spec"]["template"]["spec"]
    status_args = status["containers"][0]["args"]
    assert "--namespace=x" in status_args and "--namespace=y" in status_args


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("operator.logFormat=xml", "logFormat"),
        ("operator.replicas=0", "replicas"),
        ("prover.gpuResource=gpu", "gpuResource"),
        ("operator.bogus=1", "bogus"),
        ("priorityClasses.normal=-5", "normal"),
        ("statusServer.replicas=0", "replicas"),
        ("statusServer.keepFinished=ten", "keepFinished"),
        ("statusServer.logFormat=xml", "logFormat"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("statusServer.resources.limits.memory=lots", "memory"),
        ("metrics.bogus=1", "bogus"),
    ],
)
def test_bad_values_fail_at_render_time(setting: str, named: str) -> None:
    out = helm("template", "kz", str(CHART), "--kube-version", "1.37.2", "--set", setting)
    assert out.returncode != 0
    assert named in out.stderr


def _grants(rules: list[dict[str, Any]]) -> set[str]:
    return {resource for rule in rules for resource in rule["resources"]}


def test_operator_rbac_is_namespaced_when_it_watches_namespaces() -> None:
    namespaced = {"pods", "events", "proofjobs", "proofjobs/status", "kopfpeerings"}
    cluster_scoped = {"workerstatuses", "workerstatuses/status", "nodes",
                      "customresourcedefinitions", "namespaces"}
    everywhere = one(render(), "ClusterRole", "kz-kuzk-operator")
    assert _grants(everywhere["rules"]) == namespaced | cluster_scoped | {"clusterkopfpeerings"}

    docs = render("operator.watchNamespaces={a,b}")
    assert _grants(one(docs, "ClusterRole", "kz-kuzk-operator")["rules"]) == cluster_scoped
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"
             and d["metadata"]["name"] == "kz-kuzk-operator"}
    assert sorted(roles) == ["a", "b"]
    assert all(_grants(role["rules"]) == namespaced for role in roles.values())
    bindings = [d for d in docs if d["kind"] == "RoleBinding"
                and d["metadata"]["name"] == "kz-kuzk-operator"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["a", "b"]
    assert all(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                "name": "kz-kuzk-operator"} for b in bindings)
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": "kz-kuzk-operator",
                                  "namespace": "kuzk-system"}] for b in bindings)


def test_values_in_args_are_quoted() -> None:
    """A value with YAML syntax in it (": ", "#") reaches the flag as written."""
    args = one(render("prover.command={python3,-c,print('a: b') # c}"), "Deployment",
               "kz-kuzk-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    (command,) = [a for a in args if a.startswith("--prover-command=")]
    assert json.loads(command.removeprefix("--prover-command=")) == [
        "python3", "-c", "print('a: b') # c"]
    assert "--peering-lifetime=15" in args


def test_an_umbrella_charts_global_values_are_accepted() -> None:
    assert one(render("global.imageRegistry=registry.example"), "Deployment",
               "kz-kuzk-operator")


def test_the_uninstall_hook_runs_under_its_own_least_identity() -> None:
    docs = render("operator.watchNamespaces={a}")
    name = "kz-kuzk-release-finalizers"
    job = one(docs, "Job", name)
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == name
    hooks = [d for d in docs if d["metadata"]["name"] == name and d["kind"] != "Job"]
    assert {d["kind"] for d in hooks} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                           "Role", "RoleBinding"}
    for doc in hooks:  # made before the Job, removed with it
        assert doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
        assert int(doc["metadata"]["annotations"]["helm.sh/hook-weight"]) < 0
    assert _grants(one(docs, "ClusterRole", name)["rules"]) == {"workerstatuses",
                                                                "workerstatuses/status"}
    assert _grants(one(docs, "Role", name)["rules"]) == {"proofjobs", "pods"}
    verbs = {v for r in one(docs, "Role", name)["rules"] for v in r["verbs"]}
    assert not verbs & {"create", "delete", "update"}
