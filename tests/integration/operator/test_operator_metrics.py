"""The operator's own /metrics, scraped by a real Prometheus while it runs a job: its syncs
timed, its API requests counted by method and code, not paused, and its version."""

from __future__ import annotations

from pathlib import Path

from kuzk.contract import api
from testenv import prometheus
from testenv.controlplane import free_port
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, proofjob, wait_job


def test_prometheus_scrapes_the_operators_own_metrics(prover_account, namespace: str, nodes,
                                                       run_operator, tmp_path: Path) -> None:
    nodes(1, gpus=2)
    port = free_port()
    run_operator("--metrics-port", str(port))
    cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
           "scrape_configs": [{"job_name": "kuzk-operator",
                               "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}
    with prometheus.Prometheus(tmp_path / "prometheus", cfg) as prom:
        apply_job(prover_account, namespace, proofjob("measured", partitions=2, circuitLog2=10))
        wait_job(prover_account, namespace, "measured", "Succeeded")
        wait_for(lambda: (prom.value('sum(kuzk_operator_work_duration_seconds_count'
                                       '{kind="job"})') or 0) >= 2, 60,
                 "Prometheus reading the job's syncs")
        created = prom.value('sum(kuzk_operator_api_requests_total'
                               '{method="POST",code="201"})')
        assert created is not None and created >= 2  # the two pods, at least
        assert prom.value("max(kuzk_operator_paused)") == 0
        assert prom.value("max(kuzk_operator_queued_keys)") is not None
        (build,) = prom.query("kuzk_build_info")
        assert build["metric"]["version"] == api.version()
