"""Counters across deletions and a status-server restart, read by a real Prometheus: the
operator folds what a deleted ProofJob (past its TTL, or deleted by hand) and a deleted
WorkerStatus counted into the ledger, so after the restart every counter carries on from
where it was: no sample goes down (``resets()`` is 0), ``increase()`` over a window in which
nothing finished is 0, and what finishes after the restart counts. (The old rule rebuilt the
counters from the objects left and went 2 -> 1, which Prometheus read as a reset followed by
one new partition.) The GPU-time counters are kept by the WorkerStatuses' own writes
(``gpuTime``), so they carry on across the restart too: no reset, no busy time in the quiet
window, and per GPU busy plus idle grows as the wall clock does."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk.contract import api, ledger
from kuzk.status.view import OPEN_MODE_LAG_S
from testenv import prometheus
from testenv.cluster import Cluster
from testenv.controlplane import free_port
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, get_job, proofjob, wait_job
from tests.integration.status.server import start
from tests.integration.workers.conftest import create_worker_status, delete_worker_status

# It mostly waits on Prometheus' scrapes and windows: on the long tests' worker
# (tests/conftest.py), which the other control-plane tests' worker outlasted by a minute.
pytestmark = pytest.mark.worker("long")

COMPLETED = 'sum(kuzk_partitions_completed_total{proof_kind="snap-update"})'
STALE = "sum(kuzk_stale_worker_writes_rejected_total)"
# every counter that counts what the fleet finished
COUNTERS = ("kuzk_partitions_completed_total", "kuzk_partitions_failed_total",
            "kuzk_stale_worker_writes_rejected_total", "kuzk_partition_duration_seconds_count",
            "kuzk_partition_duration_seconds_sum", "kuzk_gpu_busy_seconds_total",
            "kuzk_gpu_idle_seconds_total")
GPU = ("node", "worker", "gpu_uuid")
# How long the wall-time check spans, the restart included.
WALL_WINDOW_S = 20.0



def _scraped_since(prom: prometheus.Prometheus, moment: float, scrapes: int) -> bool:
    """Whether Prometheus has ``scrapes`` successful scrapes of the server after ``moment``."""
    window = max(int(time.time() - moment), 1)
    got = prom.value(f"count_over_time(kuzk_status_view_synced[{window}s])")
    return got is not None and got >= scrapes


def _gpu_clocks(prom: prometheus.Prometheus, node: str) -> dict[tuple[str, ...], float]:
    """Per GPU of ``node``: busy plus idle seconds minus the time of the scrape that read them,
    which stays the same while every second is counted once (it is minus when the GPU was
    added)."""
    by_gpu, mine = ",".join(GPU), f'{{node="{node}"}}'
    result = prom.query(
        f"sum by ({by_gpu}) (kuzk_gpu_busy_seconds_total{mine})"
        f" + sum by ({by_gpu}) (kuzk_gpu_idle_seconds_total{mine})"
        f" - max by ({by_gpu}) (timestamp(kuzk_gpu_busy_seconds_total{mine}))")
    return {tuple(r["metric"][k] for k in GPU): float(r["value"][1]) for r in result}


def _folded(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    try:
        cm = client.CoreV1Api(cluster.api).read_namespaced_config_map(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return {}
        raise
    return ledger.parse({"data": cm.data}).folded


def _uid(obj: dict[str, Any] | None) -> str:
    assert obj is not None
    return str(obj["metadata"]["uid"])


def test_counters_carry_on_across_deletions_and_a_restart(
        cluster: Cluster, namespace: str, nodes, operator, tmp_path: Path) -> None:
    custom = client.CustomObjectsApi(cluster.api)
    kubelet = nodes(1, gpus=2)
    book = f"{namespace}/kuzk-ledger"
    # The real prover: its lanes hold the GPU phase, so its GPUs have busy time to keep.
    operator("--ledger", book, real_prover=True)
    port = free_port()
    cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms",
                      "evaluation_interval": "1s"},
           "scrape_configs": [{"job_name": "kuzk",
                               "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}
    args = ("--namespace", namespace, "--ledger", book)
    server = start(cluster, tmp_path / "status-0.log", *args, port=port)
    with prometheus.Prometheus(tmp_path / "prometheus", cfg) as prom:
        try:
            apply_job(cluster, namespace, proofjob("b", partitions=1, circuitLog2=10))
            b = wait_job(cluster, namespace, "b", "Succeeded")
            apply_job(cluster, namespace, proofjob("a", partitions=2, circuitLog2=10,
                                                   ttlSecondsAfterFinished=2))
            a = wait_job(cluster, namespace, "a", "Succeeded")
            # A GPU's WorkerStatus that counted stale writes while the server ran.
            node = f"gone-{namespace}"[:63]
            gone = create_worker_status(cluster.api, node, f"GPU-{namespace}")
            custom.patch_cluster_custom_object_status(
                api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, gone["metadata"]["name"],
                {"status": {"workers": [], "staleWritesRejected": 3}})
            wait_for(lambda: prom.value(COMPLETED) == 3, 60, "Prometheus reading 3")
            wait_for(lambda: (prom.value(STALE) or 0) >= 3, 60, "Prometheus reading 3 stale")
            quiet_from = time.time()
            (node_name,) = kubelet.nodes
            # The current mode counts up to OPEN_MODE_LAG_S ago, so a GPU's last write must be
            # that old before busy + idle grows with the wall clock.
            settled = quiet_from + OPEN_MODE_LAG_S
            wait_for(lambda: time.time() >= settled and _scraped_since(prom, settled, 1),
                     30, "a scrape after the last write's seconds are counted")
            before = _gpu_clocks(prom, node_name)
            assert 1 <= len(before) <= 2, before  # the GPUs whose lanes proved a and b

            # a goes past its TTL (the operator folds it, then deletes it); b is deleted by
            # hand and the node goes (the operator folds them when it sees them go).
            wait_for(lambda: get_job(cluster, namespace, "a") is None, 60, "a deleted by TTL")
            custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                                   api.PROOFJOB_PLURAL, "b")
            delete_worker_status(cluster.api, gone["metadata"]["name"])
            wanted = {_uid(a), _uid(b), _uid(gone)}
            wait_for(lambda: wanted <= set(_folded(cluster, namespace, "kuzk-ledger")), 60,
                     "the ledger folding a, b and the WorkerStatus")
            server.stop()
            server = start(cluster, tmp_path / "status-1.log", *args, port=port)
            restarted = time.time()
            wait_for(lambda: _scraped_since(prom, restarted, 3)
                     and time.time() - quiet_from >= WALL_WINDOW_S, 60 + WALL_WINDOW_S,
                     f"three scrapes of the restarted server, {WALL_WINDOW_S:.0f} s after a")
            span = time.time() - quiet_from
            after = _gpu_clocks(prom, node_name)
            assert after.keys() == before.keys()
            for gpu, offset in after.items():
                # busy + idle - wall time stays where it was: every second across the
                # restart is counted once, within 3 %
                assert abs(offset - before[gpu]) <= 0.03 * span, (gpu, before[gpu], offset, span)
            window = int(time.time() - quiet_from) + 1
            for counter in COUNTERS:
                assert prom.value(f"sum(resets({counter}[{window}s]))") == 0, counter
            for counter in (*COUNTERS[:2], "kuzk_gpu_busy_seconds_total"):
                assert prom.value(f"sum(increase({counter}[{window}s]))") == 0, counter
            assert prom.value(COMPLETED) == 3

            assert (prom.value(STALE) or 0) >= 3

            apply_job(cluster, namespace, proofjob("c", partitions=2, circuitLog2=10))
            wait_job(cluster, namespace, "c", "Succeeded")
            wait_for(lambda: prom.value(COMPLETED) == 5, 60,
                     "Prometheus reading the 2 partitions done after the restart")
            window = int(time.time() - quiet_from) + 1
            assert prom.value(f"sum(resets(kuzk_partitions_completed_total[{window}s]))") == 0
            grew = prom.value(f"sum(increase(kuzk_partitions_completed_total[{window}s]))")
            assert grew is not None and 1.5 <= grew <= 3  # 2, extrapolated over the window
        finally:
            server.stop()
