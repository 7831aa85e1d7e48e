"""The chart's ``prover.kernelCacheHostPath`` reaches the operator as its flag, which the
operator's own parser accepts; an empty value keeps the per-pod emptyDir; a relative path is
refused at render time, naming the value."""

from __future__ import annotations

import pytest

from kuzk import cli
from tests.unit.test_chart import CHART, helm, one, render

FLAG = "--prover-kernel-cache-host-path"


def _operator_args(*sets: str) -> list[str]:
    deploy = one(render(*sets), "Deployment", "kz-kuzk-operator")
    args: list[str] = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_no_flag_by_default() -> None:
    assert not [a for a in _operator_args() if a.startswith(FLAG)]


def test_host_path_becomes_the_operator_flag() -> None:
    args = _operator_args("prover.kernelCacheHostPath=/var/lib/kuzk/cupy")
    assert f"{FLAG}=/var/lib/kuzk/cupy" in args
    parsed = cli._parser().parse_args(args)
    assert parsed.prover_kernel_cache_host_path == "/var/lib/kuzk/cupy"


@pytest.mark.parametrize("path", ["cache/cupy", "/var/../etc", "/var/cache/.."])
def test_relative_or_climbing_path_is_refused_with_the_value_name(path: str) -> None:
    out = helm("template", "kz", str(CHART), "--set", f"prover.kernelCacheHostPath={path}")
    assert out.returncode != 0
    assert "kernelCacheHostPath" in out.stderr


def test_operator_refuses_a_relative_path(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli._parser().parse_args(["operator", f"{FLAG}=cache"])
    assert refused.value.code == 2
    assert "expected an absolute path without '..', got 'cache'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli._parser().parse_args(["operator", f"{FLAG}=/var/../etc"])
    assert "got '/var/../etc'" in capsys.readouterr().err

