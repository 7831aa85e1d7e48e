"""The chart's ``prover.filecoin`` (the real prover's command and the node directory of its
parameters) reaches the operator as its flags, which the operator's own parser accepts; a
relative or climbing parameters path is refused at render time, naming the value."""

from __future__ import annotations

import argparse

import pytest

from kuzk import cli
from tests.unit.test_chart import CHART, helm, one, render


def _parsed(*sets: str) -> argparse.Namespace:
    deploy = one(render(*sets), "Deployment", "kz-kuzk-operator")
    return cli._parser().parse_args(deploy["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_real_provers_values_become_the_operators_settings() -> None:
    parsed = _parsed("prover.filecoin.parametersHostPath=/srv/filecoin-params",
                     "prover.filecoin.command={kuzk-lane,run,--calls,--,/opt/fil/prove}")
    assert parsed.filecoin_parameters_host_path == "/srv/filecoin-params"
    assert parsed.filecoin_prover_command == [
        "kuzk-lane", "run", "--calls", "--", "/opt/fil/prove"]


def test_the_defaults_are_paramfetchs_directory_and_the_agent() -> None:
    parsed = _parsed()
    assert parsed.filecoin_parameters_host_path == (
        "/var/tmp/filecoin-proof-parameters")
    assert parsed.filecoin_prover_command[-2:] == ["kuzk-fil-prover", "prove"]


@pytest.mark.parametrize("path", ["params", "/var/../etc", ""])
def test_a_relative_or_climbing_parameters_path_is_refused(path: str) -> None:
    out = helm("template", "kz", str(CHART), "--set",
               f"prover.filecoin.parametersHostPath={path}")
    assert out.returncode != 0
    assert "parametersHostPath" in out.stderr
