"""The chart's alert rules loaded by the test bed's real Prometheus, scraping a real status
server: staged GPUs idle while a partition is pending fire KuzkGPUsIdleWhilePartitionsQueue;
every query of the chart's Grafana dashboard is valid PromQL there."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import yaml
from kubernetes import client

from kuzk.contract import api
from kuzk.contract import workerstatus as ws
from testenv import prometheus
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.status.server import StatusServer
from tests.integration.status.test_status_restarts import create
from tests.integration.workers.conftest import create_worker_status, delete_worker_status
from tests.unit.test_chart import one, render

FIRING = 'ALERTS{alertname="KuzkGPUsIdleWhilePartitionsQueue",alertstate="firing"}'


def test_an_idle_gpu_with_a_pending_partition_fires_the_alert(
        cluster: Cluster, namespace: str, status_server, tmp_path: Path) -> None:
    docs = render("metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true",
                  "metrics.prometheusRule.for.gpusIdleWhilePartitionsQueue=2s")
    rules = tmp_path / "kuzk-rules.yaml"
    rules.write_text(yaml.safe_dump(
        {"groups": one(docs, "PrometheusRule", "kz-kuzk-alerts")["spec"]["groups"]}))
    (dashboard,) = one(docs, "ConfigMap", "kz-kuzk-grafana-dashboard")["data"].values()
    node = f"idle-{namespace}"[:63]
    uuid = f"GPU-{namespace}"
    name = create_worker_status(cluster.api, node, uuid)["metadata"]["name"]
    try:
        idle = ws.WorkerStatusModel(workers=(
            ws.Worker(id=ws.gpu_id(uuid), gpu=ws.Gpu(uuid), since=datetime.now(UTC)),))
        client.CustomObjectsApi(cluster.api).patch_cluster_custom_object_status(
            api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, name,
            {"status": idle.as_status(datetime.now(UTC))})
        create(client.CustomObjectsApi(cluster.api), namespace, "waiting", ["pending"])
        server: StatusServer = status_server()
        cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                          "evaluation_interval": "1s"},
               "rule_files": [str(rules)],
               "scrape_configs": [{"job_name": "kuzk", "static_configs": [
                   {"targets": [f"127.0.0.1:{server.port}"]}]}]}
        with prometheus.Prometheus(tmp_path / "prometheus", cfg) as prom:
            (alert,) = wait_for(lambda: prom.query(FIRING), 60, "the alert firing")
            assert alert["metric"]["severity"] == "warning"
            for panel in json.loads(dashboard)["panels"]:
                for target in panel["targets"]:
                    prom.query(target["expr"])  # raises on a query Prometheus refuses
    finally:
        delete_worker_status(cluster.api, name)
