"""The local demo: a real control plane, two GPU nodes of the process kubelet, the kuzk
operator and a snap-update ProofJob proven end to end by the real prover (NumPy backend).

Run it with ``./scripts/demo`` (or ``python -m tests.testenv.demo``); it prints the partition
grid and the GPU workers while the job runs, then the job's proof, and stops everything.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from kubernetes import client

from kuzk import api
from tests.testenv.binaries import MissingBinaryError
from tests.testenv.cluster import Cluster, install_kuzk
from tests.testenv.controlplane import ControlPlane, StartError, stop_group
from tests.testenv.kubelet import NodeSpec

SYMBOL = {"pending": ".", "scheduled": "s", "synthesizing": "y", "synth_done": "Y", "gpu": "G",
          "done": "#", "failed": "X"}


def _prepare(cluster: Cluster, namespace: str) -> None:
    install_kuzk(cluster)
    cluster.kubectl("create", "namespace", namespace)
    cluster.kubectl("create", "serviceaccount", "kuzk-prover", "-n", namespace)
    cluster.kubectl("create", "clusterrolebinding", f"kuzk-prover-{namespace}",
                    "--clusterrole=kuzk-prover", f"--serviceaccount={namespace}:kuzk-prover")


def _line(job: dict) -> str:
    st = job.get("status") or {}
    parts = sorted(st.get("partitions") or [], key=lambda p: p["index"])
    grid = "".join(SYMBOL.get(p.get("state", "pending"), "?") for p in parts)
    return f"{st.get('phase', 'Pending'):<10} [{grid}] {st.get('succeeded', 0)}/{len(parts)} done"


def _workers(custom: client.CustomObjectsApi) -> str:
    out = []
    for ws in custom.list_cluster_custom_object(api.GROUP, api.VERSION,
                                                api.WORKERSTATUS_PLURAL)["items"]:
        for w in (ws.get("status") or {}).get("workers") or []:
            doing = (f"proving P{w.get('partition')} {w.get('stage', '')}"
                     if w.get("state") == "proving" else "idle")
            out.append(f"{ws['metadata']['name']}/{w['id']}: {doing} ({w.get('completed', 0)})")
    return "; ".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo", description=__doc__)
    parser.add_argument("--circuit-log2", type=int, default=14,
                        help="constraints per partition = 2^N (default 14, quick on a CPU)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    try:
        plane = ControlPlane(workdir=Path(tempfile.mkdtemp(prefix="kuzk-demo-")))
        plane.start()
    except (StartError, MissingBinaryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"control plane up; kubeconfig {plane.kubeconfig}", flush=True)
    ns = "demo"
    operator = None
    try:
        cluster = Cluster(plane)
        _prepare(cluster, ns)
        nodes = [NodeSpec(f"gpu-node-{i}", gpus=2) for i in (1, 2)]
        with cluster.kubelet(nodes):
            log = plane.workdir / "operator.log"  # type: ignore[operator]
            with log.open("wb") as out:
                operator = subprocess.Popen(
                    [sys.executable, "-m", "kuzk.cli", "operator", "--namespace", ns,
                     "--standalone", "--prover-command", json.dumps(["kuzk-prover"])],
                    env=cluster.env(), stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True)
            job = {"apiVersion": api.API_VERSION, "kind": api.PROOFJOB_KIND,
                   "metadata": {"name": "snap-demo"},
                   "spec": {"proofKind": "snap-update", "sector": {"miner": 1234, "number": 5678},
                            "circuitLog2": args.circuit_log2}}
            cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job))
            custom = client.CustomObjectsApi(cluster.api)
            deadline = time.monotonic() + args.timeout
            last = ""
            while time.monotonic() < deadline:
                got = custom.get_namespaced_custom_object(api.GROUP, api.VERSION, ns,
                                                          api.PROOFJOB_PLURAL, "snap-demo")
                line = f"{_line(got)}  {_workers(custom)}"
                if line != last:
                    print(line, flush=True)
                    last = line
                if (got.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    break
                time.sleep(0.5)  # a display refresh, not synchronisation
            print(cluster.kubectl("get", "pj,ws", "-A").stdout)
            status = got.get("status") or {}
            print(json.dumps(status.get("proof"), indent=2))
            return 0 if status.get("phase") == "Succeeded" else 1
    finally:
        if operator is not None:
            stop_group(operator, grace=30)
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
