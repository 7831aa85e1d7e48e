"""Run the test control plane by hand:
``python -m testenv [--nodes N] [--gpus G] [--replicas R]``.

It starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a process kubelet
with N GPU nodes, prints the kubeconfig path, and runs until interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from testenv.binaries import MissingBinaryError
from testenv.cluster import Cluster
from testenv.controlplane import ControlPlane, StartError
from testenv.nodes import NodeSpec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testenv", description=__doc__)
    parser.add_argument("--nodes", type=int, default=2, help="GPU nodes to register (default 2)")
    parser.add_argument("--gpus", type=int, default=2, help="GPUs per node (default 2)")
    parser.add_argument("--replicas", type=int, default=1,
                        help="time-slicing replicas per GPU, the lanes (default 1)")
    parser.add_argument("--workdir", type=Path, help="keep state and logs here")
    args = parser.parse_args(argv)
    if min(args.nodes, args.gpus, args.replicas) < 1:
        parser.error("--nodes, --gpus and --replicas must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        plane = ControlPlane(workdir=args.workdir)
        plane.start()
    except (StartError, MissingBinaryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        cluster = Cluster(plane)
        nodes = [NodeSpec(f"gpu-node-{i + 1}", gpus=args.gpus, replicas=args.replicas)
                 for i in range(args.nodes)]
        with cluster.kubelet(nodes):
            print(f"kubeconfig: {plane.kubeconfig}", flush=True)
            print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
            stop.wait()
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
