"""Every manifest the chart renders, with every optional part and value switched on, is
accepted by the test bed's real kube-apiserver in a server-side dry run: its OpenAPI schemas,
the CRDs' schemas, the admission chain. (The Prometheus Operator's kinds are left out: the
test bed serves no such API; promtool checks the rules.)"""

from __future__ import annotations

import yaml
from kubernetes import client

from testenv.cluster import CHART, Cluster
from tests.unit.test_chart import ALL_ON, ALL_ON_JSON

MONITORING = "monitoring.coreos.com/"


def test_the_api_server_accepts_every_rendered_manifest(kuzk_installed: Cluster,
                                                       namespace: str) -> None:
    cluster = kuzk_installed
    # the release's namespaces are this test's (a dry run needs them to exist)
    sets = [s for s in ALL_ON if not s.startswith(("operator.watchNamespaces",
                                                   "prover.namespaces"))]
    version = client.VersionApi(cluster.api).get_code().git_version
    args = ["template", "kz-dry", str(CHART), "-n", namespace, "--kube-version", version,
            *ALL_ON_JSON,
            "--set-json", f'operator.watchNamespaces=["{namespace}"]',
            "--set-json", f'prover.namespaces=["{namespace}"]']
    for s in sets:
        args += ["--set", s]
    docs = [d for d in yaml.safe_load_all(cluster.helm(*args).stdout) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ValidatingAdmissionPolicy", "PodDisruptionBudget",
            "ConfigMap", "ClusterRole", "Role", "Job"} <= kinds, kinds
    checked = [d for d in docs if not d["apiVersion"].startswith(MONITORING)]
    out = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-",
                          input=yaml.safe_dump_all(checked), check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("(server dry run)") == len(checked), out.stdout
