"""The user path on a kind cluster: build both images, load them into kind, install the chart
with real images, and prove every example with the NumPy prover (kind's nodes have no GPU:
each advertises two ``nvidia.com/gpu``, as a device plugin would)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from testenv import binaries

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_IMAGE, PROVER_IMAGE = "kuzk-operator:kind", "kuzk-prover:kind"
CIRCUIT_LOG2 = 12


def run(*argv: str, timeout: float = 1800, **kw: Any) -> str:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    assert out.returncode == 0, f"{' '.join(argv)}:\n{out.stderr}{out.stdout}"
    return out.stdout


def helm(kind_cluster: Any, *args: str) -> str:
    exe = shutil.which("helm") or str(binaries.find("helm"))
    return run(exe, "--kubeconfig", str(kind_cluster.kubeconfig_path), *args)


def test_examples_on_kind(kind_cluster: Any, tmp_path: Path) -> None:
    run("docker", "build", "-t", OPERATOR_IMAGE, ".", cwd=ROOT)
    run("docker", "build", "--target", "prover", "-t", PROVER_IMAGE, ".", cwd=ROOT)
    for image in (OPERATOR_IMAGE, PROVER_IMAGE):
        kind_cluster.load_docker_image(image)
    for node in kind_cluster.kubectl("get", "nodes", "-o", "name").split():
        kind_cluster.kubectl("patch", node, "--subresource=status", "--type=json", "-p",
                             json.dumps([{"op": "add",
                                          "path": "/status/capacity/nvidia.com~1gpu",
                                          "value": "2"}]))
    helm(kind_cluster, "install", "kuzk", str(ROOT / "charts" / "kuzk"), "-n", "kuzk",
         "--create-namespace", "--wait", "--timeout", "300s",
         "--set", f"image.repository={OPERATOR_IMAGE.split(':')[0]}",
         "--set", f"image.tag={OPERATOR_IMAGE.split(':')[1]}",
         "--set", "image.pullPolicy=Never", "--set", f"prover.image={PROVER_IMAGE}")
    names = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        job = yaml.safe_load(path.read_text())
        job["spec"]["circuitLog2"] = CIRCUIT_LOG2
        job["spec"].setdefault("prover", {})["resources"] = {}  # kind nodes are small
        names.append(job["metadata"]["name"])
        (tmp_path / path.name).write_text(yaml.safe_dump(job))
    kind_cluster.kubectl("apply", "-n", "kuzk", "-f", str(tmp_path))
    for name in names:
        kind_cluster.kubectl("wait", "-n", "kuzk", f"pj/{name}",
                             "--for=jsonpath={.status.phase}=Succeeded", "--timeout=900s")
    table = kind_cluster.kubectl("get", "pj", "-n", "kuzk")
    assert sorted(line.split()[0] for line in table.splitlines()[1:]) == sorted(names)
    helm(kind_cluster, "uninstall", "kuzk", "-n", "kuzk", "--wait")
