"""bench/status_load.py, small (20 jobs x 4 partitions, 4 nodes x 2 GPUs, 10 clients, 1 s
rounds, pages of 3 jobs): it runs end to end and reports every figure. Timings are not checked
here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_status_load_small_runs_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "status_load.py"), "--jobs", "20",
         "--partitions", "4", "--nodes", "4", "--gpus", "2", "--clients", "10",
         "--seconds", "1", "--burst", "20", "--page", "3", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    assert "throughput ratio" in proc.stdout
    r = json.loads(out.read_text())
    rounds = ("paced", "paced_etag", "paced_page", "paced_summary", "paced_filtered",
              "saturating", "saturating_etag", "saturating_page", "naive_saturating")
    for name in rounds:
        assert r[name]["requests"] > 0, name
        assert set(r[name]["codes"]) <= {"200", "304"}, (name, r[name]["codes"])
    # A page, the summary and the second namespace's two jobs are each less than the whole.
    for name in ("paced_page", "paced_summary", "paced_filtered"):
        assert r[name]["mean_kb"] < r["paced"]["mean_kb"], name
    assert r["saturating_etag"]["codes"]["304"] > r["saturating_etag"]["codes"]["200"]
    assert "304" not in r["saturating"]["codes"]
    assert r["ratio_etag"] > 0 and r["ratio_200"] > 0 and r["ratio_page"] > 0
    assert 0 < r["rss_mb"] <= r["peak_rss_after_burst_mb"]
    assert r["lag_s"] >= 0
