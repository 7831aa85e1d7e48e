"""Pull secrets reach partition pods: the chart's ``imagePullSecrets`` and
``prover.imagePullSecrets`` become the operator's ``--prover-image-pull-secret`` flags (each
name once), which its own parser accepts and puts on every pod it builds;
``prover.serviceAccount.imagePullSecrets`` lands on the prover's ServiceAccounts instead. A bad
name is refused at render time naming the value, and by the operator at start in one line."""

from __future__ import annotations

import json

import pytest

from kuzk import cli
from kuzk.contract.proofjob import resolve
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from tests.unit.operator.decide.objects import Make
from tests.unit.test_chart import CHART, helm, one, render, set_json

FLAG = "--prover-image-pull-secret"


def _operator_args(*extra: str) -> list[str]:
    deploy = one(render(extra=extra), "Deployment", "kz-kuzk-operator")
    args: list[str] = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def _pod_of(args: list[str]) -> dict[str, object]:
    """The partition pod the operator started with these args would create."""
    parsed = cli._parser().parse_args(args)
    settings = PodSettings(image="kuzk/prover:1",
                           image_pull_secrets=tuple(dict.fromkeys(parsed.prover_image_pull_secret)))
    spec: dict[str, object] = pod_manifest(resolve(Make.job()), 0, 1, settings)["spec"]
    return spec


def test_no_secret_by_default() -> None:
    args = _operator_args()
    assert not [a for a in args if a.startswith(FLAG)]
    assert "imagePullSecrets" not in _pod_of(args)
    (account,) = [d for d in render() if d["kind"] == "ServiceAccount"
                  and d["metadata"]["name"] == "kuzk-prover"]
    assert "imagePullSecrets" not in account


def test_release_and_prover_secrets_reach_every_partition_pod_once() -> None:
    args = _operator_args(*set_json({
        "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}],
        "prover.imagePullSecrets": [{"name": "gpu-registry"}, {"name": "regcred"}]}))
    assert [a for a in args if a.startswith(FLAG)] == [
        f"{FLAG}=regcred", f"{FLAG}=mirror", f"{FLAG}=gpu-registry"]
    assert _pod_of(args)["imagePullSecrets"] == [
        {"name": "regcred"}, {"name": "mirror"}, {"name": "gpu-registry"}]


def test_prover_secrets_alone() -> None:
    args = _operator_args(*set_json({"prover.imagePullSecrets": [{"name": "gpu-registry"}]}))
    assert _pod_of(args)["imagePullSecrets"] == [{"name": "gpu-registry"}]
    # The operator's own pods pull the operator image: the prover's secret is not theirs.
    docs = render(extra=set_json({"prover.imagePullSecrets": [{"name": "gpu-registry"}]}))
    assert "imagePullSecrets" not in one(docs, "Deployment", "kz-kuzk-operator")["spec"][
        "template"]["spec"]


def test_the_service_account_may_carry_them_instead() -> None:
    docs = render(extra=("--set-json", 'prover.namespaces=["team-a","team-b"]', *set_json(
        {"prover.serviceAccount.imagePullSecrets": [{"name": "regcred"}]})))
    accounts = [d for d in docs if d["kind"] == "ServiceAccount"
                and d["metadata"]["name"] == "kuzk-prover"]
    assert {a["metadata"]["namespace"] for a in accounts} == {"team-a", "team-b"}
    assert all(a["imagePullSecrets"] == [{"name": "regcred"}] for a in accounts)
    args = one(docs, "Deployment", "kz-kuzk-operator")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert not [a for a in args if a.startswith(FLAG)]


@pytest.mark.parametrize("path", ["imagePullSecrets", "prover.imagePullSecrets",
                                  "prover.serviceAccount.imagePullSecrets"])
def test_a_bad_secret_name_is_refused_naming_the_value(path: str) -> None:
    out = helm("template", "kz", str(CHART), "--set-json",
               f"{path}={json.dumps([{'name': 'Reg_Cred'}])}")
    assert out.returncode != 0
    assert path.rsplit(".", 1)[-1] in out.stderr and "Reg_Cred" not in out.stdout


def test_the_operator_refuses_a_bad_name_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli._parser().parse_args(["operator", f"{FLAG}=regcred", f"{FLAG}=Reg_Cred"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("argument --prover-image-pull-secret: expected the name of a Secret"
            " (a DNS subdomain), got 'Reg_Cred'") in err
