"""Deleting a ProofJob leaves nothing behind, whatever the propagation policy and even when the
operator was down at the delete: every partition pod (pending, running, in stage gpu,
finished) goes, every worker it held is released by a guarded write, no stale write is
counted, and the operator logs no traceback."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from kuzk.contract import api
from kuzk.contract.workerstatus.lanes import lane_states
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    OperatorProcess,
    Plan,
    apply_job,
    get_job,
    job_pods,
    proofjob,
)

# Mostly waiting on pods' grace periods and the garbage collector: on the long tests'
# worker (tests/conftest.py).
pytestmark = pytest.mark.worker("long")

NAME = "doomed"


def _worker_statuses(cluster: Cluster) -> list[dict[str, Any]]:
    listing = client.CustomObjectsApi(cluster.api).list_cluster_custom_object(
        api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL)
    return list(listing["items"])


def _proving(cluster: Cluster, nodes: set[str]) -> list[str]:
    return [f"{ws['metadata']['name']}/{w['id']}" for ws in _worker_statuses(cluster)
            if ws["spec"]["nodeName"] in nodes
            for w in (ws.get("status") or {}).get("workers") or [] if w.get("lanes")]


def _stale(cluster: Cluster, nodes: set[str]) -> int:
    return sum(int((ws.get("status") or {}).get("staleWritesRejected") or 0)
               for ws in _worker_statuses(cluster) if ws["spec"]["nodeName"] in nodes)


def _states(cluster: Cluster, namespace: str) -> list[str]:
    """The job's partitions as they are now: as its status says, a live one as its lane shows
    it (the status takes a lane's stage with its next write)."""
    lanes = lane_states(_worker_statuses(cluster))
    job = get_job(cluster, namespace, NAME) or {}
    return [p["state"] if p["state"] in api.TERMINAL_STATES
            else lanes.get((namespace, NAME, p["index"], p["attempt"]), p["state"])
            for p in (job.get("status") or {}).get("partitions") or []]


def _every_state(cluster: Cluster, namespace: str, plan: Plan, nodes: set[str]) -> None:
    """Six partitions on four GPUs: one finished, two in stage gpu, two running before it,
    one pending (no GPU left)."""
    plan.set(**{"*": {"claim": True, "hold": True}})
    apply_job(cluster, namespace, proofjob(NAME, "porep-c2", partitions=6, circuitLog2=4))
    started = wait_for(lambda: len(plan.started()) >= 4 and plan.started(), 90,
                       "four partitions claiming their GPUs")
    plan.go(started[0])
    wait_for(lambda: "done" in _states(cluster, namespace), 60, "one partition done")
    running = wait_for(lambda: [p for p in plan.started() if p != started[0]][:4]
                       if len(plan.started()) >= 5 else None, 60, "a fifth partition starts")
    plan.stage(running[0], "gpu")
    plan.stage(running[1], "gpu")

    def mixed() -> bool:
        states = _states(cluster, namespace)
        return (states.count("gpu") == 2 and states.count("done") == 1
                and states.count("pending") == 1
                and sum(s in ("scheduled", "synthesizing") for s in states) == 2)

    wait_for(mixed, 60, "partitions pending, running, in gpu and done")
    assert len(_proving(cluster, nodes)) == 4


def _nothing_left(cluster: Cluster, namespace: str, nodes: set[str], stale_before: int,
                  operator: OperatorProcess) -> None:
    wait_for(lambda: not job_pods(cluster, namespace, NAME), 60, "every partition pod gone")
    wait_for(lambda: not _proving(cluster, nodes), 30, "every worker idle")
    # Foreground: the garbage collector drops the job's own finalizer once its pods are gone.
    wait_for(lambda: get_job(cluster, namespace, NAME) is None, 30, "the ProofJob gone")
    assert _stale(cluster, nodes) == stale_before
    log = operator.text()
    assert "Traceback" not in log
    # Not a line per watch event (Kopf's "Handler '...' succeeded."), and no handler failed.
    assert "Handler '" not in log


@pytest.mark.parametrize("cascade", ["background", "foreground", "orphan"])
def test_deleting_a_running_job_leaves_nothing_behind(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan, cascade: str) -> None:
    kubelet = nodes(2, gpus=2)
    names = set(kubelet.nodes)
    operator = run_operator()
    _every_state(cluster, namespace, plan, names)
    stale_before = _stale(cluster, names)

    cluster.kubectl("delete", "pj", NAME, "-n", namespace, f"--cascade={cascade}", "--wait=false")
    _nothing_left(cluster, namespace, names, stale_before, operator)
    if cascade == "orphan":
        assert "its ProofJob is gone" in operator.text()


def test_an_operator_started_after_the_delete_cleans_up(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    kubelet = nodes(2, gpus=2)
    names = set(kubelet.nodes)
    first = run_operator()
    _every_state(cluster, namespace, plan, names)
    stale_before = _stale(cluster, names)
    first.stop()

    cluster.kubectl("delete", "pj", NAME, "-n", namespace, "--wait=false")

    def all_terminating() -> bool:
        pods = job_pods(cluster, namespace, NAME)
        return bool(pods) and all(p.metadata.deletion_timestamp for p in pods)

    wait_for(all_terminating, 60, "the garbage collector deleting every pod")
    wait_for(lambda: get_job(cluster, namespace, NAME) is None, 30, "ProofJob gone")
    assert _proving(cluster, names)  # nothing released them while the operator was down

    second = run_operator()
    _nothing_left(cluster, namespace, names, stale_before, second)
