"""Upgrading from a release with one WorkerStatus per node: the operator serves such a legacy
WorkerStatus like any other while lanes are on it, and once none is, deletes it; its GPUs'
seconds and the stale writes it refused go into the ledger, once. WorkerStatuses of GPUs
stay."""

from __future__ import annotations

import contextlib
import copy
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk.contract import api, ledger
from kuzk.contract.crd_workerstatus import workerstatus_crd
from kuzk.contract.crds import all_crds
from kuzk.contract.logs import KEYS
from kuzk.contract.workerstatus.decisions import Gpu, WriteDecision
from kuzk.contract.workerstatus.writes import guarded_write, join, leave
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.workers.conftest import delete_node, new_assignment

LEDGER = "kuzk-ledger"


def _ws(cluster: Cluster, name: str) -> dict[str, Any] | None:
    try:
        return dict(client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
            api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def _apply(cluster: Cluster, crds: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(crds))
    for crd in crds:
        name = crd["metadata"]["name"]
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", f"crd/{name}")


@contextlib.contextmanager
def previous_release_crd(cluster: Cluster) -> Iterator[None]:
    """The WorkerStatus CRD as a release before per-GPU WorkerStatuses let objects be made:
    without the rule that a new one names its GPU (``spec.gpu``); today's on the way out."""
    crd = copy.deepcopy(workerstatus_crd())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"] = [
        r for r in spec["x-kubernetes-validations"] if not r.get("optionalOldSelf")]
    _apply(cluster, [crd])
    try:
        yield
    finally:
        _apply(cluster, all_crds())


def _legacy_status(accounted: datetime) -> dict[str, Any]:
    def gpu(k: int) -> dict[str, Any]:
        return {"id": f"W{k}", "gpu": {"uuid": f"GPU-legacy-{k}", "name": "NVIDIA H200"},
                "state": "idle", "lanes": [], "completed": 5 + k,
                "gpuTime": {"busySeconds": 120.0 + k, "cpuSeconds": 30.0, "notLiveSeconds": 0.0,
                            "noLaneSeconds": 50.0,
                            "accountedAt": api.format_time(accounted, millis=True)}}
    return {"workers": [gpu(0), gpu(1)], "proving": 0, "lanes": 0, "workerCount": 2,
            "staleWritesRejected": 3, "updatedAt": api.format_time(accounted, millis=True)}


def test_a_legacy_worker_status_is_retired_into_the_ledger(
        cluster: Cluster, namespace: str, run_operator) -> None:
    node = f"legacy-{uuid.uuid4().hex[:8]}"
    owner = client.CoreV1Api(cluster.api).create_node({"metadata": {"name": node}})
    objects = client.CustomObjectsApi(cluster.api)
    try:
        with previous_release_crd(cluster):
            objects.create_cluster_custom_object(api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, {
                "apiVersion": api.API_VERSION, "kind": api.WORKERSTATUS_KIND,
                "metadata": {"name": node, "ownerReferences": [{
                    "apiVersion": "v1", "kind": "Node", "name": node,
                    "uid": owner.metadata.uid}]},
                "spec": {"nodeName": node}})
            accounted = datetime.now(UTC) - timedelta(seconds=5)
            guarded_write(cluster.api, node,
                          lambda _: WriteDecision(_legacy_status(accounted), None))
        # Today's CRD still takes a write of a prover of the release before (one more
        # refused stale write, say) to the legacy WorkerStatus it knows.
        guarded_write(cluster.api, node, lambda s: WriteDecision(
            {**s, "staleWritesRejected": int(s["staleWritesRejected"]) + 1}, None))
        idle_gpu = new_assignment()
        per_gpu = join(cluster.api, node, Gpu("GPU-today"), idle_gpu)
        assert leave(cluster.api, per_gpu, idle_gpu, "succeeded") is True
        uid = _ws(cluster, node)["metadata"]["uid"]

        operator = run_operator("--log-format", "json", "--ledger", f"{namespace}/{LEDGER}",
                                namespaced=False)
        wait_for(lambda: _ws(cluster, node) is None, 90, "the legacy WorkerStatus retired")

        def folded() -> ledger.Ledger | None:
            try:
                cm = client.CoreV1Api(cluster.api).read_namespaced_config_map(LEDGER, namespace)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            book = ledger.parse({"data": cm.data})
            return book if uid in book.folded else None

        book = wait_for(folded, 30, "the legacy WorkerStatus folded into the ledger")
        assert book.tally.stale_writes_rejected == 4
        seconds = {key: {mode: s for mode, s in counts.items() if s}
                   for key, counts in book.tally.gpu_seconds.items()}
        assert seconds == {
            (node, f"W{k}", f"GPU-legacy-{k}", "NVIDIA H200"): {
                "busy": 120.0 + k, "cpu": 30.0, "no_lane": 50.0}
            for k in (0, 1)}
        assert _ws(cluster, per_gpu) is not None, "a GPU's WorkerStatus is no legacy one"
        retired = [json.loads(line) for line in operator.text().splitlines()
                   if "retired WorkerStatus" in line]
        assert [list(r)[:4] for r in retired] == [list(KEYS)]
    finally:
        delete_node(cluster.api, node)
