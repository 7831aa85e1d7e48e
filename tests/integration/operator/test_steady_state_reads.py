"""In steady state the operator reads from its watch caches: while a job's partitions run, its
syncs (the 10 s resync included) and the sweeps of the GPUs' WorkerStatuses send no GET and no
LIST, and when they end the finalizer releases list no WorkerStatuses; and the lanes,
synthesizing for longer than two heartbeat intervals of former releases, write nothing to their
GPUs' WorkerStatuses between their stage changes."""

from __future__ import annotations

import threading
import time
from typing import Any

import urllib3
from kubernetes import client

from kuzk.contract import api
from kuzk.contract.workerstatus.lanes import lane_states
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    InProcessOperator,
    Plan,
    apply_job,
    proofjob,
    wait_job,
)

QUIET_S = 25  # longer than two resyncs (10 s) and two heartbeats of former releases (10 s)


class CountingTransport:
    """Stands in for urllib3's PoolManager under the operator's client and records what it
    sends (method and path) before passing it on."""

    def __init__(self, real: urllib3.PoolManager) -> None:
        self.real = real
        self.sent: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.sent.append((method, urllib3.util.parse_url(url).path or ""))
        return self.real.request(method, url, *args, **kwargs)

    def clear(self) -> None:
        self.real.clear()


def test_a_running_job_costs_no_reads(cluster: Cluster, namespace: str, nodes,
                                      inprocess_operator, plan: Plan) -> None:
    node = next(iter(nodes(1, gpus=2).nodes))
    operator: InProcessOperator = inprocess_operator()
    runtime = operator.runtime
    rest = runtime.controller.api_client.rest_client
    counting = CountingTransport(rest.pool_manager)
    rest.pool_manager = counting
    plan.set(**{"*": {"claim": True, "hold": True}})
    apply_job(cluster, namespace, proofjob("steady", partitions=2, circuitLog2=4))

    custom = client.CustomObjectsApi(cluster.api)

    def both_synthesizing() -> bool:
        listed = custom.list_cluster_custom_object(api.GROUP, api.VERSION,
                                                   api.WORKERSTATUS_PLURAL)["items"]
        shown = lane_states(listed)
        return [shown.get((namespace, "steady", i, 1)) for i in (0, 1)] == [
            "synthesizing", "synthesizing"]

    wait_for(both_synthesizing, 90, "both partitions claiming and synthesizing")
    syncs = operator.call(lambda: runtime.queue.runs_total)

    def versions() -> dict[str, str]:
        """The node's GPUs' WorkerStatuses, by name, at their resourceVersions."""
        listed = custom.list_cluster_custom_object(
            api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL,
            field_selector=f"spec.nodeName={node}")
        return {ws["metadata"]["name"]: ws["metadata"]["resourceVersion"]
                for ws in listed["items"] if (ws.get("status") or {}).get("lanes")}

    lanes = versions()
    assert len(lanes) == 2, "one WorkerStatus per GPU, each with its lane"
    with counting.lock:
        counting.sent.clear()
    time.sleep(QUIET_S)  # the quiet period is what is measured: nothing to wait on
    with counting.lock:
        quiet = list(counting.sent)
    assert versions() == lanes, "a lane wrote between its stage changes"
    resyncs = operator.call(lambda: runtime.queue.runs_total) - syncs
    assert [r for r in quiet if r[0] == "GET"] == []
    # Nothing changed, so nothing is written either, but for the job's status taking its
    # partitions' progress once (coalesced: STAGE_SECONDS after its last write).
    status = (f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/"
              f"{api.PROOFJOB_PLURAL}/steady/status")
    assert quiet in ([], [("PATCH", status)]), quiet
    # Only the clock runs in the quiet period (the job every 10 s, each GPU's sweep every
    # 30 s); heartbeats (one per pod every 10 s) would have added four or more.
    assert 2 <= resyncs <= QUIET_S // 10 + 1 + len(lanes)

    # The end: each pod's finalizer release writes where the cache shows its lane, or nowhere
    # when its prover already left; it never lists the node's WorkerStatuses to find it.
    with counting.lock:
        counting.sent.clear()
    plan.go()
    wait_job(cluster, namespace, "steady", "Succeeded")
    core = client.CoreV1Api(cluster.api)

    def released() -> bool:
        pods = core.list_namespaced_pod(namespace).items
        return bool(pods) and not any(api.FINALIZER in (p.metadata.finalizers or [])
                                      for p in pods)

    wait_for(released, 60, "every partition pod's finalizer released")
    assert versions() == {}, "a lane was left behind"
    with counting.lock:
        ending = list(counting.sent)
    collection = f"/apis/{api.GROUP}/{api.VERSION}/{api.WORKERSTATUS_PLURAL}"
    assert [r for r in ending if r == ("GET", collection)] == []
