"""``helm upgrade`` from the previous chart (as of the commit before the chart conventions:
``<release>-kuzk`` names, no ledger, no operator metrics, PriorityClasses rendered always),
packaged here from git, to this one, while a job runs: the new CRDs are applied first, as
the README says, the rollout finishes, and the job completes without a partition retried.
The GPU node is cordoned from the first finished partition until the rollout is done, so the
job is certainly still running across it (the release's pods have a node without GPUs).
The release is named ``kuzk``, which the new naming rule alone would rename from
``kuzk-kuzk-*`` to ``kuzk-*``: it keeps its names."""

from __future__ import annotations

import subprocess
import tarfile
import uuid
from pathlib import Path

from kubernetes import client

from kuzk.contract import crds
from testenv.cluster import Cluster
from testenv.nodes import NodeSpec
from testenv.waiting import wait_for
from tests.e2e.test_user_path import CHART, Release, _drop_namespace, chart_values, helm
from tests.integration.operator.conftest import apply_job, get_job, job_pods, proofjob, wait_job

PREVIOUS = "4ff9db2"  # the last commit before the chart's conventions changed
RELEASE = "kuzk"
ROOT = Path(__file__).resolve().parents[2]


def _previous_chart(workdir: Path) -> Path:
    """The previous chart, from git, packaged as ``helm package`` makes it."""
    archive = workdir / "previous.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), PREVIOUS,
                    "charts/kuzk"], check=True, capture_output=True)
    with tarfile.open(archive) as tar:
        tar.extractall(workdir / "src", filter="data")
    return workdir / "src" / "charts" / "kuzk"


def test_upgrade_from_the_previous_chart_while_a_job_runs(kuzk_installed: Cluster,
                                                          tmp_path: Path) -> None:
    cluster = kuzk_installed
    suffix = uuid.uuid4().hex[:5]
    namespace = f"upg-{suffix}"
    cluster.kubectl("create", "namespace", namespace)
    gpu_node = NodeSpec(f"upg-{suffix}-n0", gpus=2)
    specs = [gpu_node, NodeSpec(f"upg-{suffix}-plain", gpus=0)]
    previous = _previous_chart(tmp_path)
    packaged = cluster.helm("package", str(previous), "-d", str(tmp_path)).stdout
    package = packaged.strip().rsplit(" ", 1)[-1]
    try:
        with cluster.kubelet(specs) as kubelet:
            try:
                r = Release(cluster, namespace, kubelet, tmp_path)
                cluster.kubectl("wait", "--for=condition=Ready",
                                *(f"node/{spec.name}" for spec in specs), "--timeout=30s")
                # That chart rendered the PriorityClasses always: the session's are not its own.
                helm(r, "install", RELEASE, package, "-n", namespace, "--wait", "--timeout", "180s",
                     *chart_values(namespace), "--set", "priorityClasses.create=false")
                apply_job(cluster, namespace, proofjob("across", partitions=8, circuitLog2=20))

                def running() -> bool:
                    st = (get_job(cluster, namespace, "across") or {}).get("status") or {}
                    return st.get("phase") == "Running" and st.get("succeeded", 0) >= 1

                wait_for(running, 120, "the job Running with a partition done", interval=0.2)
                cluster.kubectl("cordon", gpu_node.name)
                cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                                str(CHART / "crds"))
                helm(r, "upgrade", RELEASE, str(CHART), "-n", namespace, "--wait",
                     "--timeout", "180s", *chart_values(namespace))
                job = get_job(cluster, namespace, "across")
                assert job is not None and job["status"]["phase"] == "Running", \
                    "the job ended before the rollout did"
                cluster.kubectl("uncordon", gpu_node.name)
                job = wait_job(cluster, namespace, "across", "Succeeded", timeout=300)
                retried = [p for p in job["status"]["partitions"] if p["attempt"] != 1]
                assert job["status"]["retries"] == 0 and not retried, retried
                # No pull secret set: the operator adds none to the partition pods.
                pods = job_pods(cluster, namespace, "across")
                assert pods and not [p.metadata.name for p in pods if p.spec.image_pull_secrets]
                # The new chart's objects are there: the ledger the operator is told of.
                apps = client.AppsV1Api(cluster.api)
                deployments = {d.metadata.name for d in
                               apps.list_namespaced_deployment(namespace).items}
                assert deployments == {"kuzk-kuzk-operator", "kuzk-kuzk-status"}, deployments
                operator = apps.read_namespaced_deployment("kuzk-kuzk-operator", namespace)
                args = operator.spec.template.spec.containers[0].args
                assert f"--ledger={namespace}/kuzk-kuzk-ledger" in args
                # and the CRD served is this chart's
                (ours,) = [c for c in crds.all_crds() if c["spec"]["names"]["kind"] == "ProofJob"]
                served = client.ApiextensionsV1Api(cluster.api).read_custom_resource_definition(
                    ours["metadata"]["name"])
                schema = served.spec.versions[0].schema.open_apiv3_schema
                assert sorted(schema.properties["spec"].properties) == sorted(
                    ours["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
                        "properties"])
            finally:
                # Its cluster-wide objects (ClusterRoles, the admission policy) go with the
                # release; its uninstall hook needs the nodes.
                cluster.helm("uninstall", RELEASE, "-n", namespace, "--wait", check=False)
    finally:
        _drop_namespace(cluster, namespace)
