"""With the real prover, the WorkerStatuses tell the truth while a job runs, and after a
prover is SIGKILLed mid-``gpu`` the operator's finalizer release frees its worker.

What a test must see happen (two lanes on one GPU at once) it arranges with ``Gates``: the
built-in prover run by ``programs/gated_prover.py`` waits, alive, at a stage until the test has
seen what it waits for, instead of the test hoping that a fast machine overlaps them."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kuzk.contract import api
from kuzk.contract.workerstatus import worker_status_name
from kuzk.operator.controller import RESYNC_SECONDS, STAGE_SECONDS
from kuzk.operator.runtime import SWEEP_SECONDS
from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, get_job, proofjob, wait_job

REAL_PROVER = ("--prover-command", json.dumps(["kuzk-prover"]))
GATED_PROVER = Path(__file__).parents[1] / "programs" / "gated_prover.py"


@dataclass
class Gates:
    """Steers ``programs/gated_prover.py``, the built-in prover that waits at the stages
    ``set`` names for its pod (or "*": every pod) until ``release``."""

    dir: Path

    def __post_init__(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def command(self) -> tuple[str, str]:
        """The operator's flag that makes partition pods run the gated prover."""
        return ("--prover-command",
                json.dumps([sys.executable, str(GATED_PROVER), str(self.dir)]))

    def set(self, **stages: list[str]) -> None:
        """``gates.set(**{"job-p0-a1": ["synthesizing"], "*": ["gpu"]})``"""
        (self.dir / "gates.json").write_text(json.dumps(stages))

    def waiting(self) -> set[tuple[str, str]]:
        """The (pod, stage) pairs whose prover waits at its gate now."""
        reached = {tuple(p.name.rsplit(".", 1)) for p in self.dir.iterdir()
                   if not p.name.startswith(".") and p.name.count(".") == 1
                   and p.suffix != ".json"}
        return {(pod, stage) for pod, stage in reached
                if not (self.dir / f"{pod}.{stage}.go").exists()}

    def release(self, pod: str, stage: str) -> None:
        (self.dir / f"{pod}.{stage}.go").touch()


@dataclass
class Sample:
    t: float
    # pod UIDs whose container is running per the API, read before and after the workers, and
    # whose prover has not written its result yet, checked after the workers were read (the
    # prover releases its worker only after writing its result)
    working: set[str]
    lanes: dict[tuple[str, str], set[str]]  # (node, worker id) -> pod UIDs with a lane on it
    holders: dict[tuple[str, str], str | None]  # (node, worker id) -> the GPU phase's holder
    in_gpu: dict[tuple[str, str], set[str]]  # (node, worker id) -> lanes in stage gpu


def _running(core: client.CoreV1Api, namespace: str) -> set[str]:
    pods = core.list_namespaced_pod(namespace).items
    return {p.metadata.uid for p in pods if p.status.phase == "Running"
            and p.status.container_statuses
            and p.status.container_statuses[0].state.running is not None}


def _read_workers(custom: client.CustomObjectsApi) -> tuple[
        dict[tuple[str, str], set[str]], dict[tuple[str, str], str | None],
        dict[tuple[str, str], set[str]]]:
    lanes: dict[tuple[str, str], set[str]] = {}
    holders: dict[tuple[str, str], str | None] = {}
    in_gpu: dict[tuple[str, str], set[str]] = {}
    for ws in custom.list_cluster_custom_object(api.GROUP, api.VERSION,
                                                api.WORKERSTATUS_PLURAL)["items"]:
        for w in (ws.get("status") or {}).get("workers") or []:
            key = (ws["metadata"]["name"], w["id"])
            lanes[key] = {lane["pod"]["uid"] for lane in w.get("lanes") or []}
            holders[key] = (w.get("holder") or {}).get("pod", {}).get("uid")
            in_gpu[key] = {lane["pod"]["uid"] for lane in w.get("lanes") or []
                           if lane.get("stage") == "gpu"}
    return lanes, holders, in_gpu


def _unfinished(kubelet: ProcessKubelet) -> set[str]:
    with kubelet.lock:
        runners = dict(kubelet.runners)
    out = set()
    for uid, runner in runners.items():
        path = runner.containers[0].message_file
        if not (path.exists() and path.stat().st_size):
            out.add(uid)
    return out


def _sample(cluster: Cluster, kubelet: ProcessKubelet, namespace: str, stop: threading.Event,
            samples: list[Sample]) -> None:
    custom = client.CustomObjectsApi(cluster.api)
    while not stop.wait(0.1):
        before = _running(cluster.core, namespace)
        lanes, holders, in_gpu = _read_workers(custom)
        after = _running(cluster.core, namespace)
        working = before & after & _unfinished(kubelet)
        samples.append(Sample(time.monotonic(), working, lanes, holders, in_gpu))


def _watch_versions(cluster: Cluster, stop: threading.Event,
                    versions: list[dict[str, Any]]) -> None:
    """Every version of every WorkerStatus the API server holds from the start until ``stop``:
    a watch delivers each write, where a sampler sees only what lasts past its period."""
    custom = client.CustomObjectsApi(cluster.api)
    listed = custom.list_cluster_custom_object(api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL)
    versions.extend(listed["items"])
    version = listed["metadata"]["resourceVersion"]
    while not stop.is_set():
        for event in watch.Watch().stream(
                custom.list_cluster_custom_object, api.GROUP, api.VERSION,
                api.WORKERSTATUS_PLURAL, resource_version=version, timeout_seconds=1):
            version = event["object"]["metadata"]["resourceVersion"]
            versions.append(event["object"])


def _written(versions: list[dict[str, Any]]) -> tuple[set[str], int]:
    """The pods that held a GPU phase in some written version, and the most lanes one GPU
    had at once."""
    held, most = set(), 0
    for ws in list(versions):
        for w in (ws.get("status") or {}).get("workers") or []:
            if uid := (w.get("holder") or {}).get("pod", {}).get("uid"):
                held.add(uid)
            most = max(most, len(w.get("lanes") or []))
    return held, most


def _lies(samples: list[Sample]) -> list[str]:
    """Samples where a GPU no longer shows the lane of a pod that joined it while that pod is
    still running and still working on its partition, where a lane in stage gpu is not the
    GPU phase's holder, or where the holder is not one of the GPU's lanes."""
    joined: dict[str, tuple[str, str]] = {}
    lies = []
    for s in samples:
        for worker, uids in s.lanes.items():
            for uid in uids:
                joined[uid] = worker
        for uid, worker in joined.items():
            if uid in s.working and uid not in s.lanes.get(worker, set()):
                lies.append(f"t={s.t:.2f} {worker} lost the lane of {uid} while it works")
        for worker, uids in s.in_gpu.items():
            holder = s.holders.get(worker)
            if uids - {holder} or (holder is not None and holder not in s.lanes[worker]):
                lies.append(f"t={s.t:.2f} {worker} holder {holder}, lanes in gpu {uids}")
    return lies


def _node_statuses(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    """The statuses of the WorkerStatuses of ``node``'s GPUs."""
    listed = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, field_selector=f"spec.nodeName={node}")
    return [ws.get("status") or {} for ws in listed["items"]]


def _workers(cluster: Cluster, nodes: list[str]) -> list[dict[str, Any]]:
    return [w for n in nodes for status in _node_statuses(cluster, n)
            for w in status.get("workers") or []]


def _shared(versions: list[dict[str, Any]], uid: str) -> bool:
    """Whether some written version shows the lane of pod ``uid`` beside another on its GPU."""
    return any(uid in lanes and len(lanes) >= 2
               for ws in list(versions) for w in (ws.get("status") or {}).get("workers") or []
               for lanes in [{lane["pod"]["uid"] for lane in w.get("lanes") or []}])


def test_worker_status_never_lies_during_a_real_job(cluster: Cluster, namespace: str, nodes,
                                                    run_operator, tmp_path: Path) -> None:
    """Two lanes per GPU (time-slicing replicas) on 2 nodes x 2 GPUs, sampled every 0.1 s:
    no lane of a working pod lost, never a lane in stage gpu that is not the holder (so never
    two lanes in one GPU's phase); as written (every version, through a watch): every
    partition held its GPU's phase, two lanes shared a GPU and never more; every partition
    done, no pod left on its finalizer. That two lanes share a GPU is arranged, not hoped
    for: partition 0's prover waits, alive, with its lane synthesizing, until a written
    version shows a second lane on its GPU (on a loaded machine a prover may otherwise end
    before the next one on its GPU starts)."""
    kubelet = nodes(2, gpus=2, replicas=2)
    gates = Gates(tmp_path / "gates")
    first = api.pod_name("truth", 0, 1)
    gates.set(**{first: ["synthesizing"]})
    run_operator(*gates.command())
    samples: list[Sample] = []
    versions: list[dict[str, Any]] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_sample, args=(cluster, kubelet, namespace, stop, samples)),
               threading.Thread(target=_watch_versions, args=(cluster, stop, versions))]
    for thread in threads:
        thread.start()
    try:
        apply_job(cluster, namespace, proofjob("truth", circuitLog2=18))
        wait_for(lambda: (first, "synthesizing") in gates.waiting(), 120,
                 f"{first}'s prover at its gate, its lane synthesizing")
        uid = cluster.core.read_namespaced_pod(first, namespace).metadata.uid
        wait_for(lambda: _shared(versions, uid), 120,
                 f"a second lane written on the GPU of {first}'s waiting lane")
        gates.release(first, "synthesizing")
        job = wait_job(cluster, namespace, "truth", "Succeeded", timeout=300)
        pods = {p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items}
        # The last holds were written before the job succeeded; the watch delivers them.
        wait_for(lambda: _written(versions)[0] >= pods, 30,
                 "every partition's hold of the GPU phase, as written")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert job["status"]["succeeded"] == 16
    held, most_lanes = _written(versions)
    assert held == pods and len(pods) == 16
    assert most_lanes == 2, "two lanes share a GPU, and never more"
    assert _lies(samples) == []
    assert all(len(uids) <= 2 for s in samples for uids in s.lanes.values())
    finalized = [p.metadata.name for p in cluster.core.list_namespaced_pod(namespace).items
                 if api.FINALIZER in (p.metadata.finalizers or [])]
    wait_for(lambda: not [p for p in cluster.core.list_namespaced_pod(namespace).items
                          if api.FINALIZER in (p.metadata.finalizers or [])],
             30, f"no pod left on its finalizer (had: {finalized})")

    workers = _workers(cluster, sorted(kubelet.nodes))
    assert len(workers) == 4
    assert {w["state"] for w in workers} == {"idle"}
    assert not any(w.get("lanes") for w in workers)
    assert sum(w.get("completed", 0) for w in workers) == 16
    assert {w["gpu"]["uuid"] for w in workers} == {
        g for spec in kubelet.nodes.values() for g in spec.gpu_uuids()}
    # Every prover left its own lane and nothing was disrupted, so each finalizer release
    # found its work done: a job that ran cleanly counts no stale write.
    stale = [sum(status.get("staleWritesRejected", 0) for status in _node_statuses(cluster, n))
             for n in sorted(kubelet.nodes)]
    assert stale == [0, 0]


def _pid_of(kubelet: ProcessKubelet, pod_uid: str) -> int | None:
    runner = kubelet.runners.get(pod_uid)
    proc = runner.containers[0].proc if runner else None
    return proc.pid if proc else None


def test_sigkilled_prover_is_released_by_the_finalizer(cluster: Cluster, namespace: str,
                                                       nodes, run_operator,
                                                       tmp_path: Path) -> None:
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    name = worker_status_name(node, kubelet.nodes[node].gpu_uuids()[0])
    # The first attempt's prover waits, alive, in its GPU phase until the test kills it.
    gates = Gates(tmp_path / "gates")
    gates.set(**{"crash-p0-a1": ["gpu"]})
    run_operator(*gates.command())
    custom = client.CustomObjectsApi(cluster.api)

    def worker() -> dict[str, Any] | None:
        try:
            ws = custom.get_cluster_custom_object(api.GROUP, api.VERSION,
                                                  api.WORKERSTATUS_PLURAL, name)
        except ApiException as e:
            if e.status == 404:  # its first lane has not created it yet
                return None
            raise
        workers = (ws.get("status") or {}).get("workers") or []
        return workers[0] if workers else None

    def lane(stage: str | None = None, attempt: int | None = None) -> dict[str, Any] | None:
        """The worker's lane in ``stage`` (or of ``attempt``), with its worker's id."""
        w = worker() or {}
        for entry in w.get("lanes") or []:
            if stage in (None, entry.get("stage")) and attempt in (None, entry.get("attempt")):
                return {**entry, "id": w["id"], "holder": w.get("holder")}
        return None

    apply_job(cluster, namespace, proofjob("crash", partitions=1, circuitLog2=21))
    first = wait_for(lambda: lane("gpu"), 120, "the prover in stage gpu", interval=0.02)
    assert first["attempt"] == 1
    assert first["holder"]["pod"]["uid"] == first["pod"]["uid"]
    pid = _pid_of(kubelet, first["pod"]["uid"])
    assert pid is not None

    def partition_entry() -> dict[str, Any]:
        job = get_job(cluster, namespace, "crash") or {}
        return ((job.get("status") or {}).get("partitions") or [{}])[0]

    # The job shows the partition in gpu: the stage comes with the job's next status write,
    # at the latest the first sync STAGE_SECONDS after its last one (unfinished jobs sync
    # every RESYNC_SECONDS).
    live = wait_for(lambda: (p := partition_entry()).get("state") == "gpu" and p,
                    STAGE_SECONDS + RESYNC_SECONDS + 15, "the job's partition shown in gpu",
                    interval=0.05)
    assert live["worker"] == first["id"]
    assert live["node"] == node
    os.killpg(pid, signal.SIGKILL)

    second = wait_for(lambda: lane(attempt=2), 120, "the retried partition's lane")
    assert second["id"] == first["id"]
    assert second["pod"]["uid"] != first["pod"]["uid"]
    job = wait_job(cluster, namespace, "crash", "Succeeded", timeout=180)
    assert job["status"]["partitions"][0]["attempt"] == 2
    final = worker()
    assert final is not None and final["state"] == "idle" and final["completed"] == 1
    assert not final.get("lanes") and "holder" not in final
    events = cluster.core.list_namespaced_event(
        namespace, field_selector="involvedObject.name=crash,reason=PartitionRetried").items
    assert events
    assert get_job(cluster, namespace, "crash") is not None


def test_a_lane_waiting_behind_a_sigkilled_holder_gets_the_gpu(
        cluster: Cluster, namespace: str, nodes, run_operator, tmp_path: Path) -> None:
    """One GPU with two lanes: the holder of the GPU phase is SIGKILLed while the other lane
    waits for it; the operator's finalizer release (at the latest its sweep) frees the GPU
    phase, the waiter holds it next, and the killed partition is retried. Both first
    attempts' provers wait at a gate inside their GPU phase, so the holder is killed in it
    and the waiter is seen holding it."""
    kubelet = nodes(1, gpus=1, replicas=2)
    node = next(iter(kubelet.nodes))
    name = worker_status_name(node, kubelet.nodes[node].gpu_uuids()[0])
    gates = Gates(tmp_path / "gates")
    gates.set(**{api.pod_name("queue", p, 1): ["gpu"] for p in (0, 1)})
    run_operator(*gates.command())
    custom = client.CustomObjectsApi(cluster.api)

    def worker() -> dict[str, Any]:
        try:
            ws = custom.get_cluster_custom_object(api.GROUP, api.VERSION,
                                                  api.WORKERSTATUS_PLURAL, name)
        except ApiException as e:
            if e.status == 404:  # its first lane has not created it yet
                return {}
            raise
        return ((ws.get("status") or {}).get("workers") or [{}])[0]

    def holder_and_waiter() -> tuple[str, str] | None:
        w = worker()
        held = (w.get("holder") or {}).get("pod", {}).get("uid")
        waiting = [lane["pod"]["uid"] for lane in w.get("lanes") or []
                   if lane.get("readyAt") and lane["pod"]["uid"] != held]
        return (held, waiting[0]) if held and waiting else None

    apply_job(cluster, namespace, proofjob("queue", partitions=2, circuitLog2=20))
    held, waiter = wait_for(holder_and_waiter, 120, "one lane holding, the other waiting")
    pid = _pid_of(kubelet, held)
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)
    wait_for(lambda: (worker().get("holder") or {}).get("pod", {}).get("uid") == waiter,
             SWEEP_SECONDS + 15, "the waiting lane holding the GPU phase")
    waiting_pod = kubelet.runners[waiter].name
    # the killed holder's gate stays reached: it never went on
    wait_for(lambda: (waiting_pod, "gpu") in gates.waiting(), 60, "the waiter at its gate")
    gates.release(waiting_pod, "gpu")
    job = wait_job(cluster, namespace, "queue", "Succeeded", timeout=240)
    attempts = sorted(p["attempt"] for p in job["status"]["partitions"])
    assert attempts == [1, 2], "the killed partition was retried"
    final = worker()
    assert (final["state"], final["completed"], final.get("lanes")) == ("idle", 2, [])
