"""A running test cluster: the control plane plus clients, kubectl/helm runners and process
kubelets. Tests get it from the ``cluster`` fixture; people get it from
``python -m testenv``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from kuzk.contract import crds
from testenv import binaries
from testenv.controlplane import ControlPlane
from testenv.kubelet import ProcessKubelet
from testenv.nodes import NodeSpec


class Cluster:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.kubeconfig = plane.kubeconfig
        self.api = config.new_client_from_config(config_file=str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.workdir = plane.workdir or Path(tempfile.mkdtemp(prefix="kuzk-cluster-"))

    def env(self) -> dict[str, str]:
        """The environment for a client process: this cluster's admin kubeconfig."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def _run(self, tool: str, args: tuple[str, ...], *, input: str | None, check: bool,
             timeout: float) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(binaries.find(tool)), *args], input=input, capture_output=True, text=True,
            env=self.env(), timeout=timeout,
        )
        if check and proc.returncode != 0:
            msg = f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}"
            raise AssertionError(msg)
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self._run("kubectl", args, input=input, check=check, timeout=timeout)

    def helm(self, *args: str, check: bool = True,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self._run("helm", args, input=None, check=check, timeout=timeout)

    @contextlib.contextmanager
    def kubelet(self, nodes: list[NodeSpec]) -> Iterator[ProcessKubelet]:
        workdir = Path(tempfile.mkdtemp(prefix="kubelet-", dir=self.workdir))
        kubelet = ProcessKubelet(
            self.api, nodes, workdir, server=self.plane.server, ca_cert=self.plane.pki.ca_cert
        )
        kubelet.start()
        try:
            yield kubelet
        finally:
            kubelet.stop()


CHART = Path(__file__).resolve().parents[1] / "charts" / "kuzk"
PROVER_RBAC = CHART / "files" / "prover-rbac.yaml"


def chart_objects(cluster: Cluster, template: str, release: str = "kuzk",
                  namespace: str = "default") -> list[dict[str, Any]]:
    """The objects one template of the chart renders with its default values, for this
    cluster's Kubernetes version (``template``: a path under ``templates/``)."""
    version = client.VersionApi(cluster.api).get_code().git_version
    rendered = cluster.helm("template", release, str(CHART), "--namespace", namespace,
                            "--kube-version", version, "--show-only",
                            f"templates/{template}").stdout
    return [d for d in yaml.safe_load_all(rendered) if d]


def install_kuzk(cluster: Cluster) -> None:
    """What the chart installs cluster-wide, from the same sources: every CRD (kuzk's and
    Kopf's peering), the PriorityClasses and the prover's ClusterRole; waits until the CRDs
    are Established. Idempotent (server-side apply)."""
    objects = [*crds.all_crds(), *chart_objects(cluster, "priorityclasses.yaml"),
               yaml.safe_load(PROVER_RBAC.read_text())]
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(objects))
    for crd in crds.all_crds():
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s",
                        f"crd/{crd['metadata']['name']}")
