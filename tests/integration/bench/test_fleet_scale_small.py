"""bench/fleet_scale.py, small (4 nodes x 2 GPUs, 6 jobs per system): it runs end to end and
reports what it measures. Timings are not checked here; the counts that must hold are."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# 6 jobs, the kinds in turn: winning-post, snap-update, window-post, porep-c2, winning-post,
# snap-update.
PARTITIONS = 1 + 16 + 1 + 10 + 1 + 16


def test_fleet_scale_small_runs_and_reports(tmp_path: Path) -> None:
    """Jobs first: the operator is then started again for the ProofJobs, the path with more
    to go wrong (the default order stops it once)."""
    out = tmp_path / "fleet.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "fleet_scale.py"), "--nodes", "4", "--gpus", "2",
         "--jobs", "6", "--work", "0.2", "0.4", "--timeout", "240", "--json", str(out),
         "--log-dir", str(tmp_path / "logs"), "--job-first"],
        cwd=ROOT, capture_output=True, text=True, timeout=560,
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert "stand-in prover: NOT a real proof" in proc.stdout
    assert "completion-time ratio kuzk/job" in proc.stdout
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
    # the stand-in went through the WorkerStatus protocol for each pod of each system
    for standin in (result["standin"], result["standin_job"]):
        counts = standin["counts"]
        assert counts["pods"] >= PARTITIONS
        assert counts["claim"] == counts["pods"] == counts["release"]
        assert counts["stage"] > 0
