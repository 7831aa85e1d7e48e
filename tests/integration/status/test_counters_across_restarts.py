"""Counters across a status-server restart, read by a real Prometheus: what the restarted
server's first lists show finished is its baseline, not an increase, so ``increase()`` over a
window in which nothing finished is zero, even with a finished job and a node's WorkerStatus
(with its stale writes) deleted before the restart (the old rule counted the jobs still
listed and went 2 -> 1, which Prometheus read as a reset followed by one new partition); what
finishes after the restart counts."""

from __future__ import annotations

import time
from pathlib import Path

from kubernetes import client

from kuzk import api
from tests.integration.status.server import start
from tests.integration.status.test_status_restarts import create
from tests.integration.workers.conftest import create_worker_status, delete_worker_status
from tests.testenv import prometheus
from tests.testenv.cluster import Cluster
from tests.testenv.controlplane import free_port
from tests.testenv.waiting import wait_for

COMPLETED = 'sum(kuzk_partitions_completed_total{proof_kind="snap-update"})'
STALE = "sum(kuzk_stale_worker_writes_rejected_total)"


def _value(prom: prometheus.Prometheus, expr: str) -> float | None:
    result = prom.query(expr)
    return float(result[0]["value"][1]) if result else None


def _scraped_since(prom: prometheus.Prometheus, moment: float, scrapes: int) -> bool:
    """Whether Prometheus has ``scrapes`` successful scrapes of the server after ``moment``."""
    window = max(int(time.time() - moment), 1)
    got = _value(prom, f"count_over_time(kuzk_status_view_synced[{window}s])")
    return got is not None and got >= scrapes


def test_increase_over_a_restart_is_what_finished(kuzk_installed: Cluster, namespace: str,
                                                  tmp_path: Path) -> None:
    cluster = kuzk_installed
    custom = client.CustomObjectsApi(cluster.api)
    port = free_port()
    cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                      "evaluation_interval": "1s"},
           "scrape_configs": [{"job_name": "kuzk",
                               "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}
    args = ("--namespace", namespace)
    server = start(cluster, tmp_path / "status-0.log", *args, port=port)
    with prometheus.Prometheus(tmp_path / "prometheus", cfg) as prom:
        try:
            create(custom, namespace, "a", ["done"])
            create(custom, namespace, "b", ["done"])
            # A node's WorkerStatus that counted stale writes while the server ran.
            node = f"gone-{namespace}"[:63]
            create_worker_status(cluster.api, node)
            wait_for(lambda: _value(prom, "max(kuzk_status_view_synced)") == 1, 60,
                     "a synced scrape")
            custom.patch_cluster_custom_object_status(
                api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, node,
                {"status": {"workers": [], "staleWritesRejected": 3}})
            wait_for(lambda: _value(prom, COMPLETED) == 2, 60, "Prometheus reading 2")
            wait_for(lambda: (_value(prom, STALE) or 0) >= 3, 60, "Prometheus reading 3 stale")
            quiet_from = time.time()
            custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                                   api.PROOFJOB_PLURAL, "a")
            delete_worker_status(cluster.api, node)  # the node is gone
            server.stop()
            server = start(cluster, tmp_path / "status-1.log", *args, port=port)
            restarted = time.time()
            wait_for(lambda: _scraped_since(prom, restarted, 3), 60,
                     "three scrapes of the restarted server")
            window = int(time.time() - quiet_from) + 1
            assert _value(prom, f"sum(increase(kuzk_partitions_completed_total[{window}s]))") == 0
            assert _value(prom, f"sum(increase(kuzk_partitions_failed_total[{window}s]))") == 0
            assert _value(prom, f"sum(resets(kuzk_partitions_completed_total[{window}s]))") == 1
            assert _value(prom, f"sum(increase(kuzk_stale_worker_writes_rejected_total"
                                f"[{window}s]))") == 0

            create(custom, namespace, "c", ["done", "done"])
            wait_for(lambda: _value(prom, COMPLETED) == 2, 60,
                     "Prometheus reading the 2 partitions done after the restart")
            window = int(time.time() - quiet_from) + 1
            grew = _value(prom, f"sum(increase(kuzk_partitions_completed_total[{window}s]))")
            assert grew is not None and 1.5 <= grew <= 3  # 2, extrapolated over the window
        finally:
            server.stop()
