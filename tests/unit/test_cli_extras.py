"""Without the operator extra (the prover's image has the kuzk package without Kopf and
prometheus-client), ``kuzk operator`` and ``kuzk status-server`` end with one line that
names what is missing and where it comes from, not a traceback; the rest of the CLI works."""

from __future__ import annotations

import sys

import pytest

from kuzk import cli, status
from kuzk.contract import api


def test_the_operator_without_kopf_says_so(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "kopf", None)
    assert cli.main(["operator"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: kuzk operator needs kopf, from kuzk's operator extra"
                   " (pip install 'kuzk[operator]'); the prover image runs kuzk-prover only"]


def test_the_status_server_without_prometheus_client_says_so(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    for module in ("app", "metrics"):  # imported again, as in a fresh process
        monkeypatch.delitem(sys.modules, f"kuzk.status.{module}", raising=False)
        monkeypatch.delattr(status, module, raising=False)
    assert cli.main(["status-server"]) == 1
    assert "needs prometheus_client" in capsys.readouterr().err


def test_the_rest_needs_no_extra(monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "kopf", None)
    assert cli.main(["crds"]) == 0
    assert f"group: {api.GROUP}" in capsys.readouterr().out
