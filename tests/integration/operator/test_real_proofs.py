"""Real Filecoin proofs through kuzk, as a storage provider makes them: sealed 2 KiB sectors in a
volume, a ProofJob with ``spec.filecoin`` applied with kubectl, one pod per chain partition
running ``kuzk-fil-prover`` under the lane agent, and the proof read back with kubectl and
``kuzk proof`` verified by filecoin-proofs' own verifier (one changed byte: refused). While it
runs, the WorkerStatuses never lie (one holder per GPU, only the holder in stage ``gpu``).
Bad inputs fail their partition at once with the prover's one-line reason."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kuzk.contract import api
from testenv import filecoin
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, get_job, wait_job
from tests.integration.operator.test_worker_truth import (
    Sample,
    _lies,
    _read_workers,
    _sample,
    _watch_versions,
    _written,
)
from tests.integration.status.server import StatusServer, running

# It runs on the e2e tier's worker (tests/conftest.py), which has the time.
pytestmark = pytest.mark.worker("e2e")

MINER = 1000
# Set to 1 to run the PoRep C2 and SnapDeals proofs too (minutes each).
SLOW_PROOFS = "KUZK_SLOW_PROOFS"
RANDOMNESS = "0x" + "5a" * 32
PROOF_BYTES = 192  # one Groth16 proof


@pytest.fixture(scope="module")
def tools() -> filecoin.Tools:
    return filecoin.build()


@pytest.fixture(scope="module")
def sealed(tools: filecoin.Tools, tmp_path_factory: pytest.TempPathFactory) -> tuple[
        Path, list[dict[str, Any]]]:
    """Eight sealed 2 KiB sectors, numbered 1 to 8, and their entries for a ProofJob."""
    directory = tmp_path_factory.mktemp("sealed")
    directory.chmod(0o755)
    return directory, filecoin.seal(tools, directory, miner=MINER, first=1, count=8)


@pytest.fixture
def claim(cluster: Cluster, namespace: str,
          sealed: tuple[Path, list[dict[str, Any]]]) -> Iterator[str]:
    volume = filecoin.create_volume(cluster.core, namespace, "sealed", sealed[0])
    yield "sealed"
    filecoin.delete_volume(cluster.core, volume)


@pytest.fixture
def real_operator(run_operator: Callable[..., Any], tools: filecoin.Tools) -> None:
    run_operator("--filecoin-prover-command", json.dumps(tools.command()),
                 "--filecoin-parameters-host-path", str(tools.params))


def real_job(name: str, kind: str, sectors: list[dict[str, Any]], claim: str,
             size: str = "2KiB", randomness: str | None = RANDOMNESS,
             deadline: int = 300) -> dict[str, Any]:
    """A real ProofJob; ``randomness`` None leaves it out (a porep-c2's or snap-update's)."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.PROOFJOB_KIND,
        "metadata": {"name": name},
        "spec": {
            "proofKind": kind,
            "sector": {"miner": MINER, "number": sectors[0]["number"]},
            **({} if randomness is None else {"randomness": randomness}),
            "backoffLimitPerPartition": 0,
            # A WinningPoSt's default deadline (25 s) is the chain's; a test machine busy
            # with other work may take longer, which is not what these tests check.
            "activeDeadlineSeconds": deadline,
            "filecoin": {"sectorSize": size, "volume": {"claimName": claim},
                         "sectors": sectors},
        },
    }


def verify(tools: filecoin.Tools, job: Path, proof: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tools.prover), "verify", "--job", str(job), "--proof", str(proof)],
        env={"PATH": "/usr/bin:/bin", **tools.env()}, capture_output=True, text=True,
        timeout=120, check=False)


def prove_and_check(cluster: Cluster, namespace: str, kubelet: Any, tools: filecoin.Tools,
                    job: dict[str, Any], partitions: int, tmp_path: Path,
                    overlap: bool = False, timeout: float = 400) -> None:
    """Apply ``job``, sample its GPUs' WorkerStatuses and the status server until it succeeds,
    read its proof back with kubectl and ``kuzk proof``, and verify it (and a changed copy)
    with the library. With ``overlap``, some partition's synthesis must have run beside
    another's GPU part."""
    name = job["metadata"]["name"]
    samples: list[Sample] = []
    held: list[Held] = []
    versions: list[dict[str, Any]] = []
    shown: list[dict[str, Any]] = []
    stop = threading.Event()
    with running(cluster, tmp_path / "status-server.log", "--namespace", namespace) as server:
        threads = [
            threading.Thread(target=_sample, args=(cluster, kubelet, namespace, stop, samples)),
            threading.Thread(target=_sample_holders, args=(cluster, stop, held)),
            threading.Thread(target=_watch_versions, args=(cluster, stop, versions)),
            threading.Thread(target=_poll_status, args=(server, stop, shown)),
        ]
        for thread in threads:
            thread.start()
        try:
            apply_job(cluster, namespace, job)
            done = wait_job(cluster, namespace, name, "Succeeded", timeout=timeout)
            pods = {p.metadata.uid for p in cluster.core.list_namespaced_pod(namespace).items}
            wait_for(lambda: _written(versions)[0] >= pods, 30,
                     "every partition's hold of the GPU phase, as written")
            final = wait_for(lambda: _finished(server.status(), name, partitions), 30,
                             "/status showing every partition done")
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    assert done["status"]["partitionCount"] == partitions == len(pods)
    assert done["status"]["succeeded"] == partitions
    # The GPU phase is held only between a prover's synthesis and the end of its GPU part, by
    # its own account (its log) against what its lane wrote (the samples).
    phases = {uid: _phases(_container_log(kubelet, uid)) for uid in pods}
    assert all(p.entered for p in phases.values()), phases
    assert _held_outside_the_gpu_part(held, phases) == []
    assert len(held) >= 10
    assert _synthesis_beside_gpu_work(phases) or not overlap, phases
    # Only the holder is ever in stage gpu, and no working prover's lane is lost; /status
    # never shows more of the job's partitions in gpu than GPUs held.
    assert _lies(samples) == []
    assert all(in_gpu <= held for in_gpu, held in (_gpu_counts(doc, name) for doc in shown))
    assert [q["state"] for q in final["partitions"]] == ["done"] * partitions

    shown = cluster.kubectl("get", "pj", name, "-n", namespace,
                            "-o", "jsonpath={.status.proof.bytes}").stdout
    assert len(bytes.fromhex(shown.removeprefix("0x"))) == partitions * PROOF_BYTES
    job_file = tmp_path / f"{name}.json"
    job_file.write_text(cluster.kubectl("get", "pj", name, "-n", namespace, "-o", "json").stdout)
    proof = tmp_path / f"{name}.proof"
    wrote = subprocess.run(
        [sys.executable, "-m", "kuzk.cli", "proof", name, "-n", namespace, "-o", str(proof)],
        env=cluster.env(), capture_output=True, text=True, timeout=60, check=False)
    assert wrote.returncode == 0, wrote.stderr
    assert proof.read_bytes().hex() == shown.removeprefix("0x")

    good = verify(tools, job_file, proof)
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("verified")
    changed = bytearray(proof.read_bytes())
    changed[len(changed) // 2] ^= 0x01
    bad_proof = tmp_path / f"{name}.changed"
    bad_proof.write_bytes(bytes(changed))
    bad = verify(tools, job_file, bad_proof)
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    assert "does not verify" in bad.stderr


def _container_log(kubelet: Any, uid: str) -> str:
    """What pod ``uid``'s container wrote, from the process kubelet's pod directory (kept
    after the pod ends)."""
    (log,) = (kubelet.workdir / "pods").glob(f"*_{uid[:8]}/*.log")
    text: str = log.read_text()
    return text


@dataclass
class Phases:
    """A prover's account of its proof (``gpu phase:`` lines, Unix seconds): when synthesis
    started, and each batch's synthesized, entered and left times."""

    synthesis_from: float | None
    synthesized: list[float]
    entered: list[float]
    left: list[float]


def _phases(log: str) -> Phases:
    phases = Phases(None, [], [], [])
    for step, at in re.findall(r"gpu phase: ([a-z ]+?) (?:from|at) (\d+\.\d+)", log):
        if step == "synthesis":
            phases.synthesis_from = float(at)
        else:
            getattr(phases, {"circuits synthesized": "synthesized", "enter": "entered",
                             "leave": "left"}[step]).append(float(at))
    return phases


@dataclass(frozen=True)
class Held:
    """One read of every GPU's holder: when the read started and ended (Unix seconds), and
    the pod UIDs it showed holding the GPU phase."""

    start: float
    end: float
    holders: frozenset[str]


def _sample_holders(cluster: Cluster, stop: threading.Event, held: list[Held]) -> None:
    custom = client.CustomObjectsApi(cluster.api)
    while not stop.wait(0.1):
        start = time.time()
        _, holders, _ = _read_workers(custom)
        held.append(Held(start, time.time(), frozenset(h for h in holders.values() if h)))


def _held_outside_the_gpu_part(held: list[Held], phases: dict[str, Phases]) -> list[str]:
    """Reads that showed a pod holding the GPU phase outside every span from its circuits'
    synthesis to its GPU part's end. A prover asks for the phase only after logging the first
    and logs the second only once its release was written, so a read that ended before the
    first, or started after the second, cannot show it holding."""
    lies = []
    for read in held:
        for uid in read.holders:
            p = phases[uid]
            spans = zip(p.synthesized, [*p.left, *[math.inf] * len(p.synthesized)], strict=False)
            if not any(synthesized < read.end and read.start < left
                       for synthesized, left in spans):
                lies.append(f"{uid} held at {read.start:.3f}-{read.end:.3f}: {p}")
    return lies


def _synthesis_beside_gpu_work(phases: dict[str, Phases]) -> bool:
    """Whether some prover synthesized while another was in its GPU part."""
    return any(
        a.synthesis_from is not None and a.synthesized
        and any(a.synthesis_from < left and entered < a.synthesized[0]
                for entered, left in zip(b.entered, b.left, strict=False))
        for a in phases.values() for b in phases.values() if a is not b)


def _poll_status(server: StatusServer, stop: threading.Event,
                 shown: list[dict[str, Any]]) -> None:
    while not stop.wait(0.2):
        shown.append(server.status())


def _pipeline(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((p for p in doc["pipelines"] if p["name"] == name), None)


def _finished(doc: dict[str, Any], name: str, partitions: int) -> dict[str, Any] | None:
    p = _pipeline(doc, name)
    done = p is not None and p["partitions_done"] == p["total_partitions"] == partitions
    return p if done else None


def _gpu_counts(doc: dict[str, Any], name: str) -> tuple[int, int]:
    """(the job's partitions /status shows in gpu, the GPUs it shows held)."""
    p = _pipeline(doc, name)
    in_gpu = sum(q["state"] == "gpu" for q in (p or {}).get("partitions") or [])
    return in_gpu, sum(w["state"] == "gpu" for w in doc["gpu_workers"])


def test_a_real_window_post_over_eight_sectors_proves_in_four_partitions(
        cluster: Cluster, namespace: str, nodes: Any, real_operator: None, tools: filecoin.Tools,
        sealed: tuple[Path, list[dict[str, Any]]], claim: str, tmp_path: Path) -> None:
    # Two lanes on one GPU: a partition synthesizes while the other lane's is in its GPU part.
    kubelet = nodes(1, gpus=1, replicas=2)
    prove_and_check(cluster, namespace, kubelet, tools,
                    real_job("wpost", "window-post", sealed[1], claim), 4, tmp_path,
                    overlap=True)


def test_a_real_winning_post_proves_and_verifies(
        cluster: Cluster, namespace: str, nodes: Any, real_operator: None, tools: filecoin.Tools,
        sealed: tuple[Path, list[dict[str, Any]]], claim: str, tmp_path: Path) -> None:
    kubelet = nodes(1, gpus=1)
    prove_and_check(cluster, namespace, kubelet, tools,
                    real_job("winpost", "winning-post", sealed[1], claim), 1, tmp_path)


@pytest.mark.skipif(
    os.environ.get(SLOW_PROOFS) != "1",
    reason=f"PoRep C2 and SnapDeals at 2 KiB take minutes each, and their parameters 10 to 20"
           f" more on first use: {SLOW_PROOFS}=1 runs them")
@pytest.mark.parametrize("kind", ["porep-c2", "snap-update"])
@pytest.mark.timeout(3600)
def test_a_real_porep_c2_and_snap_update_prove_and_verify(
        cluster: Cluster, namespace: str, nodes: Any, run_operator: Callable[..., Any],
        sealed: tuple[Path, list[dict[str, Any]]], claim: str, tmp_path: Path,
        kind: str) -> None:
    tools = filecoin.build(kinds=[kind])
    run_operator("--filecoin-prover-command", json.dumps(tools.command()),
                 "--filecoin-parameters-host-path", str(tools.params))
    kubelet = nodes(1, gpus=1)
    if kind == "porep-c2":
        sectors = filecoin.seal(tools, sealed[0], miner=MINER, first=1, count=1, kind=kind)
    else:
        sectors = filecoin.update(tools, sealed[0], miner=MINER, first=1, count=1)
    # A C2 takes about a minute on two idle cores, many more beside other work.
    prove_and_check(cluster, namespace, kubelet, tools,
                    real_job(kind, kind, sectors, claim, randomness=None, deadline=1800), 1,
                    tmp_path, timeout=1800)


def _failed_message(cluster: Cluster, namespace: str, name: str) -> str:
    job = wait_job(cluster, namespace, name, "Failed", timeout=180)
    (part,) = job["status"]["partitions"]
    assert (part["state"], part["reason"], part["attempt"]) == ("failed", "InvalidInput", 1)
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert part["message"] in failed["message"]
    message: str = part["message"]
    return message


def test_bad_real_inputs_fail_at_once_with_the_provers_reason(
        cluster: Cluster, namespace: str, nodes: Any, real_operator: None, tools: filecoin.Tools,
        sealed: tuple[Path, list[dict[str, Any]]], claim: str) -> None:
    nodes(1, gpus=2, replicas=2)
    first, second = sealed[1][:2]
    cases = {
        "no-replica": ([{**first, "replica": "s-t01000-1/missing"}], "2KiB",
                       "sectors[0].replica"),
        "wrong-commr": ([{**first, "commR": second["commR"]}], "2KiB",
                        "sectors[0].commR"),
        "wrong-size": ([first], "8MiB", "size"),
    }
    for name, (sectors, size, _) in cases.items():
        apply_job(cluster, namespace, real_job(name, "winning-post", sectors, claim, size))
    # A C2 whose c1Output is not a C1 output fails as bad input before any parameter is read.
    (c2,) = filecoin.seal(tools, sealed[0], miner=MINER, first=1, count=1, kind="porep-c2")
    apply_job(cluster, namespace, real_job("not-c1", "porep-c2",
                                           [{**c2, "c1Output": "s-t01000-1/seal.json"}], claim,
                                           randomness=None))
    cases["not-c1"] = ([], "2KiB", "sectors[0].c1Output")
    for name, (_, _, field) in cases.items():
        message = _failed_message(cluster, namespace, name)
        assert field in message, (name, message)
        assert "\n" not in message
        assert message.startswith("invalid input: kuzk-fil-prover: "), message
    # A failed job has no proof to read, and kuzk proof says so in one line.
    nothing = subprocess.run(
        [sys.executable, "-m", "kuzk.cli", "proof", "no-replica", "-n", namespace, "-o",
         "/dev/null"], env=cluster.env(), capture_output=True, text=True, timeout=60,
        check=False)
    assert (nothing.returncode, nothing.stderr) == (1, (
        f"error: ProofJob {namespace}/no-replica: Failed with 0 of 1 partitions done: a failed"
        " job has no proof\n"))

    refusals = {
        "randomness": real_job("bad", "window-post", [first], claim, randomness="0x1234"),
        "commR": real_job("bad", "window-post", [{**first, "commR": "0x12"}], claim),
        "replica": real_job("bad", "window-post", [{**first, "replica": "../../etc"}], claim),
        "partitions": {**(job := real_job("bad", "window-post", [first], claim)),
                       "spec": {**job["spec"], "partitions": 3}},
        "a porep-c2 sector has number, commR, commD, ticket, seed, c1Output and nothing else":
            real_job("bad", "porep-c2", [first], claim, randomness=None),
        "a real porep-c2 or snap-update proves one sector with its own randomness":
            real_job("bad", "snap-update", [first], claim),
    }
    for field, manifest in refusals.items():
        refused = cluster.kubectl("apply", "-n", namespace, "-f", "-", check=False,
                                  input=json.dumps(manifest))
        assert refused.returncode != 0, field
        assert field in refused.stderr, (field, refused.stderr)
    assert get_job(cluster, namespace, "bad") is None


def test_a_real_job_whose_volume_is_missing_waits_pending_saying_so(
        cluster: Cluster, namespace: str, nodes: Any, real_operator: None,
        sealed: tuple[Path, list[dict[str, Any]]]) -> None:
    nodes(1, gpus=1)
    apply_job(cluster, namespace, real_job("no-volume", "winning-post", sealed[1][:1],
                                           "not-there"))

    def scheduling_event() -> str | None:
        events = cluster.core.list_namespaced_event(namespace).items
        return next((e.message for e in events if e.reason == "FailedScheduling"
                     and "not-there" in (e.message or "")), None)

    message = wait_for(scheduling_event, 60, "a FailedScheduling event naming the claim")
    assert "persistentvolumeclaim" in message.lower()
    job = get_job(cluster, namespace, "no-volume")
    assert job is not None
    # Nothing has happened to it but its pod's asking: its first status waits for news (a job
    # without one is pending), or says so.
    partitions = (job.get("status") or {}).get("partitions")
    assert partitions is None or [p["state"] for p in partitions] == ["pending"], partitions


def test_memory_bounds_how_many_real_partitions_a_node_runs(
        cluster: Cluster, namespace: str, nodes: Any, real_operator: None,
        sealed: tuple[Path, list[dict[str, Any]]], claim: str, tmp_path: Path) -> None:
    # Three WindowPoSt partitions (64Mi each at 2 KiB) on a node with a lane for each but
    # memory for two: the third waits for memory, not for a lane, and runs once one is done.
    nodes(1, gpus=1, replicas=3, memory="160Mi")
    shown: list[dict[str, Any]] = []
    stop = threading.Event()
    with running(cluster, tmp_path / "status-server.log", "--namespace", namespace) as server:
        poller = threading.Thread(target=_poll_status, args=(server, stop, shown))
        poller.start()
        try:
            apply_job(cluster, namespace, real_job("bounded", "window-post", sealed[1][:6],
                                                   claim))
            done = wait_job(cluster, namespace, "bounded", "Succeeded", timeout=300)
        finally:
            stop.set()
            poller.join()
    assert done["status"]["succeeded"] == 3
    events = cluster.core.list_namespaced_event(namespace).items
    assert any(e.reason == "FailedScheduling" and "Insufficient memory" in (e.message or "")
               for e in events), [(e.reason, e.message) for e in events]
    pods = cluster.core.list_namespaced_pod(namespace).items
    assert {p.spec.containers[0].resources.requests["memory"] for p in pods} == {"64Mi"}
    assert not [p.metadata.name for p in pods
                if (p.status.container_statuses or [None])[0] is not None
                and p.status.container_statuses[0].state.terminated is not None
                and p.status.container_statuses[0].state.terminated.reason == "OOMKilled"]
    # /status says why a partition waits: the scheduler's reason, naming memory.
    pending = [q for doc in shown if (p := _pipeline(doc, "bounded"))
               for q in p["partitions"] if q["state"] == "pending" and q.get("message")]
    assert any("Insufficient memory" in q["message"] for q in pending), pending
