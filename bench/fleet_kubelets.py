"""Process kubelets for a fleet of GPU nodes, in a process of their own (bench/fleet_scale.py).

Why: hundreds of pods run at once at fleet scale, and the process kubelet gives each a thread;
in the benchmark's own process they would starve the watches that time the run. Each node
gets a kubelet of its own, as in a real cluster: the test kubelet registers its nodes one
after another and renews their leases in one loop, and it watches every pod of the cluster,
decoding each event into a client model. At 64 nodes on two loaded cores that is too slow:
leases lapse past the node lifecycle controller's grace period (the node goes NotReady and,
since the test kubelet posts node status only once, stays so) and bound pods wait for a
kubelet whose watch has fallen behind. ``NodeKubelet`` is the test kubelet watching only its
node's pods (``spec.nodeName``, as a real kubelet does) and reading the events as raw JSON.

    python bench/fleet_kubelets.py --kubeconfig K --server URL --ca-cert F --workdir D \\
        --nodes 64 --gpus 8 [--replicas 1] [--shard I --shards N]

With ``--shards`` N this process runs every Nth node from the ``--shard``-th (0-based), and N
such processes run the fleet: a process's pods each take a few threads (the pod, its
container's exit, its probes), and at 64 nodes x 16 pods one process's thousands of threads
queue for its interpreter lock, each waking every few milliseconds while it waits (the CPU goes
to the kernel switching between them, and the nodes' leases lapse).

Node names are ``fleet-n00`` and up. With ``--replicas`` N each physical GPU is advertised as N
``nvidia.com/gpu`` (the device plugin's time-slicing replicas, ``NodeSpec.replicas``): N pods
share a GPU as its lanes. The kubeconfig is the kubelets' own identity, so that the API
server's audit log tells their writes from everyone else's. It prints ``READY`` once every
node is registered and runs until SIGTERM, then stops every pod and deletes its nodes.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path

from kubernetes import config

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from testenv.kubelet import ProcessKubelet  # noqa: E402
from testenv.nodes import NodeSpec  # noqa: E402

log = logging.getLogger("fleet_kubelets")


class NodeKubelet(ProcessKubelet):
    """The test kubelet for one node, watching only that node's pods, as raw JSON."""

    def _watch_pods(self) -> None:
        (node,) = self.nodes
        on_node = f"spec.nodeName={node}"
        while not self.stopping.is_set():
            try:
                listing = json.loads(self.core.list_pod_for_all_namespaces(
                    field_selector=on_node, _preload_content=False).data)
                for pod in listing["items"]:
                    self._on_pod(pod)
                response = self.core.list_pod_for_all_namespaces(
                    field_selector=on_node, watch=True,
                    resource_version=listing["metadata"]["resourceVersion"],
                    timeout_seconds=30, _preload_content=False, _request_timeout=40)
                pending = b""
                for chunk in response.stream(amt=None, decode_content=False):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in filter(bytes.strip, lines):
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            raise RuntimeError(event["object"])
                        if event["type"] == "DELETED":
                            self._on_deleted(event["object"])
                        elif event["type"] in ("ADDED", "MODIFIED"):
                            self._on_pod(event["object"])
                    if self.stopping.is_set():
                        response.close()
                        break
            except Exception:  # list again after any watch failure (expired RV, API restart)
                if not self.stopping.is_set():
                    log.debug("pod watch of %s restarted", node, exc_info=True)
                    self.stopping.wait(0.5)


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
    parser.add_argument("--replicas", type=int, default=1,
                        help="time-slicing replicas per GPU: pods that share it (default 1)")
    parser.add_argument("--shard", type=int, default=0,
                        help="which of the --shards this process is, from 0 (default 0)")
    parser.add_argument("--shards", type=int, default=1,
                        help="processes running the fleet, each every Nth node (default 1)")
    args = parser.parse_args(argv)
    if min(args.nodes, args.gpus, args.replicas, args.shards) < 1:
        parser.error("--nodes, --gpus, --replicas and --shards must be at least 1")
    if not 0 <= args.shard < args.shards:
        parser.error("--shard must be at least 0 and less than --shards")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    specs = [NodeSpec(name, gpus=args.gpus, replicas=args.replicas)
             for name in node_names(args.nodes)[args.shard::args.shards]]
    kubelets: list[ProcessKubelet] = []
    try:
        for spec in specs:
            api = config.new_client_from_config(config_file=args.kubeconfig)
            kubelet = NodeKubelet(api, [spec], args.workdir / spec.name, server=args.server,
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
