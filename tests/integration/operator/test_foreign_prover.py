"""Provers that are not kuzk's own, under the lane agent (``kuzk-lane run --calls -- CMD``):
the shell-script and C examples of examples/foreign-prover get lanes and a truthful screen
with the same checks as the built-in prover (test_worker_truth.py), the C one also in the
prover image's containers; a SIGKILLed prover's GPU
phase is freed by its agent, a SIGKILLed agent's lane by the operator's finalizer release, a
SIGSTOPped prover's by its liveness probe (on the agent's pulse) within 90 s;
an ``acquire`` made while kube-apiserver restarts waits and then succeeds; and every bad call
is refused with its one line while the WorkerStatus stays as it was."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kuzk.contract import api
from kuzk.operator.decide.pods import KERNEL_CACHE_DIR
from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.runtime import Images, build_images
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, get_job, proofjob, wait_job
from tests.integration.operator.test_worker_truth import (
    Sample,
    _lies,
    _sample,
    _watch_versions,
    _workers,
)
from tests.integration.status.server import running

# Three and a half minutes, mostly waiting on probes and restarts: it runs on the long tests'
# worker (tests/conftest.py).
pytestmark = pytest.mark.worker("long")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "foreign-prover"
SCRIPT = EXAMPLES / "prover.sh"
BUSY = "kuzk_gpu_busy_seconds_total"


def under_agent(*command: str, calls: bool = True) -> tuple[str, str]:
    flags = ["--calls"] if calls else []
    return ("--prover-command", json.dumps(["kuzk-lane", "run", *flags, "--", *command]))


def script_commitment(job_uid: str, partition: int) -> str:
    return "0x" + hashlib.sha256(f"{job_uid}/{partition}".encode()).hexdigest()


def c_commitment(job_uid: str, partition: int) -> str:
    value = 0xCBF29CE484222325
    for byte in f"{job_uid}/{partition}".encode():
        value = ((value ^ byte) * 0x100000001B3) % 2**64
    return f"0x{value:016x}"


def _no_finalizers_left(cluster: Cluster, namespace: str) -> None:
    wait_for(lambda: not [p for p in cluster.core.list_namespaced_pod(namespace).items
                          if api.FINALIZER in (p.metadata.finalizers or [])],
             30, "no pod left on its finalizer")


def _busy(metrics: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    """Busy seconds by GPU UUID, as the status server counts them."""
    return {dict(labels)["gpu_uuid"]: value for (name, labels), value in metrics.items()
            if name == BUSY}


def _holders(written: list[dict[str, Any]], nodes: Collection[str]) -> dict[
        str, list[tuple[str | None, float, float]]]:
    """Every version of the holder of every GPU of ``nodes``, as written (``_watch_versions``),
    by GPU UUID: (holder pod UID, since, updatedAt)."""
    versions: dict[str, list[tuple[str | None, float, float]]] = {}
    for ws in written:
        if (ws.get("spec") or {}).get("nodeName") not in nodes:
            continue
        status = ws.get("status") or {}
        updated = api.parse_time(status["updatedAt"]).timestamp() if status else 0.0
        for w in status.get("workers") or []:
            holder = w.get("holder") or {}
            since = api.parse_time(holder["since"]).timestamp() if holder else updated
            versions.setdefault(w["gpu"]["uuid"], []).append(
                (holder.get("pod", {}).get("uid"), since, updated))
    return versions


def _held(versions: list[tuple[str | None, float, float]]) -> float:
    """Seconds a GPU's phase was held, from its holders' ``since`` to the write that ended
    each hold."""
    held, current = 0.0, None
    for holder, since, updated in versions:
        if current is not None and current[0] != holder:
            held += updated - current[1]
            current = None
        if holder is not None and current is None:
            current = (holder, since)
    assert current is None, "a hold that never ended"
    return held


def _run_job_and_check(cluster: Cluster, namespace: str, kubelet: ProcessKubelet, name: str,
                       partitions: int, commitment: Callable[[str, int], str],
                       tmp_path: Path) -> None:
    """Run ``name`` while sampling the WorkerStatuses and the status server; check the truth."""
    samples: list[Sample] = []
    written: list[dict[str, Any]] = []
    stop = threading.Event()
    with running(cluster, tmp_path / "status-server.log") as server:
        busy_before = _busy(server.metrics())
        threads = [threading.Thread(target=_sample,
                                    args=(cluster, kubelet, namespace, stop, samples)),
                   threading.Thread(target=_watch_versions, args=(cluster, stop, written))]
        for thread in threads:
            thread.start()
        try:
            apply_job(cluster, namespace, proofjob(name, partitions=partitions))
            job = wait_job(cluster, namespace, name, "Succeeded", timeout=300)
            # The status server shows the last release within its watch's delivery.
            wait_for(lambda: all(not w.get("holder") for w in _workers(
                cluster, sorted(kubelet.nodes))), 10, "no GPU held")
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        busy_after = wait_for(lambda: (b := _busy(server.metrics())) and all(
            s["state"] == "idle" for s in server.status()["gpu_workers"]) and b, 10,
            "the status server showing every GPU idle")
    assert job["status"]["succeeded"] == partitions
    uid = job["metadata"]["uid"]
    assert {p["index"]: p["commitment"] for p in job["status"]["partitions"]} == {
        i: commitment(uid, i) for i in range(partitions)}
    assert _lies(samples) == []
    assert len({uid for s in samples for uid in s.holders.values() if uid}) >= partitions // 2
    assert any(len(uids) > 1 for s in samples for uids in s.lanes.values()), (
        "two lanes should share a GPU at some point")
    _no_finalizers_left(cluster, namespace)

    workers = _workers(cluster, sorted(kubelet.nodes))
    assert {w["state"] for w in workers} == {"idle"}
    assert sum(w.get("completed", 0) for w in workers) == partitions
    # Busy as the status server shows it, within 5 points (of the job's wall time) of the
    # time each GPU's phase was held as the WorkerStatus writes say.
    window = samples[-1].t - samples[0].t
    versions = _holders(written, set(kubelet.nodes))
    assert set(versions) == {w["gpu"]["uuid"] for w in workers}
    for uuid, history in versions.items():
        held = _held(history)
        shown = busy_after[uuid] - busy_before.get(uuid, 0.0)
        assert held > 0
        assert abs(shown - held) <= 0.05 * window, (uuid, shown, held, window)


def test_the_shell_prover_gets_lanes_and_a_truthful_screen(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two lanes per GPU on 2 nodes x 2 GPUs, the shell-script prover under the agent."""
    monkeypatch.setenv("PROVER_SYNTH_SECONDS", "0.5")
    monkeypatch.setenv("PROVER_GPU_SECONDS", "1")
    kubelet = nodes(2, gpus=2, replicas=2)
    run_operator(*under_agent("sh", str(SCRIPT)))
    _run_job_and_check(cluster, namespace, kubelet, "shell", 16, script_commitment, tmp_path)


def test_the_c_prover_gets_lanes_and_a_truthful_screen(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The C example, built here with the machine's compiler, run as a process."""
    binary = tmp_path / "prover"
    subprocess.run(["cc", "-O2", "-o", str(binary), str(EXAMPLES / "prover.c")], check=True,
                   timeout=120)
    monkeypatch.setenv("PROVER_SYNTH_SECONDS", "0.5")
    monkeypatch.setenv("PROVER_GPU_SECONDS", "1")
    kubelet = nodes(1, gpus=2, replicas=2)
    run_operator(*under_agent(str(binary)))
    _run_job_and_check(cluster, namespace, kubelet, "compiled", 6, c_commitment, tmp_path)


@pytest.fixture(scope="module")
def images() -> Images:
    return build_images()


def test_the_c_prover_runs_in_the_prover_image_under_its_agent(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any,
        images: Images) -> None:
    """The same C example, linked statically and handed to the pods through the node
    directory the chart can mount (``prover.kernelCacheHostPath``), in the prover image's
    containers: read-only root, uid 10001, credentials from the standard path, the agent's
    abstract socket between the two."""
    folder = Path(tempfile.mkdtemp(prefix="kuzk-foreign-prover-"))
    try:
        folder.chmod(0o755)  # the pods' uid 10001 reads it
        subprocess.run(["cc", "-O2", "-static", "-o", str(folder / "prover"),
                        str(EXAMPLES / "prover.c")], check=True, timeout=120)
        node = next(iter(nodes(1, gpus=1, replicas=2).nodes))
        run_operator(*under_agent(f"{KERNEL_CACHE_DIR}/prover"), "--prover-image",
                     images.prover, "--prover-kernel-cache-host-path", str(folder))
        apply_job(cluster, namespace, proofjob("contained", partitions=2))
        job = wait_job(cluster, namespace, "contained", "Succeeded", timeout=300)
    finally:
        shutil.rmtree(folder)
    uid = job["metadata"]["uid"]
    assert {p["index"]: p["commitment"] for p in job["status"]["partitions"]} == {
        i: c_commitment(uid, i) for i in range(2)}
    for pod in cluster.core.list_namespaced_pod(namespace).items:
        (container,) = pod.status.container_statuses
        assert (container.container_id or "").startswith("podman://"), pod.metadata.name
    _no_finalizers_left(cluster, namespace)
    # The agents wrote the lanes with the pods' own in-cluster credentials.
    final = _worker(cluster, node)
    assert (final["state"], final["completed"], final.get("lanes")) == ("idle", 2, [])


def _only_ws(cluster: Cluster, node: str) -> dict[str, Any]:
    """The WorkerStatus of ``node``'s one GPU; empty until its first lane creates it."""
    listed = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, field_selector=f"spec.nodeName={node}")
    items = listed["items"]
    assert len(items) <= 1, [ws["metadata"]["name"] for ws in items]
    return dict(items[0]) if items else {}


def _worker(cluster: Cluster, node: str) -> dict[str, Any]:
    ws = _only_ws(cluster, node)
    return ((ws.get("status") or {}).get("workers") or [{}])[0]


def _lane(cluster: Cluster, node: str, stage: str | None = None,
          attempt: int | None = None) -> dict[str, Any] | None:
    w = _worker(cluster, node)
    for entry in w.get("lanes") or []:
        if stage in (None, entry.get("stage")) and attempt in (None, entry.get("attempt")):
            return {**entry, "holder": w.get("holder")}
    return None


def _agent_pid(kubelet: ProcessKubelet, pod_uid: str) -> int:
    proc = kubelet.runners[pod_uid].containers[0].proc
    assert proc is not None
    return proc.pid


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


HOLD = """set -e
kuzk-lane stage synthesizing
kuzk-lane acquire
gate hold
kuzk-lane release-gpu
echo '{"commitment": "0xc0ffee"}' | kuzk-lane result -"""


def _holding(cluster: Cluster, namespace: str, nodes: Any, run_operator: Any, steps: Path,
             job: str) -> tuple[Any, str, dict[str, Any]]:
    """A one-partition job of a shell prover on one GPU that waits at gate ``hold`` inside
    its GPU phase until the test creates ``steps/hold`` (then its retry goes through at
    once), once its lane holds the phase: the kubelet, the node and that lane."""
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    steps.mkdir()
    run_operator(*_gated(steps, HOLD))
    apply_job(cluster, namespace, proofjob(job, partitions=1))
    lane = wait_for(lambda: (steps / "at-hold").exists() and _lane(cluster, node, "gpu"), 120,
                    "the prover holding the GPU phase")
    return kubelet, node, lane


def test_a_prover_killed_while_holding_is_released_by_its_agent_and_retried(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any,
        tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    kubelet, node, first = _holding(cluster, namespace, nodes, run_operator, steps, "killed")
    assert first["holder"]["pod"]["uid"] == first["pod"]["uid"]
    (prover,) = _children(_agent_pid(kubelet, first["pod"]["uid"]))
    os.kill(prover, signal.SIGKILL)
    (steps / "hold").touch()

    second = wait_for(lambda: _lane(cluster, node, attempt=2), 120, "the retried partition")
    assert second["pod"]["uid"] != first["pod"]["uid"]
    pods = cluster.core.list_namespaced_pod(namespace).items
    (killed,) = [p for p in pods if p.metadata.uid == first["pod"]["uid"]]
    terminated = killed.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.message) == (1, "the prover was killed by SIGKILL")
    job = wait_job(cluster, namespace, "killed", "Succeeded", timeout=120)
    assert job["status"]["partitions"][0]["attempt"] == 2
    # The agent left the killed prover's lane itself: no release had anything left to do.
    assert _only_ws(cluster, node)["status"].get("staleWritesRejected", 0) == 0
    final = _worker(cluster, node)
    assert (final["state"], final["completed"], final.get("lanes")) == ("idle", 1, [])


def test_a_killed_agent_fails_its_pod_and_the_finalizer_frees_its_lane(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any,
        tmp_path: Path) -> None:
    steps = tmp_path / "steps"
    kubelet, node, first = _holding(cluster, namespace, nodes, run_operator, steps, "orphan")
    agent = _agent_pid(kubelet, first["pod"]["uid"])
    (prover,) = _children(agent)
    os.kill(agent, signal.SIGKILL)
    # The retry goes through; the orphaned prover, let go too, finds no agent to call.
    (steps / "hold").touch()
    try:
        wait_for(lambda: (lane := _lane(cluster, node)) is None
                 or lane["pod"]["uid"] != first["pod"]["uid"], 60,
                 "the killed agent's lane released")
        job = wait_job(cluster, namespace, "orphan", "Succeeded", timeout=120)
    finally:
        # The prover outlives its agent here (a container would end with its first process).
        with contextlib.suppress(ProcessLookupError):
            os.kill(prover, signal.SIGKILL)
    assert job["status"]["partitions"][0]["attempt"] == 2
    pods = cluster.core.list_namespaced_pod(namespace).items
    (killed,) = [p for p in pods if p.metadata.uid == first["pod"]["uid"]]
    assert killed.status.phase == "Failed"
    final = _worker(cluster, node)
    assert (final["state"], final["completed"], final.get("lanes")) == ("idle", 1, [])


def _gated(steps: Path, script: str, *, calls: bool = True) -> tuple[str, str]:
    """A prover that waits at each ``gate NAME`` for the test to create ``steps/NAME``."""
    prelude = f'gate() {{ touch "{steps}/at-$1"; until [ -e "{steps}/$1" ]; do sleep 0.02; done; }}'
    return under_agent("sh", "-c", f"{prelude}\n{script}", calls=calls)


def test_an_acquire_during_an_api_server_restart_waits_then_succeeds(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any,
        tmp_path: Path) -> None:
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    steps = tmp_path / "steps"
    steps.mkdir()
    run_operator(*_gated(steps, f"""set -e
kuzk-lane stage synthesizing
gate acquire
kuzk-lane acquire
touch "{steps}/acquired"
kuzk-lane release-gpu
echo '{{"commitment": "0xc0ffee"}}' | kuzk-lane result -"""))
    apply_job(cluster, namespace,
              proofjob("outage", partitions=1, backoffLimitPerPartition=0))
    lane = wait_for(lambda: _lane(cluster, node, "synthesizing"), 120, "the lane synthesizing")
    log = kubelet.runners[lane["pod"]["uid"]].containers[0].log
    with cluster.plane.apiserver_down():
        (steps / "acquire").touch()
        wait_for(lambda: "acquire on" in log.read_text(errors="replace"), 30,
                 "the agent's acquire meeting the outage")
        assert not (steps / "acquired").exists()
    wait_for((steps / "acquired").exists, 60, "the acquire granted once the API is back")
    job = wait_job(cluster, namespace, "outage", "Succeeded", timeout=120)
    assert (job["status"]["retries"], job["status"]["partitions"][0]["commitment"]) == (
        0, "0xc0ffee")
    assert "went through after" in log.read_text(errors="replace")


HANDOVER_S = 90.0


def test_a_prover_stopped_while_holding_loses_the_gpu_phase_within_90_s(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any,
        tmp_path: Path) -> None:
    """The agent answers the pod's probes from its pulse, which stands still while its prover
    is stopped (SIGSTOP of the prover alone, the agent running): the pod's liveness probe has
    it killed, and the retried partition's lane holds the GPU phase within 90 s."""
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    steps = tmp_path / "steps"
    steps.mkdir()
    run_operator(*_gated(steps, HOLD))
    apply_job(cluster, namespace, proofjob("stopped", partitions=1))
    first = wait_for(lambda: (steps / "at-hold").exists() and _lane(cluster, node, "gpu"),
                     120, "the prover holding the GPU phase")
    (prover,) = _children(_agent_pid(kubelet, first["pod"]["uid"]))
    os.kill(prover, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        second = wait_for(lambda: (lane := _lane(cluster, node, "gpu", attempt=2))
                          and lane["holder"]["pod"]["uid"] == lane["pod"]["uid"] and lane,
                          HANDOVER_S, "the retried partition holding the GPU phase")
        handed = time.monotonic() - stopped
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(prover, signal.SIGKILL)
    assert second["pod"]["uid"] != first["pod"]["uid"]
    (killed,) = [p for p in cluster.core.list_namespaced_pod(namespace).items
                 if p.metadata.uid == first["pod"]["uid"]]
    assert killed.status.phase == "Failed", killed.status
    events = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={killed.metadata.name},reason=Killing")
    assert [e.message for e in events.items] == [
        "Container prover failed liveness probe, will be restarted"], handed
    (steps / "hold").touch()
    job = wait_job(cluster, namespace, "stopped", "Succeeded", timeout=120)
    assert job["status"]["partitions"][0]["attempt"] == 2


def _lane_state(cluster: Cluster, node: str) -> dict[str, Any]:
    """The WorkerStatus as a bad call could change it: all but what any write rewrites (the
    lane's memory, the GPU's time accounted up to it)."""
    status = _only_ws(cluster, node).get("status") or {}
    beat = {"hostMemoryBytes", "deviceMemoryBytes"}
    workers = [{**{k: v for k, v in w.items() if k != "gpuTime"},
                "lanes": [{k: v for k, v in lane.items() if k not in beat}
                          for lane in w.get("lanes") or []]}
               for w in status.get("workers") or []]
    return {"workers": workers, "stale": status.get("staleWritesRejected", 0)}


def test_every_bad_call_gets_its_line_and_leaves_the_workerstatus_as_it_was(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any,
        tmp_path: Path) -> None:
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    steps = tmp_path / "steps"
    steps.mkdir()
    errors = tmp_path / "errors"

    def bad(call: str) -> str:
        return f'{call} 2>> "{errors}" && echo "accepted: {call}" >> "{errors}" || true'

    run_operator(*_gated(steps, f"""set -e
kuzk-lane stage synthesizing
gate bad-idle
{bad("kuzk-lane release-gpu")}
{bad("kuzk-lane stage proving")}
echo '{{"synth_ms": 3}}' > "{tmp_path}/bad.json"
{bad(f'kuzk-lane result "{tmp_path}/bad.json"')}
{bad("KUZK_LANE_SOCKET=@kuzk-lane-nobody kuzk-lane stage synth_done")}
gate acquire
kuzk-lane acquire
gate bad-holding
{bad("kuzk-lane acquire")}
{bad("kuzk-lane stage synth_done")}
gate finish
kuzk-lane release-gpu
echo '{{"commitment": "0x0b"}}' | kuzk-lane result -"""))
    apply_job(cluster, namespace, proofjob("misuse", partitions=1, backoffLimitPerPartition=0))

    def at(gate: str) -> dict[str, Any]:
        wait_for((steps / f"at-{gate}").exists, 120, f"the prover at {gate}")
        return _lane_state(cluster, node)

    idle = at("bad-idle")
    assert [lane["stage"] for lane in idle["workers"][0]["lanes"]] == ["synthesizing"]
    # The lane's memory is the prover's (a shell's few MiB), not its Python agent's.
    (lane,) = _worker(cluster, node)["lanes"]
    assert 0 < lane["hostMemoryBytes"] < 16 * 2**20 and lane["deviceMemoryBytes"] == 0, lane
    (steps / "bad-idle").touch()
    assert at("acquire") == idle
    (steps / "acquire").touch()
    holding = at("bad-holding")
    assert holding["workers"][0]["holder"]["pod"] == holding["workers"][0]["lanes"][0]["pod"]
    (steps / "bad-holding").touch()
    assert at("finish") == holding
    (steps / "finish").touch()
    wait_job(cluster, namespace, "misuse", "Succeeded", timeout=60)
    assert errors.read_text().splitlines() == [
        "kuzk-lane: release-gpu: this lane does not hold the GPU phase",
        "kuzk-lane: unknown stage 'proving'; expected one of synthesizing, synth_done,"
        " committing",
        "kuzk-lane: result: termination message has no hex commitment: '{\"synth_ms\": 3}'",
        "kuzk-lane: stage: no lane agent at @kuzk-lane-nobody (Connection refused)",
        "kuzk-lane: acquire: this lane already holds the GPU phase",
        "kuzk-lane: stage synth_done: this lane holds the GPU phase; release-gpu first",
    ]
    assert get_job(cluster, namespace, "misuse") is not None


def test_a_prover_that_makes_no_calls_holds_its_gpu_for_its_whole_run(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Any,
        tmp_path: Path) -> None:
    kubelet = nodes(1, gpus=1)
    node = next(iter(kubelet.nodes))
    steps = tmp_path / "steps"
    steps.mkdir()
    run_operator(*_gated(steps, """gate finish
echo '{"commitment": "0x0c"}' | kuzk-lane result -""", calls=False))
    apply_job(cluster, namespace, proofjob("silent", partitions=1))
    wait_for((steps / "at-finish").exists, 120, "the prover running")
    lane = _lane(cluster, node)
    assert lane is not None and lane["stage"] == "gpu"
    assert lane["holder"]["pod"] == lane["pod"]
    (steps / "finish").touch()
    job = wait_job(cluster, namespace, "silent", "Succeeded", timeout=60)
    assert job["status"]["partitions"][0]["commitment"] == "0x0c"
    assert _worker(cluster, node)["completed"] == 1
