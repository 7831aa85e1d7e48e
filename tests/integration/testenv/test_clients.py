"""Real clients against the testenv: helm installs a chart that kube-controller-manager and
the process kubelet bring to Available, and kubectl sees the stamped server version."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from testenv.cluster import Cluster

CHART = Path(__file__).parents[1] / "charts" / "tiny"


def test_kubectl_version_shows_stamped_server_version(cluster: Cluster) -> None:
    out = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    server = out["serverVersion"]
    assert server["gitVersion"].startswith("v1.")
    assert server["gitVersion"] != "v0.0.0"
    assert server["major"] == "1"
    assert server["gitVersion"].startswith(f"v1.{server['minor']}.")
    assert out["clientVersion"]["minor"] == server["minor"]


def test_helm_install_deployment_becomes_available(cluster: Cluster, namespace: str,
                                                   nodes) -> None:
    nodes(1)
    cluster.helm("install", "tiny", str(CHART), "-n", namespace, "--set",
                 f"python={sys.executable}", "--wait", "--timeout", "120s")
    cluster.kubectl("wait", "-n", namespace, "deployment/tiny-web",
                    "--for=condition=Available", "--timeout=60s")
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)
    (p,) = pods["items"]
    ready = {c["type"]: c["status"] for c in p["status"]["conditions"]}
    assert ready["Ready"] == "True"
    assert p["status"]["containerStatuses"][0]["restartCount"] == 0
    cluster.helm("uninstall", "tiny", "-n", namespace, "--wait", "--timeout", "60s")
