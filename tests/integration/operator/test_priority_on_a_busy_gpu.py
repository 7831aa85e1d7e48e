"""Under overload, priority decides: two ProofJobs of the same kind queue their lanes on one
busy GPU, and the one whose ``spec.prover.priorityClassName`` ranks higher gets the GPU phase
first, though the other's lanes were ready before it.

The GPU is kept busy by a lane that holds its phase for as long as the test says: a stand-in
prover (``standin.py``, which reports through the prover's own reporter) run for the job
``busy`` only; the two queued jobs run the built-in prover. So both jobs' lanes are waiting
before the GPU is given up, whatever the machine's load, and the order they get it in is the
ranking's alone."""

from __future__ import annotations

import json
import shlex
import threading
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk.contract import api
from kuzk.contract.workerstatus import worker_status_name
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    Plan,
    apply_job,
    proofjob,
    standin_command,
    wait_job,
)
from tests.integration.operator.test_worker_truth import _watch_versions

BUSY, LOW, HIGH = "busy", "low", "high"
PARTITIONS = 2  # of each queued job: a lane of the later job goes before both of the other's


def _dispatch(plan: Plan) -> list[str]:
    """The partition pods' command: the stand-in for the job ``busy``, the built-in prover
    for every other."""
    standin = shlex.join(standin_command(plan))
    return ["sh", "-c", f'if [ "$KUZK_JOB" = {BUSY} ]; then exec {standin}; fi;'
                        " exec kuzk-prover"]


def test_the_higher_priority_jobs_lanes_get_a_busy_gpu_first(
        cluster: Cluster, namespace: str, nodes, plan: Plan, run_operator) -> None:
    kubelet = nodes(1, gpus=1, replicas=1 + 2 * PARTITIONS)
    node = next(iter(kubelet.nodes))
    name = worker_status_name(node, kubelet.nodes[node].gpu_uuids()[0])
    plan.set(**{"*": {"claim": True, "hold": True}})
    run_operator("--prover-command", json.dumps(_dispatch(plan)))
    custom = client.CustomObjectsApi(cluster.api)

    def worker() -> dict[str, Any]:
        try:
            ws = custom.get_cluster_custom_object(api.GROUP, api.VERSION,
                                                  api.WORKERSTATUS_PLURAL, name)
        except ApiException as e:
            if e.status == 404:  # its first lane has not created it yet
                return {}
            raise
        return ((ws.get("status") or {}).get("workers") or [{}])[0]

    def waiting(job: str) -> list[dict[str, Any]] | None:
        """The job's lanes, once every one of them waits for the GPU phase."""
        lanes = [lane for lane in worker().get("lanes") or [] if lane["job"]["name"] == job]
        ready = len(lanes) == PARTITIONS and all(lane.get("readyAt") for lane in lanes)
        return lanes if ready else None

    versions: list[dict[str, Any]] = []
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_versions, args=(cluster, stop, versions))
    watcher.start()
    try:
        apply_job(cluster, namespace, proofjob(BUSY, partitions=1, circuitLog2=10))
        busy = api.pod_name(BUSY, 0, 1)
        wait_for(lambda: busy in plan.started(), 120, "the busy job's lane joined")
        plan.stage(busy, "gpu")
        held = wait_for(lambda: (worker().get("holder") or {}).get("pod"), 60,
                        "the busy job's lane holding the GPU phase")
        assert held["name"] == busy
        apply_job(cluster, namespace, proofjob(LOW, partitions=PARTITIONS, circuitLog2=10))
        low = wait_for(lambda: waiting(LOW), 180, "the low job's lanes waiting")
        apply_job(cluster, namespace, proofjob(HIGH, partitions=PARTITIONS, circuitLog2=10,
                                               prover={"priorityClassName": "kuzk-critical"}))
        high = wait_for(lambda: waiting(HIGH), 180, "the high job's lanes waiting")
        # Both kinds are snap-update (kuzk-normal); the high job's class outranks it, and its
        # lanes got ready after every lane of the low job.
        assert {lane["priority"] for lane in low} == {0}
        assert {lane["priority"] for lane in high} == {2}
        assert max(lane["readyAt"] for lane in low) < min(lane["readyAt"] for lane in high)
        plan.stage(busy, "committing")
        plan.go(busy)
        for job in (BUSY, LOW, HIGH):
            wait_job(cluster, namespace, job, "Succeeded", timeout=180)
        # The last hold was written before its job succeeded; the watch delivers it.
        wait_for(lambda: len(_holders(versions, name)) == 1 + 2 * PARTITIONS, 30,
                 "every lane's hold of the GPU phase, as written")
    finally:
        stop.set()
        watcher.join()
    order = [job for job, _ in _holders(versions, name)]
    assert order == [BUSY] + [HIGH] * PARTITIONS + [LOW] * PARTITIONS, order


def _holders(versions: list[dict[str, Any]], name: str) -> list[tuple[str, str]]:
    """Each hold of WorkerStatus ``name``'s GPU phase, in the order written: (job, pod UID)."""
    holds: list[tuple[str, str]] = []
    for ws in list(versions):
        if ws["metadata"]["name"] != name:
            continue
        for w in (ws.get("status") or {}).get("workers") or []:
            uid = (w.get("holder") or {}).get("pod", {}).get("uid")
            lane = next((x for x in w.get("lanes") or [] if x["pod"]["uid"] == uid), None)
            if lane is not None and (not holds or holds[-1][1] != uid):
                holds.append((lane["job"]["name"], uid))
    return holds
