"""Lanes per GPU: how much of its time one GPU spends in its GPU phase, with 1, 2 and 3 lanes.

Why: a partition is mostly CPU work (pod start, synthesis, commitment) around a short GPU
phase. With one pod per GPU the GPU waits through all of it; with lanes (time-slicing
replicas) one lane holds the GPU phase while the others work on the CPU (issue 19).

How: one run starts the tests' real control plane and one process kubelet with one node per
lane count, each with one GPU advertised as N replicas (``NodeSpec.replicas``), the kuzk
operator running the real prover (``kuzk-prover``, NumPy: the GPU phase runs on a CPU core
here, with the same mutex, lanes and accounting) and one ``kuzk status-server``. For each
circuit size and lane count it proves one snap-update ProofJob of 24 partitions pinned to that
node, one job at a time, and prints:

- throughput: partitions per minute from the job's create to Succeeded;
- GPU-phase occupancy: the partitions' summed ``gpuMs`` over that wall time (the truth);
- busy shown: what ``/metrics`` ``kuzk_gpu_busy_seconds_total`` of that GPU grew by over the
  same window, over the wall time, and idle seconds by reason
  (``kuzk_gpu_idle_seconds_total``);
- stale writes refused on the node's WorkerStatus;
- the commitment's share of a partition's own work: its provers' summed ``commit_ms`` over
  their ``synth_ms + gpu_ms + commit_ms`` (from the pods' termination messages);
- the ceiling two cores allow: CPU-seconds per partition of the whole machine (every process
  of the test bed) divided by the cores, against the GPU phase per partition:
  ceiling = 1 / max(CPU-seconds per partition / cores, GPU phase per partition);
- ratios to 1 lane.

    .venv/bin/python bench/pipeline.py [--sizes 18 20 22] [--lanes 1 2 3] [--partitions 24]

Needs the control-plane binaries (``bash testenv/build``). About 6 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import requests
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from kuzk.contract import api
from kuzk.contract.proofjob import (
    CIRCUIT_LOG2_MAX,
    CIRCUIT_LOG2_MIN,
    PARTITIONS_MAX,
    PARTITIONS_MIN,
)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from testenv.cluster import Cluster, install_kuzk  # noqa: E402
from testenv.controlplane import ControlPlane, free_port, stop_group, tail  # noqa: E402
from testenv.nodes import NodeSpec  # noqa: E402
from testenv.waiting import wait_for  # noqa: E402

NAMESPACE = "pipeline"
REASONS = ("no_work", "scheduling", "cpu", "not_live")
JOB_TIMEOUT_S = 900.0
Metrics = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Result:
    size: int
    lanes: int
    partitions: int
    wall_s: float
    gpu_s: float
    busy_shown_s: float
    idle_s: dict[str, float]
    stale: int
    cpu_s: float
    cores: int
    commit_share: float

    @property
    def per_minute(self) -> float:
        return 60.0 * self.partitions / self.wall_s

    @property
    def occupancy(self) -> float:
        return self.gpu_s / self.wall_s

    @property
    def shown(self) -> float:
        return self.busy_shown_s / self.wall_s

    @property
    def ceiling_per_minute(self) -> float:
        cpu_bound = self.cpu_s / self.partitions / self.cores
        gpu_bound = self.gpu_s / self.partitions
        return 60.0 / max(cpu_bound, gpu_bound)


def machine_cpu_seconds() -> float:
    """CPU time of the whole machine (every process) since boot, from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    busy = sum(int(v) for k, v in enumerate(fields) if k not in (3, 4))  # not idle, iowait
    return busy / os.sysconf("SC_CLK_TCK")


def metrics(port: int) -> Metrics:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def per_node(sample: Metrics, name: str, node: str, **labels: str) -> float:
    return sum(
        value
        for (metric, keys), value in sample.items()
        if metric == name
        and dict(keys).get("node") == node
        and all(dict(keys).get(k) == v for k, v in labels.items())
    )


def proofjob(name: str, size: int, partitions: int, node: str) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.PROOFJOB_KIND,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "proofKind": "snap-update",
            "partitions": partitions,
            "circuitLog2": size,
            "sector": {"miner": 1000 + size, "number": partitions},
            "prover": {"nodeSelector": {"kubernetes.io/hostname": node}},
        },
    }


def stale_writes(custom: client.CustomObjectsApi, node: str) -> int:
    """The stale writes the WorkerStatuses of ``node``'s GPUs refused."""
    listed = custom.list_cluster_custom_object(api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL,
                                               field_selector=f"spec.nodeName={node}")
    return sum(int((ws.get("status") or {}).get("staleWritesRejected") or 0)
               for ws in listed["items"])


def commit_share(core: client.CoreV1Api, job: str) -> float:
    """Summed commit_ms over summed synth + gpu + commit ms of the job's succeeded pods."""
    commit = work = 0.0
    pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"{api.LABEL_JOB}={job}").items
    for pod in pods:
        for status in pod.status.container_statuses or []:
            done = status.state.terminated
            if done is None or done.exit_code != 0 or not done.message:
                continue
            result = json.loads(done.message)
            commit += result["commit_ms"]
            work += result["synth_ms"] + result["gpu_ms"] + result["commit_ms"]
    return commit / work if work else float("nan")


def run_one(
    cluster: Cluster, port: int, size: int, lanes: int, partitions: int, node: str
) -> Result:
    custom = client.CustomObjectsApi(cluster.api)
    name = f"pipe-{size}-l{lanes}"
    before, stale_before = metrics(port), stale_writes(custom, node)
    cpu_before, started = machine_cpu_seconds(), time.monotonic()
    custom.create_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PROOFJOB_PLURAL,
        proofjob(name, size, partitions, node),
    )

    def finished() -> dict[str, Any] | None:
        job = custom.get_namespaced_custom_object(
            api.GROUP, api.VERSION, NAMESPACE, api.PROOFJOB_PLURAL, name
        )
        phase = (job.get("status") or {}).get("phase")
        if phase == api.PHASE_FAILED:
            msg = f"{name} failed: {json.dumps(job.get('status'))[:2000]}"
            raise RuntimeError(msg)
        return job if phase == api.PHASE_SUCCEEDED else None

    job = wait_for(finished, JOB_TIMEOUT_S, f"{name} Succeeded", interval=0.05)
    wall = time.monotonic() - started
    cpu = machine_cpu_seconds() - cpu_before
    # The status server's view lags the job by a watch event or two: wait until its lanes are
    # gone (the last prover left) before reading what it shows.
    wait_for(
        lambda: per_node(metrics(port), "kuzk_gpu_workers", node, state="idle") >= 1,
        30,
        f"the status server showing {node}'s GPU idle",
    )
    after = metrics(port)
    gpu_s = sum(float(p.get("gpuMs") or 0) for p in job["status"]["partitions"]) / 1000
    busy = per_node(after, "kuzk_gpu_busy_seconds_total", node) - per_node(
        before, "kuzk_gpu_busy_seconds_total", node
    )
    idle = {
        reason: per_node(after, "kuzk_gpu_idle_seconds_total", node, reason=reason)
        - per_node(before, "kuzk_gpu_idle_seconds_total", node, reason=reason)
        for reason in REASONS
    }
    share = commit_share(client.CoreV1Api(cluster.api), name)
    custom.delete_namespaced_custom_object(
        api.GROUP, api.VERSION, NAMESPACE, api.PROOFJOB_PLURAL, name
    )
    return Result(
        size, lanes, partitions, wall, gpu_s, busy, idle,
        stale_writes(custom, node) - stale_before, cpu, os.cpu_count() or 1, share,
    )


def report(results: list[Result]) -> None:
    print(
        f"\n{'log2':>4} {'lanes':>5} {'wall s':>7} {'part/min':>8} {'x1 lane':>7}"
        f" {'GPU occ':>7} {'shown':>6} {'diff pp':>7} {'ceiling/min':>11} {'of ceil':>7}"
        f" {'stale':>5} {'commit':>6}  idle s by reason"
    )
    base = {r.size: r for r in results if r.lanes == 1}
    for r in results:
        one = base.get(r.size)
        ratio = r.per_minute / one.per_minute if one else float("nan")
        idle = " ".join(f"{k}={v:.1f}" for k, v in r.idle_s.items() if v >= 0.05) or "-"
        print(
            f"{r.size:>4} {r.lanes:>5} {r.wall_s:7.1f} {r.per_minute:8.1f} {ratio:7.2f}"
            f" {r.occupancy:7.1%} {r.shown:6.1%} {100 * (r.shown - r.occupancy):+7.1f}"
            f" {r.ceiling_per_minute:11.1f} {r.per_minute / r.ceiling_per_minute:7.1%}"
            f" {r.stale:5d} {r.commit_share:6.1%}  {idle}"
        )
    print("\ngoals: log2 22: 2 lanes >= 1.3x 1 lane, 3 lanes >= 85 % GPU occupancy;"
          " log2 18 and 20: >= 80 % of the ceiling; busy shown within 5 pp everywhere")
    for r in results:
        checks = [("shown within 5 pp", abs(r.shown - r.occupancy) <= 0.05)]
        one = base.get(r.size)
        if r.size >= 22 and r.lanes == 2 and one:
            checks.append(("2 lanes >= 1.3x", r.per_minute / one.per_minute >= 1.3))
        if r.size >= 22 and r.lanes == 3:
            checks.append(("3 lanes >= 85 % occupancy", r.occupancy >= 0.85))
        if r.size < 22 and r.lanes > 1:
            checks.append((">= 80 % of ceiling", r.per_minute / r.ceiling_per_minute >= 0.8))
        verdicts = ", ".join(f"{what}: {'met' if ok else 'MISSED'}" for what, ok in checks)
        print(f"  log2 {r.size} lanes {r.lanes}: {verdicts}")


@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str], log: Path) -> Any:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        stop_group(proc, grace=20)


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that every finally below stops what it started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[18, 20, 22])
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--partitions", type=int, default=24)
    args = parser.parse_args(argv)
    if not all(1 <= n <= 8 for n in args.lanes) or not all(
        CIRCUIT_LOG2_MIN <= s <= CIRCUIT_LOG2_MAX for s in args.sizes
    ) or not PARTITIONS_MIN <= args.partitions <= PARTITIONS_MAX:
        print("error: --lanes 1..8, --sizes 4..27, --partitions 1..64", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
    nodes = {n: f"gpu-lanes-{n}" for n in args.lanes}
    print(f"lanes per GPU: sizes {args.sizes}, lanes {args.lanes}, {args.partitions}"
          f" snap-update partitions each, {os.cpu_count()} cores")
    logs = Path(tempfile.mkdtemp(prefix="kuzk-pipeline-"))
    results: list[Result] = []
    with contextlib.ExitStack() as stack:
        plane = stack.enter_context(ControlPlane())
        cluster = Cluster(plane)
        install_kuzk(cluster)
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl("create", "serviceaccount", "kuzk-prover", "-n", NAMESPACE)
        cluster.kubectl("create", "clusterrolebinding", f"kuzk-prover-{NAMESPACE}",
                        "--clusterrole=kuzk-prover", f"--serviceaccount={NAMESPACE}:kuzk-prover")
        stack.enter_context(cluster.kubelet(
            [NodeSpec(node, gpus=1, replicas=n) for n, node in nodes.items()]))
        operator = stack.enter_context(process(
            [sys.executable, "-m", "kuzk.cli", "operator", "--standalone",
             "--namespace", NAMESPACE, "--prover-command", json.dumps(["kuzk-prover"])],
            cluster.env(), logs / "operator.log"))
        port = free_port()
        stack.enter_context(process(
            [sys.executable, "-m", "kuzk.cli", "status-server", "--host", "127.0.0.1",
             "--port", str(port), "--kubeconfig", str(cluster.kubeconfig)],
            cluster.env(), logs / "status.log"))

        def ready() -> bool:
            try:
                return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=5).ok
            except requests.ConnectionError:
                return False

        wait_for(ready, 60, "the status server")
        try:
            for size in args.sizes:
                for lanes in args.lanes:
                    result = run_one(cluster, port, size, lanes, args.partitions, nodes[lanes])
                    results.append(result)
                    print(f"  log2 {size} lanes {lanes}: {result.wall_s:.1f} s,"
                          f" {result.per_minute:.1f}/min, GPU phase {result.occupancy:.1%},"
                          f" shown {result.shown:.1%}", flush=True)
        except Exception:
            print(f"operator log:\n{tail(logs / 'operator.log')}", file=sys.stderr)
            raise
        if operator.poll() is not None:
            print(f"the operator exited {operator.returncode}", file=sys.stderr)
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
