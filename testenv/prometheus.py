"""A real Prometheus server (built by ``testenv/build``) that finds its targets the way
it does in a cluster: ``kubernetes_sd_configs`` (role ``pod``) against the test API server,
with a ServiceAccount token that holds only the discovery permissions Prometheus documents
(get/list/watch of pods, here in one namespace), and the conventional relabelling on the
``prometheus.io/scrape``, ``/port`` and ``/path`` pod annotations. It scrapes the pods at
their pod IPs, and is read through its HTTP API (``/api/v1/query``, ``/api/v1/targets``).
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from testenv import binaries
from testenv.controlplane import free_port, stop_group, tail
from testenv.waiting import wait_for

SERVICE_ACCOUNT = "prometheus"

# Prometheus' documented discovery grant for role "pod" (documentation/examples/rbac-setup.yml
# grants get/list/watch on pods among others); a Role, so it covers this namespace only.
DISCOVERY_RULES = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]

# The relabelling of Prometheus' example "kubernetes-pods" job.
POD_RELABELLING: list[dict[str, Any]] = [
    {"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
     "action": "keep", "regex": "true"},
    {"source_labels": ["__meta_kubernetes_pod_phase"], "action": "drop",
     "regex": "Pending|Succeeded|Failed"},
    {"source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
     "action": "replace", "target_label": "__metrics_path__", "regex": "(.+)"},
    {"source_labels": ["__address__", "__meta_kubernetes_pod_annotation_prometheus_io_port"],
     "action": "replace", "target_label": "__address__",
     "regex": r"([^:]+)(?::\d+)?;(\d+)", "replacement": "$1:$2"},
    {"action": "labelmap", "regex": "__meta_kubernetes_pod_label_(.+)"},
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    {"source_labels": ["__meta_kubernetes_pod_ip"], "target_label": "pod_ip"},
]


def discovery_objects(namespace: str) -> list[dict[str, Any]]:
    """The ServiceAccount, Role and RoleBinding that let Prometheus discover pods."""
    meta = {"name": SERVICE_ACCOUNT, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": DISCOVERY_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": SERVICE_ACCOUNT},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                       "namespace": namespace}]},
    ]


def config(*, api_server: str, ca_file: Path, token_file: Path, namespace: str,
           interval: str = "2s") -> dict[str, Any]:
    return {
        "global": {"scrape_interval": interval, "scrape_timeout": "1s",
                   "evaluation_interval": interval},
        "scrape_configs": [{
            "job_name": "kubernetes-pods",
            # As the prometheus-community chart's job: a series' own namespace label (the
            # ProofJob's, on kuzk's job series) wins over the target's.
            "honor_labels": True,
            "kubernetes_sd_configs": [{
                "role": "pod",
                "api_server": api_server,
                "namespaces": {"names": [namespace]},
                "tls_config": {"ca_file": str(ca_file)},
                "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
            }],
            "relabel_configs": POD_RELABELLING,
        }],
    }


def version() -> str:
    out = subprocess.run([str(binaries.find("prometheus")), "--version"], capture_output=True,
                         text=True, check=True, timeout=30)
    return (out.stdout or out.stderr).splitlines()[0]


class Prometheus:
    """One Prometheus process with its own data directory under ``workdir``."""

    def __init__(self, workdir: Path, cfg: dict[str, Any]) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_file = workdir / "prometheus.yml"
        self.config_file.write_text(yaml.safe_dump(cfg))
        self.log = workdir / "prometheus.log"
        self.url = f"http://127.0.0.1:{free_port()}"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 60) -> None:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [str(binaries.find("prometheus")), f"--config.file={self.config_file}",
                 f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address={self.url.removeprefix('http://')}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                msg = f"prometheus exited {self.proc.returncode}:\n{tail(self.log)}"
                raise RuntimeError(msg)
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return bool(r.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        wait_for(ready, timeout, "prometheus /-/ready", interval=0.2)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace=10)
            self.proc = None

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            msg = f"prometheus {path} {params}: {body}"
            raise RuntimeError(msg)
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` (``/api/v1/query``)."""
        data = self._get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        """The value of the first sample of ``expr`` (None when it has none)."""
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def targets(self) -> list[dict[str, Any]]:
        """The active targets (``/api/v1/targets``)."""
        return list(self._get("/api/v1/targets", state="active")["activeTargets"])
