"""The Helm chart renders what kuzk's code defines, and bad values fail at render time with a
message that names the value (real helm, no cluster)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kuzk.contract import api
from testenv import binaries

CHART = Path(__file__).resolve().parents[2] / "charts" / "kuzk"


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries.find("helm")), *args], capture_output=True, text=True,
                          timeout=60)


KUBE = "1.37.2"
# Every optional part of the chart switched on.
ALL_ON = (
    "metrics.serviceMonitor.enabled=true",
    "metrics.serviceMonitor.labels.release=prometheus",
    "metrics.prometheusRule.enabled=true",
    "metrics.grafanaDashboard.enabled=true",
    "operator.watchNamespaces={team-a,team-b}",
    "prover.namespaces={team-a,team-b}",
    "statusServer.serviceType=NodePort",
)
# The pod settings of both Deployments set, each to something of its own (--set-json).
OPERATOR_POD: dict[str, Any] = {
    "nodeSelector": {"kuzk.io/system": "true"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system",
                     "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "ScheduleAnyway"}],
    "podAnnotations": {"example.com/owner": "operator"},
    "podLabels": {"team": "proofs", "app.kubernetes.io/name": "not-the-selector"},
    "priorityClassName": "system-cluster-critical",
    "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
    "serviceAccount": {"annotations": {"iam.example.com/role": "kuzk-operator"}},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}],
}
STATUS_POD: dict[str, Any] = {
    "nodeSelector": {"kuzk.io/status": "true"},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
        "weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}]}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                   "whenUnsatisfiable": "DoNotSchedule",
                                   "labelSelector": {"matchLabels": {"tier": "status"}}}],
    "podAnnotations": {"example.com/owner": "status"},
    "podLabels": {"team": "status"},
    "priorityClassName": "kuzk-high",
    "podDisruptionBudget": {"enabled": True, "maxUnavailable": "50%"},
    "serviceAccount": {"annotations": {"iam.example.com/role": "kuzk-status"}},
    "extraEnv": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
}
PULL_SECRETS = [{"name": "regcred"}, {"name": "mirror"}]


def set_json(values: dict[str, Any]) -> tuple[str, ...]:
    """--set-json for each path, so that they add to the chart's values instead of replacing."""
    return tuple(a for path, v in values.items() for a in ("--set-json", f"{path}={json.dumps(v)}"))


ALL_ON_JSON = set_json({"imagePullSecrets": PULL_SECRETS}
                       | {f"operator.{k}": v for k, v in OPERATOR_POD.items()}
                       | {f"statusServer.{k}": v for k, v in STATUS_POD.items()})


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


VARIANTS = pytest.mark.parametrize(("sets", "extra"), [((), ()), (ALL_ON, ALL_ON_JSON)],
                                   ids=["defaults", "all-on"])


@VARIANTS
def test_chart_lints_strict(sets: tuple[str, ...], extra: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART), "--kube-version", KUBE, *extra]
    for s in sets:
        args += ["--set", s]
    out = helm(*args)
    assert out.returncode == 0, out.stdout + out.stderr


@VARIANTS
def test_manifests_validate_against_the_kubernetes_schemas(sets: tuple[str, ...],
                                                           extra: tuple[str, ...]) -> None:
    docs = render(*sets, extra=("--include-crds", *extra))
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "Service", "ValidatingAdmissionPolicy",
            "Job", "PriorityClass"} <= kinds
    assert ("PodDisruptionBudget" in kinds) == bool(extra)
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # Prometheus Operator kinds: no Kubernetes schema; checked elsewhere
        kubernetes_validate.validate(doc, KUBE, strict=True)
    assert ("ServiceMonitor" in kinds) == ("PrometheusRule" in kinds) == bool(sets)


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
    # With watchNamespaces, ProofJobs and pods are read through a Role in each of them only.
    docs = render("operator.watchNamespaces={team-a,team-b}")
    role = one(docs, "ClusterRole", "kz-kuzk-status")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {"workerstatuses",
                                                                        "nodes"}
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "kz-kuzk-status"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert {r for rule in roles[0]["rules"] for r in rule["resources"]} == {"proofjobs", "pods"}
    bound = [d for d in docs if d["kind"] == "RoleBinding"
             and d["roleRef"]["name"] == "kz-kuzk-status"]
    assert sorted(b["metadata"]["namespace"] for b in bound) == ["team-a", "team-b"]


def test_service_monitor_when_enabled_or_when_its_api_exists() -> None:
    assert "ServiceMonitor" not in {d["kind"] for d in render()}
    sm = one(render("metrics.serviceMonitor.enabled=true",
                    "metrics.serviceMonitor.labels.release=prom"), "ServiceMonitor",
             "kz-kuzk-status")
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "kuzk-status-server"
    # honorLabels: the job series' namespace label is the ProofJob's, not the target's
    assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "honorLabels": True,
                                        "interval": "30s", "scrapeTimeout": "10s"}]
    # the operator's own /metrics: a ServiceMonitor on a headless Service of its pods
    docs = render("metrics.serviceMonitor.enabled=true", "operator.metricsPort=9100")
    op = one(docs, "ServiceMonitor", "kz-kuzk-operator")
    service = one(docs, "Service", "kz-kuzk-operator-metrics")
    assert op["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["spec"]["selector"]["app.kubernetes.io/name"] == "kuzk-operator"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9100,
                                         "targetPort": "metrics"}]
    assert op["spec"]["endpoints"][0]["port"] == "metrics"
    pod = one(docs, "Deployment", "kz-kuzk-operator")["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9100"
    (container,) = pod["spec"]["containers"]
    assert "--metrics-port=9100" in container["args"]
    assert {"name": "metrics", "containerPort": 9100} in container["ports"]
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
    # shared by the cluster's releases, whose partition pods may name them: kept on uninstall
    assert {d["metadata"]["annotations"]["helm.sh/resource-policy"]
            for d in rendered.values()} == {"keep"}


def test_namespace_users_get_proofjobs_through_the_built_in_roles() -> None:
    roles = {d["metadata"]["name"]: d for d in render() if d["kind"] == "ClusterRole"}
    edit, view = roles["kz-kuzk-edit"], roles["kz-kuzk-view"]
    assert {k for k, v in edit["metadata"]["labels"].items() if v == "true"} == {
        "rbac.authorization.k8s.io/aggregate-to-edit",
        "rbac.authorization.k8s.io/aggregate-to-admin"}
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    (rule,) = edit["rules"]
    assert rule["resources"] == ["proofjobs"] and "create" in rule["verbs"]
    (rule,) = view["rules"]
    assert set(rule["verbs"]) == {"get", "list", "watch"}
    assert {"proofjobs", "workerstatuses"} <= set(rule["resources"])
    off = render("rbac.aggregateToDefaultRoles=false")
    assert not {"kz-kuzk-edit", "kz-kuzk-view"} & {d["metadata"]["name"] for d in off}


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
    assert ('--filecoin-prover-command=["kuzk-lane","run","--calls","--","kuzk-fil-prover",'
            '"prove"]') in args
    assert "--filecoin-parameters-host-path=/var/tmp/filecoin-proof-parameters" in args
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
        ("nameOverride=Kuzk_Operator", "nameOverride"),
        ("fullnameOverride=zk.", "fullnameOverride"),
        ("imagePullSecrets[0].nom=regcred", "nom"),
        ("operator.priorityClassName=Critical", "priorityClassName"),
        ("statusServer.podDisruptionBudget.minAvailable=half", "minAvailable"),
        ("operator.podDisruptionBudget.bogus=1", "bogus"),
        ("statusServer.serviceAccount.name=x", "name"),
        ("operator.extraEnv[0].value=x", "name"),
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
    cluster_scoped = {"workerstatuses", "workerstatuses/status",
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


def test_kuzk_renders_as_a_dependency_of_an_umbrella_chart(tmp_path: Path) -> None:
    """An umbrella chart that depends on kuzk (a local path, as a vendored copy would be),
    with global values and values of its own for kuzk."""
    umbrella = tmp_path / "fleet"
    umbrella.mkdir()
    (umbrella / "Chart.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v2", "name": "fleet", "version": "1.0.0",
        "dependencies": [{"name": "kuzk", "version": "0.1.0",
                          "repository": f"file://{CHART}"}]}))
    (umbrella / "values.yaml").write_text(yaml.safe_dump({
        "global": {"imageRegistry": "registry.example"},
        "kuzk": {"operator": {"replicas": 1}}}))
    built = helm("dependency", "build", str(umbrella))
    assert built.returncode == 0, built.stdout + built.stderr
    out = helm("template", "fleet", str(umbrella), "-n", "proofs", "--kube-version", KUBE)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert one(docs, "Deployment", "fleet-kuzk-operator")["spec"]["replicas"] == 1
    assert one(docs, "Deployment", "fleet-kuzk-status")


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


# --- names ------------------------------------------------------------------------------------
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # a Service's name
LONG_RELEASE = "storage-provider-proving-cluster-in-the-eu-west-2-01"  # helm allows 53
LONG_NAMESPACE = "proofs-" + "n" * 56


def _names(docs: list[dict[str, Any]]) -> list[str]:
    return [d["metadata"]["name"] for d in docs]


def _label_values(doc: dict[str, Any]) -> list[str]:
    labels = dict(doc["metadata"].get("labels") or {})
    spec = doc.get("spec") or {}
    labels |= spec.get("template", {}).get("metadata", {}).get("labels", {})
    labels |= (spec.get("selector") or {}).get("matchLabels", {})
    return [str(v) for v in labels.values()]


def test_a_long_release_name_keeps_every_name_valid_distinct_and_suffixed() -> None:
    """With a 52-character release name (and a 63-character namespace) every name is a valid
    DNS-1123 label of at most 63 characters that keeps its suffix: the release name gives way.
    Names that differ with a short release name differ with the long one."""
    assert len(LONG_RELEASE) == 52 and "kuzk" not in LONG_RELEASE
    sets = (*ALL_ON, f"prover.namespaces={{team-a,{LONG_NAMESPACE}}}",
            f"operator.watchNamespaces={{team-a,{LONG_NAMESPACE}}}")
    short = render(*sets, extra=ALL_ON_JSON)
    long = render(*sets, release=LONG_RELEASE, extra=ALL_ON_JSON)
    assert [d["kind"] for d in short] == [d["kind"] for d in long]
    for doc in long:
        name = doc["metadata"]["name"]
        assert len(name) <= 63 and DNS1123_LABEL.match(name), (doc["kind"], name)
        if doc["kind"] == "Service":
            assert DNS1035_LABEL.match(name), name
        assert all(len(v) <= 63 for v in _label_values(doc)), (doc["kind"], name)
    for s, n in zip(_names(short), _names(long), strict=True):
        if s.startswith("kz-kuzk-"):  # <fullname>-<suffix>
            suffix = s.removeprefix("kz-kuzk-")
            assert n.endswith(f"-{suffix}") and n.startswith(LONG_RELEASE[:20]), (s, n)
        else:  # not the release's: kuzk-prover, the PriorityClasses
            assert n == s
    assert max(len(n) for n in _names(long)) == 63
    key = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
           for d in long]
    assert len(set(key)) == len(key) == len({(d["kind"], d["metadata"].get("namespace"),
                                             d["metadata"]["name"]) for d in short})

    # The ledger the operator and the status server are told of is the one they are granted.
    (ledger,) = [d for d in long if d["kind"] == "Role"
                 and d["metadata"]["name"].endswith("-status-ledger")]
    (granted,) = ledger["rules"][0]["resourceNames"]
    assert len(granted) <= 63 and granted.endswith("-ledger")
    for deploy in (d for d in long if d["kind"] == "Deployment"):
        args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--ledger=kuzk-system/{granted}" in args


def test_a_release_named_after_the_chart_is_not_named_twice() -> None:
    docs = render(release="kuzk")
    assert one(docs, "Deployment", "kuzk-operator") and one(docs, "Service", "kuzk-status")
    assert not [n for n in _names(docs) if "kuzk-kuzk" in n]
    args = one(docs, "Deployment", "kuzk-operator")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--peering=kuzk" in args and "--ledger=kuzk-system/kuzk-ledger" in args
    # A release that only contains the name is used alone too; one that does not gets it added.
    assert one(render(release="kuzk-prod"), "Deployment", "kuzk-prod-operator")
    assert one(render(release="kz"), "Deployment", "kz-kuzk-operator")


@pytest.mark.parametrize(
    ("release", "sets", "operator", "status"),
    [
        ("kz", ("nameOverride=proofs",), "kz-proofs-operator", "kz-proofs-status"),
        ("proofs-eu", ("nameOverride=proofs",), "proofs-eu-operator", "proofs-eu-status"),
        ("kz", ("fullnameOverride=zk",), "zk-operator", "zk-status"),
        ("kz", ("fullnameOverride=zk", "nameOverride=proofs"), "zk-operator", "zk-status"),
        ("kz", (f"fullnameOverride={'z' * 70}",), f"{'z' * 54}-operator", f"{'z' * 56}-status"),
    ],
    ids=["name", "name-in-release", "fullname", "fullname-wins", "fullname-too-long"],
)
def test_name_and_fullname_overrides(release: str, sets: tuple[str, ...], operator: str,
                                     status: str) -> None:
    docs = render(*sets, release=release)
    deploy = one(docs, "Deployment", operator)
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == operator
    assert one(docs, "ServiceAccount", operator) and one(docs, "ClusterRole", operator)
    assert one(docs, "Deployment", status) and one(docs, "Service", status)
    binding = one(docs, "ClusterRoleBinding", status)
    assert binding["subjects"][0]["name"] == status
    # The selectors do not follow the names: they cannot change under a running release.
    assert deploy["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "kuzk-operator", "app.kubernetes.io/instance": release}
    prefix = operator.removesuffix("-operator")[:40]  # the longest suffix leaves 44
    assert all(n.startswith(prefix) for n in _names(docs)
               if n != "kuzk-prover" and not n.startswith(("kuzk-critical", "kuzk-high",
                                                            "kuzk-normal")))


# --- pods: pull secrets, scheduling, budgets, annotations, labels, environment --------------
def _pod(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, kind, name)["spec"]["template"]
    return spec


def test_every_pod_setting_lands_where_it_belongs() -> None:
    docs = render(extra=ALL_ON_JSON)
    for name, values, labels in (
        ("kz-kuzk-operator", OPERATOR_POD, {"app.kubernetes.io/name": "kuzk-operator"}),
        ("kz-kuzk-status", STATUS_POD, {"app.kubernetes.io/name": "kuzk-status-server"}),
    ):
        deploy = one(docs, "Deployment", name)
        pod = _pod(docs, "Deployment", name)
        spec = pod["spec"]
        assert spec["imagePullSecrets"] == PULL_SECRETS
        for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
            assert spec[field] == values[field], (name, field)
        selector = deploy["spec"]["selector"]["matchLabels"]
        (spread,) = spec["topologySpreadConstraints"]
        (wanted,) = values["topologySpreadConstraints"]
        # One that names no pods counts the Deployment's own.
        assert spread == {"labelSelector": {"matchLabels": selector}} | wanted
        # The extra labels join the chart's, which they cannot replace (the selector holds).
        assert pod["metadata"]["labels"]["team"] == values["podLabels"]["team"]
        assert pod["metadata"]["labels"].items() >= selector.items() >= labels.items()
        assert pod["metadata"]["annotations"].items() >= values["podAnnotations"].items()
        (c,) = spec["containers"]
        assert c["env"][-len(values["extraEnv"]):] == values["extraEnv"]
        assert c["env"][0]["name"] == "POD_IP"
        account = one(docs, "ServiceAccount", name)
        assert account["metadata"]["annotations"] == values["serviceAccount"]["annotations"]
        pdb = one(docs, "PodDisruptionBudget", name)
        assert pdb["apiVersion"] == "policy/v1"
        assert pdb["spec"]["selector"]["matchLabels"] == selector
        others = [d for d in docs if d["kind"] == "Deployment" and d is not deploy]
        assert all(not selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
                   for o in others)  # its own pods, not the other Deployment's
        budget = {k: v for k, v in values["podDisruptionBudget"].items() if k != "enabled"}
        assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == budget
    # The status server keeps its scrape annotations beside the extra ones.
    status = _pod(docs, "Deployment", "kz-kuzk-status")["metadata"]["annotations"]
    assert status["prometheus.io/scrape"] == "true"
    assert _pod(docs, "Deployment", "kz-kuzk-status")["spec"]["topologySpreadConstraints"][0][
        "labelSelector"] == {"matchLabels": {"tier": "status"}}  # as given

    # The uninstall hook runs where the operator may, pulling as it does: no stalled uninstall.
    hook = _pod(docs, "Job", "kz-kuzk-release-finalizers")["spec"]
    assert hook["imagePullSecrets"] == PULL_SECRETS
    for field in ("nodeSelector", "tolerations", "affinity"):
        assert hook[field] == OPERATOR_POD[field], field
    assert "priorityClassName" not in hook and "topologySpreadConstraints" not in hook


def test_pod_settings_render_nothing_when_empty() -> None:
    docs = render()
    assert "PodDisruptionBudget" not in {d["kind"] for d in docs}
    for kind, name in (("Deployment", "kz-kuzk-operator"), ("Deployment", "kz-kuzk-status"),
                       ("Job", "kz-kuzk-release-finalizers")):
        spec = _pod(docs, kind, name)["spec"]
        assert not {"imagePullSecrets", "nodeSelector", "tolerations", "affinity",
                    "topologySpreadConstraints", "priorityClassName"} & set(spec), name
    # only the scrape annotations of the operator's own /metrics
    assert set(_pod(docs, "Deployment", "kz-kuzk-operator")["metadata"]["annotations"]) == {
        "prometheus.io/scrape", "prometheus.io/port", "prometheus.io/path"}
    for name in ("kz-kuzk-operator", "kz-kuzk-status"):
        assert "annotations" not in one(docs, "ServiceAccount", name)["metadata"]
    env = _pod(docs, "Deployment", "kz-kuzk-operator")["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env] == ["POD_IP", "POD_NAME"]


@pytest.mark.parametrize(
    ("budget", "spec"),
    [
        ((), {"maxUnavailable": 1}),
        (("minAvailable=0",), {"minAvailable": 0}),
        (("maxUnavailable=0",), {"maxUnavailable": 0}),
        (("minAvailable=50%",), {"minAvailable": "50%"}),
    ],
)
def test_pod_disruption_budget_takes_the_one_bound_given(budget: tuple[str, ...],
                                                         spec: dict[str, Any]) -> None:
    docs = render("statusServer.podDisruptionBudget.enabled=true",
                  *(f"statusServer.podDisruptionBudget.{b}" for b in budget))
    pdb = one(docs, "PodDisruptionBudget", "kz-kuzk-status")
    assert {k: v for k, v in pdb["spec"].items() if k != "selector"} == spec
    kubernetes_validate.validate(pdb, KUBE, strict=True)


def test_pod_disruption_budget_with_both_bounds_fails_naming_them() -> None:
    out = helm("template", "kz", str(CHART), "--kube-version", KUBE,
               "--set", "operator.podDisruptionBudget.enabled=true",
               "--set", "operator.podDisruptionBudget.minAvailable=1",
               "--set", "operator.podDisruptionBudget.maxUnavailable=1")
    assert out.returncode != 0
    assert "operator.podDisruptionBudget" in out.stderr and "maxUnavailable" in out.stderr
