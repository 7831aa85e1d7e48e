"""The chart's operator shards (operator.shards): one Deployment per shard, each with its own
peering, ServiceAccount and namespaces, its rights in those namespaces only; one status server
and one uninstall hook over every shard's namespaces; overlapping or unhandled namespaces
refused at render time (real helm, no cluster)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from tests.unit.test_chart import CHART, KUBE, helm, one, render

SHARDS = [{"name": "a", "namespaces": ["team-a"]},
          {"name": "b", "namespaces": ["team-b", "team-c"]}]


def sharded(shards: list[dict[str, Any]] = SHARDS, *sets: str) -> list[dict[str, Any]]:
    return render(*sets, extra=("--set-json", f"operator.shards={json.dumps(shards)}"))


def refused(*args: str) -> str:
    out = helm("template", "kz", str(CHART), "-n", "kuzk-system", "--kube-version", KUBE, *args)
    assert out.returncode != 0, "rendered, though it should be refused"
    return out.stderr


def args_of(deploy: dict[str, Any]) -> list[str]:
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    return list(container["args"])


def test_without_shards_one_operator_as_before() -> None:
    for docs, namespaces in ((render(), []),
                             (render("operator.watchNamespaces={x,y}"), ["x", "y"])):
        (deploy,) = [d for d in docs if d["kind"] == "Deployment"
                     and d["metadata"]["name"].startswith("kz-kuzk-operator")]
        assert deploy["metadata"]["name"] == "kz-kuzk-operator"
        assert deploy["spec"]["selector"]["matchLabels"] == {
            "app.kubernetes.io/name": "kuzk-operator", "app.kubernetes.io/instance": "kz"}
        args = args_of(deploy)
        assert "--peering=kz-kuzk" in args
        assert [a for a in args if a.startswith("--namespace=")] == [
            f"--namespace={n}" for n in namespaces]


def test_each_shard_is_a_deployment_with_its_namespaces_peering_and_identity() -> None:
    docs = sharded(SHARDS, "operator.podDisruptionBudget.enabled=true")
    operators = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"
                 and d["metadata"]["name"].startswith("kz-kuzk-operator")}
    assert sorted(operators) == ["kz-kuzk-operator-a", "kz-kuzk-operator-b"]
    seen: dict[str, str] = {}
    for shard in SHARDS:
        deploy = operators[f"kz-kuzk-operator-{shard['name']}"]
        selector = deploy["spec"]["selector"]["matchLabels"]
        assert selector["kuzk.io/shard"] == shard["name"]
        template = deploy["spec"]["template"]
        assert template["metadata"]["labels"].items() >= selector.items()
        assert template["spec"]["serviceAccountName"] == f"kz-kuzk-operator-{shard['name']}"
        args = args_of(deploy)
        assert f"--peering=kz-kuzk-{shard['name']}" in args
        assert [a for a in args if a.startswith("--namespace=")] == [
            f"--namespace={n}" for n in shard["namespaces"]]
        assert "--ledger=kuzk-system/kz-kuzk-ledger" in args, "one ledger, folded by UID"
        one(docs, "ServiceAccount", f"kz-kuzk-operator-{shard['name']}")
        pdb = one(docs, "PodDisruptionBudget", f"kz-kuzk-operator-{shard['name']}")
        assert pdb["spec"]["selector"]["matchLabels"] == selector
        for namespace in shard["namespaces"]:
            assert namespace not in seen, "a namespace in two Deployments"
            seen[namespace] = shard["name"]
    assert not any(d["metadata"]["name"] == "kz-kuzk-operator" for d in docs
                   if d["kind"] in ("Deployment", "ServiceAccount"))


def test_a_shard_may_write_only_in_its_own_namespaces() -> None:
    docs = sharded()
    cluster = one(docs, "ClusterRole", "kz-kuzk-operator")
    resources = {r for rule in cluster["rules"] for r in rule["resources"]}
    assert resources.isdisjoint({"pods", "proofjobs", "events", "kopfpeerings",
                                 "clusterkopfpeerings"}), "nothing namespaced cluster-wide"
    subjects = [{"kind": "ServiceAccount", "name": f"kz-kuzk-operator-{s}",
                 "namespace": "kuzk-system"} for s in ("a", "b")]
    assert one(docs, "ClusterRoleBinding", "kz-kuzk-operator")["subjects"] == subjects
    assert one(docs, "RoleBinding", "kz-kuzk-operator-ledger")["subjects"] == subjects
    bindings = {d["metadata"]["namespace"]: d["subjects"] for d in docs
                if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "kz-kuzk-operator"}
    assert bindings == {
        namespace: [{"kind": "ServiceAccount", "name": f"kz-kuzk-operator-{shard['name']}",
                     "namespace": "kuzk-system"}]
        for shard in SHARDS for namespace in shard["namespaces"]}
    roles = {d["metadata"]["namespace"] for d in docs
             if d["kind"] == "Role" and d["metadata"]["name"] == "kz-kuzk-operator"}
    assert roles == {"team-a", "team-b", "team-c"}


def test_the_status_server_hook_and_policy_cover_every_shard() -> None:
    docs = sharded()
    every = ["team-a", "team-b", "team-c"]
    status = one(docs, "Deployment", "kz-kuzk-status")
    assert [a for a in args_of(status) if a.startswith("--namespace=")] == [
        f"--namespace={n}" for n in every], "one status server shows the whole fleet"
    hook = one(docs, "Job", "kz-kuzk-release-finalizers")
    (container,) = hook["spec"]["template"]["spec"]["containers"]
    assert [a for a in container["args"] if a.startswith("--namespace=")] == [
        f"--namespace={n}" for n in every]
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "kz-kuzk-proofjob-choices")
    (expression,) = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert expression["values"] == every
    accounts = {d["metadata"]["namespace"] for d in docs
                if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "kuzk-prover"}
    assert accounts == set(every)


def test_sharded_manifests_lint_and_validate() -> None:
    shards = ("--set-json", f"operator.shards={json.dumps(SHARDS)}")
    out = helm("lint", "--strict", str(CHART), "--kube-version", KUBE, *shards)
    assert out.returncode == 0, out.stdout + out.stderr
    for doc in render(extra=("--include-crds", *shards)):
        kubernetes_validate.validate(doc, KUBE, strict=True)


@pytest.mark.parametrize(("values", "message"), [
    ({"operator.shards": [{"name": "a", "namespaces": ["x"]},
                          {"name": "b", "namespaces": ["y", "x"]}]},
     'operator.shards: namespace "x" is in shards "a" and "b"'),
    ({"operator.shards": [{"name": "a", "namespaces": ["x"]},
                          {"name": "a", "namespaces": ["y"]}]},
     'operator.shards: the name "a" is given to two shards'),
    ({"operator.shards": SHARDS, "operator.watchNamespaces": ["team-a"]},
     "operator.shards and operator.watchNamespaces are both set"),
    ({"operator.shards": SHARDS, "prover.namespaces": ["team-a", "team-z"]},
     'prover.namespaces: namespace "team-z" is in no operator shard'),
    ({"operator.shards": [{"name": "a", "namespaces": []}]},
     "/operator/shards/0/namespaces"),
    ({"operator.shards": [{"name": "A_1", "namespaces": ["x"]}]},
     "/operator/shards/0/name"),
])
def test_overlapping_or_unhandled_namespaces_are_refused(values: dict[str, Any],
                                                         message: str) -> None:
    args = [a for path, v in values.items() for a in ("--set-json", f"{path}={json.dumps(v)}")]
    assert message in refused(*args)


def test_the_operators_requests_have_a_controllers_priority_level() -> None:
    """A FlowSchema puts every operator's ServiceAccount (each shard's) in workload-high, as
    kube-controller-manager is; operator.priorityLevel empty: none."""
    for docs, accounts in ((render(), ["kz-kuzk-operator"]),
                           (sharded(), ["kz-kuzk-operator-a", "kz-kuzk-operator-b"])):
        schema = one(docs, "FlowSchema", "kz-kuzk-operator")
        assert schema["spec"]["priorityLevelConfiguration"] == {"name": "workload-high"}
        assert schema["spec"]["matchingPrecedence"] < 9000, "before service-accounts"
        (rule,) = schema["spec"]["rules"]
        assert [(s["kind"], s["serviceAccount"]) for s in rule["subjects"]] == [
            ("ServiceAccount", {"name": name, "namespace": "kuzk-system"})
            for name in accounts]
    assert not [d for d in render("operator.priorityLevel=") if d["kind"] == "FlowSchema"]
