"""Guarded WorkerStatus writes against unguarded merge patches, side by side in one run.

    .venv/bin/python bench/worker_writes.py [--updates 240] [--writers 1,2,4,8]

Starts its own control plane (etcd and kube-apiserver from testenv, no kubelet), installs
the WorkerStatus CRD and, for each number of concurrent writers (separate processes, like the
lanes of one GPU), makes the same number of updates two ways on one GPU's WorkerStatus. Each
writer adds 1 to the GPU's worker's ``completed`` count per update:

* guarded: contract.workerstatus.writes.guarded_write (GET, decide, replace /status with the
  resourceVersion read, retry on 409 Conflict);
* unguarded: GET, add 1, then a JSON merge patch of ``status.workers`` without a
  resourceVersion, the write the protocol forbids.

It prints updates/s, the guarded writes' conflict rate (409s per PUT), and how many updates
the merge patches lost (updates made minus the sum of ``completed`` at the end). Exit status 1
if a guarded update was lost.

    .venv/bin/python bench/worker_writes.py --busy-node 60 [--gpus 8] [--lanes 1,3]
        [--partition 1.0]

The busy-node (lanes) mode writes one node's WorkerStatuses (one per GPU, each created by its
GPU's first lane) at the rate a busy 8-GPU node makes: for each lane count in ``--lanes``, one
process per lane of every GPU (``--gpus`` GPUs, alias ``--provers``) proves partitions back to
back as the prover does (join, synthesizing, acquire the GPU phase, waiting on a watch
in stage synth_done while another lane holds it, release it, leave; ``--partition`` seconds of
work on average, random from half to one and a half times that, 40 % synthesis and 60 % GPU phase;
``--gap`` seconds until the next pod) through contract.workerstatus.writes, and an "operator"
process makes the finalizer release of every finished pod (as a partition pod's finalizer does:
a LIST of the node's WorkerStatuses, then the write to the one with the pod's lane, if any) and the
periodic sweep of each of them (``--sweep`` seconds, 30 as the operator; no pod is gone, so it
must remove nothing). Per lane count it reports p50/p99 latency per operation, WorkerStatus
writes (PUTs) and 409s per partition attempt, every write that gave up (WorkerWriteConflict),
and that nothing was lost (no lane left, completed equal to the partitions), beside the guarded
writes/s the same object sustains in a tight loop with as many writers as GPUs (the reference,
same run; those writers share one object, as no lanes do now). Exit status 1 if a write gave up
or something was lost.
"""

from __future__ import annotations

import argparse
import copy
import multiprocessing
import queue
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

from kuzk.contract import api as kapi
from kuzk.contract.crd_workerstatus import workerstatus_crd
from kuzk.contract.workerstatus import decisions, worker_status_name, writes
from kuzk.contract.workerstatus.decisions import Assignment, Gpu, PodRef, WriteDecision
from kuzk.contract.workerstatus.writes import guarded_write

WHERE = (kapi.GROUP, kapi.VERSION, kapi.WORKERSTATUS_PLURAL)


class CountingClient(client.ApiClient):
    """The real client, counting PUTs and the 409 answers among them."""

    puts = 0
    conflicts = 0

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = super().call_api(method, url, *args, **kwargs)
        if method == "PUT":
            self.puts += 1
            self.conflicts += response.status == 409
        return response


def increment(status: Mapping[str, Any]) -> WriteDecision[None]:
    new = copy.deepcopy(dict(status))
    new["workers"][0]["completed"] += 1
    return WriteDecision(new, None)


def writer(
    kubeconfig: str, name: str, index: int, updates: int, guarded: bool, go: Any, out: Any
) -> None:
    configuration = client.Configuration()
    config.load_kube_config(kubeconfig, client_configuration=configuration)
    api = CountingClient(configuration)
    objects = client.CustomObjectsApi(api)
    go.wait()
    started = time.monotonic()
    for _ in range(updates):
        if guarded:
            guarded_write(api, name, increment, budget_s=30)
        else:
            workers = objects.get_cluster_custom_object(*WHERE, name)["status"]["workers"]
            workers[0]["completed"] += 1
            objects.patch_cluster_custom_object_status(
                *WHERE, name, {"status": {"workers": workers}}
            )
    out.put((started, time.monotonic(), api.puts, api.conflicts))


def run(
    api: client.ApiClient, kubeconfig: str, writers: int, total: int, guarded: bool
) -> tuple[float, float, int]:
    """One round: (updates/s, conflicts per PUT, updates lost)."""
    objects = client.CustomObjectsApi(api)
    name = f"bench-{'guarded' if guarded else 'patch'}-{writers}"
    gpu = {"uuid": f"GPU-{name}"}
    body = {
        "apiVersion": kapi.API_VERSION,
        "kind": kapi.WORKERSTATUS_KIND,
        "metadata": {"name": name},
        "spec": {"nodeName": name, "gpu": gpu},
    }
    objects.create_cluster_custom_object(*WHERE, body)
    workers = [{"id": "W", "gpu": gpu, "state": "idle", "completed": 0}]
    first = {"workers": workers, "proving": 0, "workerCount": 1}
    guarded_write(api, name, lambda _status: WriteDecision(first, None))
    spawn = multiprocessing.get_context("spawn")
    go, out = spawn.Event(), spawn.Queue()
    each = total // writers
    processes = [
        spawn.Process(target=writer, args=(kubeconfig, name, i, each, guarded, go, out))
        for i in range(writers)
    ]
    for process in processes:
        process.start()
    go.set()
    results = [out.get(timeout=600) for _ in processes]
    for process in processes:
        process.join()
    seconds = max(r[1] for r in results) - min(r[0] for r in results)
    puts, conflicts = sum(r[2] for r in results), sum(r[3] for r in results)
    final = objects.get_cluster_custom_object(*WHERE, name)["status"]["workers"]
    objects.delete_cluster_custom_object(*WHERE, name)
    made = each * writers
    return (
        made / seconds,
        conflicts / puts if puts else 0.0,
        made - sum(w["completed"] for w in final),
    )


# --- the busy-node mode ----------------------------------------------------------------------
class Timings:
    """Latencies, PUTs and 409s per operation and the writes that gave up, in one process."""

    def __init__(self, api: CountingClient) -> None:
        self.api = api
        self.latency: dict[str, list[float]] = {}
        self.gave_up: Counter[str] = Counter()
        self.puts: Counter[str] = Counter()
        self.conflicts: Counter[str] = Counter()

    def call(self, op: str, write: Callable[[], Any]) -> None:
        started, puts, conflicts = time.monotonic(), self.api.puts, self.api.conflicts
        try:
            write()
        except writes.WorkerWriteConflict:
            self.gave_up[op] += 1
        self.latency.setdefault(op, []).append(time.monotonic() - started)
        self.puts[op] += self.api.puts - puts
        self.conflicts[op] += self.api.conflicts - conflicts

    def result(self, who: str, count: int) -> tuple[Any, ...]:
        return (who, self.latency, self.gave_up, self.puts, self.conflicts, count)


def _client(kubeconfig: str) -> CountingClient:
    configuration = client.Configuration()
    config.load_kube_config(kubeconfig, client_configuration=configuration)
    return CountingClient(configuration)


def prover(kubeconfig: str, node: str, index: int, gpu_index: int, seconds: float,
           partition_s: float, gap_s: float, go: Any, done: Any, ended: Any, out: Any) -> None:
    """One lane's provers on GPU ``gpu_index``, one partition pod after another."""
    api = _client(kubeconfig)
    timings, gpu = Timings(api), Gpu(f"GPU-busy-{gpu_index}")
    name = worker_status_name(node, gpu.uuid)
    rng = random.Random(index)
    go.wait()
    end, partitions = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        partitions += 1
        pod_uid = str(uuid.uuid4())
        a = Assignment("bench", f"job-{index}", f"uid-job-{index}", "snap-update", partitions,
                       1, f"pod-{index}-{partitions}", pod_uid)
        work = partition_s * rng.uniform(0.5, 1.5)
        timings.call("join", lambda a=a: writes.join(api, node, gpu, a))
        timings.call("stage", lambda a=a: writes.stage(api, name, a, "synthesizing"))
        time.sleep(0.4 * work)  # synthesis; the acquire writes synth_done if it has to wait
        timings.call("acquire", lambda a=a: writes.acquire(api, name, a))
        time.sleep(0.6 * work)  # the GPU phase
        timings.call("release_gpu", lambda a=a: writes.release_gpu(api, name, a))
        timings.call("leave", lambda a=a: writes.leave(api, name, a, "succeeded"))
        ended[pod_uid] = "succeeded"
        done.put((a.pod_name, pod_uid))
        time.sleep(gap_s)  # the next pod's start on this GPU
    out.put(timings.result("prover", partitions))


class Pods(Mapping[str, Any]):
    """The sweep's view of the node's pods: every pod exists (none is deleted here); those in
    ``ended`` have ended with that outcome, the others run. A snapshot of the pods taken
    before the sweep reads the WorkerStatus would miss a pod that started and joined in
    between, and the sweep would remove its lane as lost."""

    def __init__(self, ended: Mapping[str, Any]) -> None:
        self.ended = dict(ended)

    def __contains__(self, uid: object) -> bool:
        return True

    def __getitem__(self, uid: str) -> Any:
        return self.ended.get(uid)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ended)

    def __len__(self) -> int:
        return len(self.ended)


def operator(kubeconfig: str, node: str, sweep_s: float, go: Any, done: Any, ended: Any,
             stop: Any, out: Any) -> None:
    """The operator's writes to the node: a finalizer release per finished pod, the sweep of
    each of its WorkerStatuses."""
    api = _client(kubeconfig)
    timings = Timings(api)
    swept: list[decisions.Released] = []
    go.wait()
    next_sweep = time.monotonic() + sweep_s
    while not (stop.is_set() and done.empty()):
        try:
            name, uid = done.get(timeout=0.1)
        except queue.Empty:
            pass
        else:
            ref = PodRef(name, uid)
            timings.call("finalizer",
                         lambda ref=ref: writes.release(api, node, ref, "succeeded"))
        if time.monotonic() >= next_sweep:
            next_sweep += sweep_s
            pods = Pods(ended)
            for found in writes.node_worker_statuses(api, node):
                name = found["metadata"]["name"]
                timings.call("sweep", lambda pods=pods, name=name: swept.extend(
                    writes.sweep(api, name, pods, datetime.now(UTC))))
    out.put(timings.result("operator", -len(swept)))


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]:.0f}"


def busy_node(api: client.ApiClient, kubeconfig: str, args: argparse.Namespace,
              lanes: int) -> dict[str, Any]:
    """Run the busy-node mode with ``lanes`` lanes per GPU; what it measured."""
    node = f"bench-busy-node-{lanes}"
    client.CoreV1Api(api).create_node({"metadata": {"name": node}})
    spawn = multiprocessing.get_context("spawn")
    go, stop, out, done = spawn.Event(), spawn.Event(), spawn.Queue(), spawn.Queue()
    writers = args.provers * lanes
    with spawn.Manager() as manager:
        ended = manager.dict()
        processes = [spawn.Process(target=prover, args=(
            kubeconfig, node, i, i % args.provers, args.busy_node, args.partition, args.gap, go,
            done, ended, out)) for i in range(writers)]
        processes.append(spawn.Process(target=operator, args=(
            kubeconfig, node, args.sweep, go, done, ended, stop, out)))
        for process in processes:
            process.start()
        started = time.monotonic()
        go.set()
        results = [out.get(timeout=args.busy_node + 120) for _ in range(writers)]
        stop.set()
        results.append(out.get(timeout=120))
        seconds = time.monotonic() - started
        for process in processes:
            process.join()
    latency: dict[str, list[float]] = {}
    gave_up: Counter[str] = Counter()
    puts_by_op: Counter[str] = Counter()
    conflicts_by_op: Counter[str] = Counter()
    partitions = swept = 0
    for who, lat, gave, p, c, n in results:
        for op, values in lat.items():
            latency.setdefault(op, []).extend(values)
        gave_up.update(gave)
        puts_by_op.update(p)
        conflicts_by_op.update(c)
        if who == "prover":
            partitions += n
        else:
            swept = -n  # lanes the sweep removed: none of these pods was gone
    final = [ws.get("status") or {} for ws in writes.node_worker_statuses(api, node)]
    gpus = [w for status in final for w in status.get("workers") or []]
    left = sum(len(w.get("lanes") or []) for w in gpus)
    completed = sum(w.get("completed", 0) for w in gpus)
    stale = sum(status.get("staleWritesRejected", 0) for status in final)
    puts, conflicts = sum(puts_by_op.values()), sum(conflicts_by_op.values())
    lost = left + abs(partitions - completed) + swept + stale
    print(f"\n{lanes} lane(s) per GPU: {args.provers} GPUs, {writers} writers, "
          f"{args.partition:g} s partitions (gap {args.gap:g} s), finalizer release per pod, "
          f"sweep every {args.sweep:g} s; {seconds:.0f} s, {partitions} partitions")
    print(f"{'operation':<12} {'n':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
          f"{'PUTs':>6} {'409s':>6} {'gave up':>8}")
    for op in ("join", "stage", "acquire", "release_gpu", "leave", "finalizer", "sweep"):
        values = latency.get(op, [])
        print(f"{op:<12} {len(values):>6} {_ms(values, 0.5):>7} {_ms(values, 0.99):>7} "
              f"{_ms(values, 1.0):>7} {puts_by_op[op]:>6} {conflicts_by_op[op]:>6} "
              f"{gave_up[op]:>8}")
    print(f"PUTs {puts} ({puts / partitions:.2f} per partition), answered 409: {conflicts} "
          f"({conflicts / partitions:.2f} per partition, {conflicts / puts:.1%} of PUTs); "
          f"gave up: {sum(gave_up.values())}; lanes left {left}, swept {swept}, stale writes "
          f"{stale}, completed {completed} of {partitions}: "
          f"{'nothing lost' if lost == 0 else f'{lost} LOST'}")
    return {"lanes": lanes, "seconds": seconds, "puts": puts, "conflicts": conflicts,
            "partitions": partitions, "gave_up": sum(gave_up.values()), "lost": lost,
            "writers": writers}


def busy_nodes(api: client.ApiClient, kubeconfig: str, args: argparse.Namespace) -> int:
    """Every lane count of ``--lanes`` in one run, then the comparison; the exit status."""
    results = [busy_node(api, kubeconfig, args, lanes) for lanes in args.lanes]
    capacity, _, _ = run(api, kubeconfig, args.provers, args.updates, True)
    print(f"\n{'lanes':>5} {'writers':>7} {'PUT/part':>8} {'409/part':>8} {'landed/s':>8} "
          f"{'of capacity':>11} {'gave up':>7} {'lost':>5}")
    for r in results:
        landed = (r["puts"] - r["conflicts"]) / r["seconds"]
        print(f"{r['lanes']:>5} {r['writers']:>7} {r['puts'] / r['partitions']:8.2f} "
              f"{r['conflicts'] / r['partitions']:8.2f} {landed:8.1f} "
              f"{landed / capacity:11.2f} {r['gave_up']:>7} {r['lost']:>5}")
    print(f"capacity: {capacity:.1f} guarded updates/s in a tight loop of {args.provers} "
          "writers (same run)")
    return 1 if any(r["gave_up"] or r["lost"] for r in results) else 0


def _lanes(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        msg = f"expected lane counts of 1 or more, like 1,3; not {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=240, help="updates per round")
    parser.add_argument("--writers", default="1,2,4,8", help="concurrent writers per round")
    parser.add_argument("--busy-node", type=float, default=None, metavar="SECONDS",
                        help="run the busy-node mode for SECONDS instead of the rounds")
    parser.add_argument("--gpus", "--provers", dest="provers", type=int, default=8,
                        help="busy node: GPUs (default 8)")
    parser.add_argument("--lanes", type=_lanes, default=[1, 3],
                        help="busy node: lanes per GPU to compare, e.g. 1,3 (default)")
    parser.add_argument("--partition", type=float, default=1.0,
                        help="busy node: seconds of work per partition (default 1)")
    parser.add_argument("--gap", type=float, default=0.2,
                        help="busy node: seconds between a pod's end and the next one's start")
    parser.add_argument("--sweep", type=float, default=30.0,
                        help="busy node: seconds between sweeps (default 30, the operator's)")
    args = parser.parse_args()
    if args.busy_node is not None and (min(args.busy_node, args.partition, args.sweep) <= 0
                                       or args.provers < 1 or args.gap < 0):
        parser.error("busy node: --busy-node, --partition, --sweep and --gpus must be "
                     "positive, --gap not negative")
    # The test environment builds and starts the control plane; it lives beside the tests.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from testenv.controlplane import ControlPlane

    with ControlPlane(with_scheduler=False, with_controller_manager=False) as plane:
        api = config.new_client_from_config(config_file=str(plane.kubeconfig))
        ext = client.ApiextensionsV1Api(api)
        ext.create_custom_resource_definition(workerstatus_crd())
        crd = workerstatus_crd()["metadata"]["name"]
        while not any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(crd).status.conditions or []
        ):
            time.sleep(0.1)  # polling the CRD's condition
        if args.busy_node is not None:
            return busy_nodes(api, str(plane.kubeconfig), args)
        print(f"{args.updates} updates per round, one object, writers in separate processes")
        print(
            f"{'writers':>7} {'guarded/s':>10} {'409/PUT':>8} {'lost':>5}"
            f" {'patch/s':>9} {'lost':>11} {'patch/guarded':>14}"
        )
        guarded_lost = 0
        for writers in (int(w) for w in args.writers.split(",")):
            g_rate, g_conflicts, g_lost = run(
                api, str(plane.kubeconfig), writers, args.updates, True
            )
            p_rate, _, p_lost = run(api, str(plane.kubeconfig), writers, args.updates, False)
            made = args.updates // writers * writers
            guarded_lost += g_lost
            print(
                f"{writers:>7} {g_rate:>10.1f} {g_conflicts:>8.1%} {g_lost:>5}"
                f" {p_rate:>9.1f} {p_lost:>4} ({p_lost / made:>4.0%}) {p_rate / g_rate:>13.2f}x"
            )
    return 1 if guarded_lost else 0


if __name__ == "__main__":
    sys.exit(main())
