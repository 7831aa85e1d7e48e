"""``kuzk.contract.kubeconfig.load_config``, the one credentials loader: a kubeconfig named on the
command line, else ``$KUBECONFIG``, else the pod's ServiceAccount, else ``~/.kube/config``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from kuzk.contract.kubeconfig import load_config


def kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return path


def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: bool, env: bool,
         home: bool) -> str:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    if env:
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "env", "https://env:1")))
    if home:
        kubeconfig(tmp_path / "home" / ".kube" / "config", "https://home:1")
    path = str(kubeconfig(tmp_path / "flag", "https://flag:1")) if flag else None
    configuration = client.Configuration()
    load_config(configuration, path)
    return str(configuration.host)


@pytest.mark.parametrize(("flag", "env", "home", "used"), [
    (True, True, True, "https://flag:1"),
    (False, True, True, "https://env:1"),
    (False, False, True, "https://home:1"),
], ids=["flag-first", "then-KUBECONFIG", "then-home"])
def test_the_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flag: bool, env: bool,
                   home: bool, used: str) -> None:
    assert host(tmp_path, monkeypatch, flag, env, home) == used


def test_nothing_usable_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises((config.ConfigException, OSError)):
        host(tmp_path, monkeypatch, False, False, False)


def test_a_request_does_not_look_for_a_proxy_again(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The loaders' refresh hook assigns the host before every request; the proxy the
    environment gave at load time stays, without reading the environment again."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    configuration = client.Configuration()
    load_config(configuration, str(kubeconfig(tmp_path / "flag", "https://flag:1")))
    assert configuration.proxy == "http://proxy:3128"
    looked: list[int] = []
    monkeypatch.setattr("kubernetes.client.configuration.getproxies",
                        lambda: looked.append(1) or {})
    assert configuration.refresh_api_key_hook is not None
    assert configuration.get_api_key_with_prefix("BearerToken") == "Bearer t"
    assert (looked, configuration.proxy, configuration.host) == (
        [], "http://proxy:3128", "https://flag:1")
