"""bench/fleet_scale.py, small (4 nodes x 2 GPUs x 2 lanes, 4 jobs per system): it runs end to
end and reports what it measures, each write told by its writer. Timings are not checked
here; the counts that must hold are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# 4 jobs, one of each kind in turn: winning-post, snap-update, window-post, porep-c2.
PARTITIONS = 1 + 16 + 1 + 10


def test_fleet_scale_small_runs_and_reports(tmp_path: Path) -> None:
    """Jobs first: the operator is then started again for the ProofJobs, the path with more
    to go wrong (the default order stops it once)."""
    out = tmp_path / "fleet.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fleet_scale.py"), "--nodes", "4", "--gpus", "2",
         "--lanes", "2", "--jobs", "4", "--work", "0.2", "0.4", "--timeout", "240", "--json",
         str(out), "--log-dir", str(tmp_path / "logs"), "--job-first",
         "--pprof", str(tmp_path / "pprof")],
        cwd=ROOT, capture_output=True, text=True, timeout=560,
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert "stand-in prover: NOT a real proof" in proc.stdout
    assert "completion-time ratio kuzk/job" in proc.stdout
    assert "operator writes per attempt" in proc.stdout
    # kube-apiserver's CPU profile of each phase, in Go's pprof format (gzipped protobuf)
    for system in ("job", "kuzk"):
        samples = sorted((tmp_path / "pprof").glob(f"{system}-0-*.pb.gz"))
        assert samples and all(s.read_bytes()[:2] == b"\x1f\x8b" for s in samples), system
    result = json.loads(out.read_text())
    assert result["order"] == ["job", "kuzk"]
    kuzk, job, operator = result["kuzk"], result["job"], result["operator"]
    for system in (kuzk, job):
        assert system["partitions"] == PARTITIONS
        assert system["failed_jobs"] == []
        # every partition's success was seen on its pod and then in its job's status
        assert system["lag_samples"] == PARTITIONS
        assert system["partitions_per_s"] > 0
    # the audit log saw the operator create every pod that ran (a repeated create is a 409)
    assert operator["by_call"].get("create pods", 0) >= kuzk["attempts"] >= PARTITIONS
    assert operator["user"].endswith(":bench-kuzk-operator")
    assert operator["cpu_s"] > 0 and operator["peak_rss_mb"] > 0
    assert operator["syncs"] > 0  # counted inside the operator (bench/counted_operator.py)
    # the stand-in went through the lane protocol for each ProofJob pod; a Job's pod only works
    counts = result["standin"]["counts"]
    assert counts["pods"] >= PARTITIONS
    assert counts["claim"] == counts["pods"] == counts["release"]
    assert counts["acquire"] == counts["pods"] - counts.get("killed", 0)  # killed before it
    # kuzk's prover joins its lane synthesizing: no stage write of its own follows the join
    assert counts.get("stage", 0) == 0
    job_counts = result["standin_job"]["counts"]
    assert job_counts["bare"] >= PARTITIONS and "claim" not in job_counts
    # per attempt, each write told by its writer: the provers' WorkerStatus writes, the
    # operator's and the job controller's pod creates (one per attempt), the kubelets' pod
    # status, the scheduler's bindings
    per_kuzk, per_job = result["per_attempt"]["kuzk"], result["per_attempt"]["job"]
    assert per_kuzk["writes|provers|update workerstatuses/status"] > 0
    assert per_kuzk["writes|operator|create pods"] >= 1
    assert per_job["writes|kcm/job-controller|create pods"] >= 1
    assert not any(k.startswith(("writes|operator|", "writes|provers|")) for k in per_job)
    for per in (per_kuzk, per_job):
        assert per["writes|scheduler|create pods/binding"] >= 1
        assert per["writes|kubelet|patch pods/status"] > 0
        assert per["cpu_ms|kube-apiserver"] > 0 and per["etcd_wal_bytes"] > 0
        assert per["apiserver_events|pods"] > 0
    # the operator's watch events, counted on its Kopf streams
    assert per_kuzk["events|pods"] > 0 and per_kuzk["events|workerstatuses"] > 0
    assert per_kuzk["cpu_ms|operator"] > 0 and "cpu_ms|operator" not in per_job
    # every WorkerStatus write that succeeded is told by what it moved, seen on a watch: each
    # lane's join (in stage synthesizing), acquire, release of the GPU phase and leave; none
    # moved no lane
    kinds = {k.split("|", 1)[1]: v for k, v in per_kuzk.items() if k.startswith("ws_kind|")}
    for move in ("join", "acquire", "release_gpu", "leave"):
        assert kinds.get(f"provers|{move}", 0) > 0, kinds
    assert per_kuzk["not_moves"] == 0, kinds
    ws_writes = sum(v for k, v in per_kuzk.items()
                    if k.startswith("writes|") and " workerstatuses" in k)
    ws_409 = sum(v for k, v in per_kuzk.items()
                 if k.startswith("409|") and " workerstatuses" in k)
    assert sum(kinds.values()) == pytest.approx(ws_writes - ws_409)
    assert not any(k.startswith("ws_kind|") for k in per_job) and per_job["not_moves"] == 0
    assert "writes that moved no lane (heartbeats)" in proc.stdout
    projection = result["projection"]["kuzk"]
    assert projection["attempts_per_s"] > 300 and projection["own_writes_per_s"] > 0
    assert "projection to 10,000 GPUs x 2 lanes" in proc.stdout
