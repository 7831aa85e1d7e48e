"""The images, built and run for real: both Dockerfile targets built with podman on the test bed's
Debian base (cached by their inputs), and the chart installed with them and no command
overrides into a namespace that enforces the restricted Pod Security level: the operator and
the partition pods run as containers, as uid 10001 with read-only root filesystems, reading
their credentials from the standard path, and a ProofJob of each kind succeeds with the
prover's result read from its real termination message."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kuzk.contract import api
from kuzk.contract.filecoin import PROVER
from testenv import filecoin
from testenv.cluster import Cluster
from testenv.runtime import IMAGES_SCRIPT, Images, build_images, podman
from tests.integration.operator.conftest import apply_job, job_pods, proofjob, wait_job

# The first test may build the images from a cold cache (minutes on a small machine).
pytestmark = pytest.mark.timeout(1500)

ROOT = Path(__file__).resolve().parents[2]
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
JOBS = {  # kind: partitions (small, so that the test fits a small machine)
    "winning-post": 1,
    "window-post": 1,
    "snap-update": 2,
    "porep-c2": 2,
}


@pytest.fixture(scope="module")
def images() -> Images:
    return build_images()


def _run(image: str, *argv: str) -> str:
    """Run ``argv`` in ``image`` hardened as a pod would be; its stdout."""
    proc = podman("run", "--rm", "--pull=never", "--read-only", "--read-only-tmpfs=false",
                  "--cap-drop=ALL", "--security-opt=no-new-privileges", "--network=none",
                  "--entrypoint", json.dumps(list(argv)), image)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_images_are_cached_by_their_inputs(images: Images) -> None:
    names = subprocess.run([str(IMAGES_SCRIPT), "--print"], capture_output=True, text=True,
                           timeout=60, check=True).stdout.split()
    if names != [images.operator, images.prover, images.base]:
        pytest.skip("the sources changed after this session built the images")
    again = subprocess.run([str(IMAGES_SCRIPT)], capture_output=True, text=True, timeout=300,
                           check=True)
    assert again.stdout.split() == [images.operator, images.prover, images.base]
    assert "building" not in again.stderr
    assert f"{images.operator} is current" in again.stderr
    assert f"{images.prover} is current" in again.stderr


def test_images_run_as_non_root_on_a_read_only_root(images: Images) -> None:
    for image in (images.operator, images.prover):
        assert _run(image, "id", "-u") == "10001"
    assert _run(images.operator, "kuzk", "--help").startswith("usage: kuzk")
    # The test bed's prover has no CuPy: it proves with NumPy.
    assert _run(images.prover, "python3", "-c",
                "import importlib.util as u, kuzk_prover; print(u.find_spec('cupy'))") == "None"


def test_the_prover_image_carries_the_real_prover(images: Images, tmp_path: Path) -> None:
    """``kuzk-fil-prover``, built in the image's Rust stage, runs there as uid 10001 and seals
    the same sector, to the same comm_r, as the test bed's own build."""
    proc = podman("run", "--rm", "--pull=never", "--read-only", "--cap-drop=ALL",
                  "--security-opt=no-new-privileges", "--network=none",
                  "--tmpfs", "/work:rw,mode=1777", "--env", "FIL_PROOFS_PARENT_CACHE=/work/parents",
                  "--entrypoint", json.dumps([PROVER, "seal", "--dir", "/work/s",
                                              "--miner", "1000", "--first", "7", "--count", "1"]),
                  images.prover)
    assert proc.returncode == 0, proc.stderr
    (inside,) = json.loads(proc.stdout)
    (outside,) = filecoin.seal(filecoin.build(), tmp_path, miner=1000, first=7, count=1)
    assert inside == outside


def test_each_image_carries_its_own_dependencies_at_the_tested_versions(images: Images) -> None:
    """The operator's image has no NumPy, the prover's no Kopf and no prometheus-client (it
    has aiohttp: the Kubernetes client requires it); what both have is at the version
    constraints.txt pins (the versions the suite ran)."""
    pinned = dict(line.split("==") for line in
                  (ROOT / "constraints.txt").read_text().splitlines()
                  if line and not line.startswith("#"))
    script = ("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']:"
              " d.version for d in m.distributions()}))")
    found = {image: json.loads(_run(image, "python3", "-c", script))
             for image in (images.operator, images.prover)}
    operator, prover = found[images.operator], found[images.prover]
    assert "numpy" not in operator and {"kopf", "aiohttp", "prometheus_client"} <= set(operator)
    assert not {"kopf", "prometheus_client"} & set(prover) and "numpy" in prover
    for dists in (operator, prover):
        for name, version in dists.items():
            if name not in ("kuzk", "pip", "setuptools", "wheel"):
                assert pinned.get(name) == version, (name, version, pinned.get(name))


@contextlib.contextmanager
def _installed(cluster: Cluster, namespace: str, images: Images) -> Iterator[None]:
    """The chart installed as release ``kz``; uninstalled afterwards, since its cluster-wide
    objects (ClusterRoles, the prover policy) would outlive the namespace and act on the
    tests that follow."""
    repository, _, tag = images.operator.rpartition(":")
    cluster.helm(
        "install", "kz", "charts/kuzk", "-n", namespace, "--wait", "--timeout", "180s",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        "--set", f"prover.image={images.prover}",
        "--set", "operator.peeringLifetime=5",
        # Pods share the host's network here: each status server binds its own pod address.
        "--set", "statusServer.listenAddress=$(POD_IP)",
        "--set-json", f"operator.watchNamespaces={json.dumps([namespace])}",
    )
    try:
        yield
    finally:
        cluster.helm("uninstall", "kz", "-n", namespace, "--wait", "--timeout", "120s",
                     check=False)


def _container(pod: client.V1Pod) -> str:
    container_id = pod.status.container_statuses[0].container_id or ""
    assert container_id.startswith("podman://"), f"{pod.metadata.name} is not a container"
    return container_id.removeprefix("podman://")


def _inside(name: str, script: str) -> str:
    proc = podman("exec", name, "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.usefixtures("kuzk_installed")
def test_chart_runs_every_kind_in_containers(cluster: Cluster, namespace: str, nodes,
                                             images: Images) -> None:
    cluster.core.patch_namespace(namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    nodes(2, gpus=2)
    with _installed(cluster, namespace, images):
        _run_every_kind(cluster, namespace)


def _run_every_kind(cluster: Cluster, namespace: str) -> None:
    operators = cluster.core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/instance=kz").items
    running = [p for p in operators if p.status.phase == "Running"]
    assert running, "no chart pod is running"
    for pod in running:
        name = _container(pod)
        assert pod.spec.containers[0].command in (None, ["kuzk"])
        assert _inside(name, "id -u") == "10001"
        assert _inside(name, f"ls {SERVICE_ACCOUNT_DIR}").split() == [
            "ca.crt", "namespace", "token"]
        assert _inside(name, "echo ${KUBECONFIG:-unset}") == "unset"
        inspect = podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name)
        assert inspect.stdout.strip() == "true"

    for kind, partitions in JOBS.items():
        # A generous deadline: the test proves that each kind runs, not this machine's speed.
        apply_job(cluster, namespace, proofjob(kind, kind, partitions=partitions,
                                               circuitLog2=10, activeDeadlineSeconds=600))
    for kind, partitions in JOBS.items():
        job = wait_job(cluster, namespace, kind, "Succeeded", timeout=300)
        assert job["status"]["succeeded"] == partitions
        assert job["status"]["proof"]["commitment"]
        for pod in job_pods(cluster, namespace, kind):
            _check_partition_pod(pod, job)


def _check_partition_pod(pod: client.V1Pod, job: dict[str, Any]) -> None:
    _container(pod)
    assert pod.spec.containers[0].command == ["kuzk-prover"]
    assert pod.spec.security_context.run_as_non_root is True
    assert pod.spec.containers[0].security_context.read_only_root_filesystem is True
    term = pod.status.container_statuses[0].state.terminated
    if pod.status.phase != "Succeeded" or term is None:
        return
    result = json.loads(term.message)  # the prover wrote it to /dev/termination-log
    index = int(pod.metadata.labels[api.LABEL_PARTITION])
    recorded = {p["index"]: p for p in job["status"]["partitions"]}
    assert result["commitment"] == recorded[index]["commitment"]
