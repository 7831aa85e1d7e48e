"""Process kubelets for a fleet of GPU nodes, in a process of their own (bench/fleet_scale.py).

Why: hundreds of pods run at once at fleet scale, and the process kubelet gives each a thread;
in the benchmark's own process they would starve the watches that time the run. Nodes are
served by several kubelets of ``--per-kubelet`` nodes each: one kubelet registers its nodes
one after another and renews their leases in one loop, and under load 64 nodes in one loop
outlast the node lifecycle controller's grace period.

    python bench/fleet_kubelets.py --kubeconfig K --server URL --ca-cert F --workdir D \\
        --nodes 64 --gpus 8 [--per-kubelet 8]

Node names are ``fleet-n00`` and up. It prints ``READY`` once every node is registered and
runs until SIGTERM, then stops every pod and deletes its nodes.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from kubernetes import config

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from tests.testenv.kubelet import NodeSpec, ProcessKubelet  # noqa: E402


def node_names(count: int) -> list[str]:
    return [f"fleet-n{i:02d}" for i in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True, help="admin kubeconfig")
    parser.add_argument("--server", required=True, help="the API server's URL")
    parser.add_argument("--ca-cert", type=Path, required=True, help="the cluster's CA")
    parser.add_argument("--workdir", type=Path, required=True, help="pods' folders go here")
    parser.add_argument("--nodes", type=int, required=True, help="GPU nodes")
    parser.add_argument("--gpus", type=int, required=True, help="GPUs per node")
    parser.add_argument("--per-kubelet", type=int, default=8, help="nodes per kubelet (8)")
    args = parser.parse_args(argv)
    if min(args.nodes, args.gpus, args.per_kubelet) < 1:
        parser.error("--nodes, --gpus and --per-kubelet must be at least 1")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    specs = [NodeSpec(name, gpus=args.gpus) for name in node_names(args.nodes)]
    kubelets: list[ProcessKubelet] = []
    try:
        for first in range(0, len(specs), args.per_kubelet):
            api = config.new_client_from_config(config_file=args.kubeconfig)
            kubelet = ProcessKubelet(api, specs[first:first + args.per_kubelet],
                                     args.workdir / f"kubelet-{first}", server=args.server,
                                     ca_cert=args.ca_cert)
            kubelet.start()
            kubelets.append(kubelet)
        print("READY", flush=True)
        stop.wait()
    finally:
        for kubelet in kubelets:
            kubelet.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
