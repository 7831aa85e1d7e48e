"""kuzk's per-GPU series carry dcgm-exporter's label names for the same values (Hostname,
UUID, modelName), so a real Prometheus joins them with a dcgm-shaped series on UUID without
relabeling."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from kuzk.contract import api
from kuzk.contract import workerstatus as ws
from testenv import prometheus
from testenv.cluster import Cluster
from testenv.controlplane import free_port
from testenv.waiting import wait_for
from tests.integration.status.server import StatusServer
from tests.integration.workers.conftest import create_worker_status, delete_worker_status


def test_a_kuzk_gpu_series_joins_a_dcgm_series_on_uuid(cluster: Cluster, namespace: str,
                                                        status_server, tmp_path: Path) -> None:
    node, uuid, model = f"dcgm-{namespace}"[:63], f"GPU-{namespace}", "NVIDIA H200"
    name = create_worker_status(cluster.api, node, uuid)["metadata"]["name"]
    try:
        model_status = ws.WorkerStatusModel(workers=(
            ws.Worker(id=ws.gpu_id(uuid), gpu=ws.Gpu(uuid, model), since=datetime.now(UTC)),))
        client.CustomObjectsApi(cluster.api).patch_cluster_custom_object_status(
            api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, name,
            {"status": model_status.as_status(datetime.now(UTC))})
        server: StatusServer = status_server()
        # What dcgm-exporter exports for that GPU (its own label names and values).
        dcgm = CollectorRegistry()
        util = Gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
                     ["gpu", "UUID", "Hostname", "modelName"], registry=dcgm)
        util.labels("0", uuid, node, model).set(87)
        dcgm_port = free_port()
        start_http_server(dcgm_port, "127.0.0.1", registry=dcgm)
        cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
               "scrape_configs": [
                   {"job_name": "kuzk",
                    "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]},
                   {"job_name": "dcgm",
                    "static_configs": [{"targets": [f"127.0.0.1:{dcgm_port}"]}]}]}
        with prometheus.Prometheus(tmp_path / "prometheus", cfg) as prom:
            join = (f'kuzk_gpu_busy_seconds_total{{UUID="{uuid}"}}'
                    " * on (UUID, Hostname) group_left (gpu) DCGM_FI_DEV_GPU_UTIL")
            (row,) = wait_for(lambda: prom.query(join), 60, "the joined row")
            labels = row["metric"]
            assert (labels["UUID"], labels["Hostname"], labels["gpu"]) == (uuid, node, "0")
            assert (labels["node"], labels["worker"], labels["modelName"]) == (
                node, ws.gpu_id(uuid), model)
    finally:
        delete_worker_status(cluster.api, name)
