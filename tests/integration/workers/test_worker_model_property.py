"""Hypothesis drives interleavings of join, stage, acquire, release of the GPU phase, leave, the
finalizer's release and the sweep, for 2 to 3 lanes over 1 or 2 GPUs of a fresh node per example
(each GPU's WorkerStatus made by its first lane). After every step the API server holds exactly
what the pure decision made of the previous version of the lane's GPU's object (it accepts every
status the protocol writes: the CRD's schema and CEL rules agree with the model), and the node's
objects together what the independent model (``tests/integration/workers/model.py``) says; each
call answers as the decision and the model do, and the invariants hold: at most one holder per
GPU and it is one of its lanes, and after a sweep no holder's pod is gone."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from kuzk.contract.workerstatus import parse, worker_status_name
from kuzk.contract.workerstatus.decisions import (
    Assignment,
    Gpu,
    decide_acquire,
    decide_join,
    decide_release,
    decide_release_gpu,
    decide_stage,
    decide_sweep,
)
from kuzk.contract.workerstatus.writes import (
    acquire,
    join,
    leave,
    node_worker_statuses,
    release,
    release_gpu,
    stage,
    sweep,
)
from tests.integration.workers.conftest import delete_node, new_assignment
from tests.integration.workers.model import NodeModel, observed

OPERATIONS = ("join", "stage", "acquire", "release_gpu", "leave", "finalizer", "sweep", "die")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], list[tuple[str, int]]]:
    gpus = draw(st.integers(1, 2))
    count = draw(st.integers(2, 3))
    gpu_of = [draw(st.integers(0, gpus - 1)) for _ in range(count)]
    steps = draw(st.lists(st.tuples(st.sampled_from(OPERATIONS), st.integers(0, count - 1)),
                          min_size=1, max_size=16))
    return gpu_of, steps


def _lanes(status: dict[str, Any]) -> dict[str, list[str]]:
    """What the comparison ignores nothing of but the times: per worker, its lanes' pods and
    stages, its holder, completed count; plus the stale count."""
    out: dict[str, Any] = {"stale": status.get("staleWritesRejected", 0)}
    for w in parse(status).workers:
        out[w.id] = [
            [(lane.pod.uid, str(lane.stage), lane.ready_at is not None) for lane in w.lanes],
            w.holder.pod.uid if w.holder else None,
            w.completed,
            list(w.previous_pod_uids),
        ]
    return out


def _status(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The status of WorkerStatus ``name``; empty while it does not exist."""
    try:
        got = client.CustomObjectsApi(api).get_cluster_custom_object(
            "kuzk.io", "v1alpha1", "workerstatuses", name)
    except client.ApiException as error:
        if error.status == 404:
            return {}
        raise
    return dict(got.get("status") or {})


def _node_status(api: client.ApiClient, node: str) -> dict[str, Any]:
    """The node's WorkerStatuses as one status: their workers by ID, their counts summed."""
    statuses = [ws.get("status") or {} for ws in node_worker_statuses(api, node)]
    workers = sorted((w for s in statuses for w in s.get("workers") or []),
                     key=lambda w: w["id"])
    counts = ("proving", "lanes", "workerCount", "staleWritesRejected")
    return {"workers": workers, **{k: sum(s.get(k, 0) for s in statuses) for k in counts}}


def _by_id(seen: dict[str, Any]) -> dict[str, Any]:
    return {**seen, "workers": sorted(seen["workers"], key=lambda w: w["id"])}


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_the_object_follows_the_pure_decisions(
    admin: client.ApiClient, scenario: tuple[list[int], list[tuple[str, int]]]
) -> None:
    gpu_of, steps = scenario
    gpus = [Gpu(f"GPU-{uuid.uuid4()}") for _ in range(2)]
    # The first two share a job and partition, as a retried attempt does.
    lanes: list[Assignment] = [
        new_assignment("prop", partition=0, attempt=1),
        new_assignment("prop", partition=0, attempt=2),
        new_assignment("prop", partition=1),
    ]
    node = f"prop-{uuid.uuid4().hex[:10]}"
    client.CoreV1Api(admin).create_node({"metadata": {"name": node}})
    names = [worker_status_name(node, gpu.uuid) for gpu in gpus]
    dead: set[str] = set()
    model = NodeModel()
    try:
        for t, (op, index) in enumerate(steps):
            a, gpu = lanes[index], gpus[gpu_of[index]]
            name = names[gpu_of[index]]
            before = _status(admin, name)
            live = {x.pod_uid: None for x in lanes if x.pod_uid not in dead}
            # The decision is made after the call, at a later time: the order of readyAt
            # (who gets the GPU next) is the same as the real write's.
            got: object
            if op == "join":
                assert join(admin, node, gpu, a) == name, "joined its GPU's WorkerStatus"
                want = decide_join(before, gpu, a, datetime.now(UTC))
                told = model.join(gpu.uuid, a.pod_uid, a.proof_kind, t)
                got = want.result  # the worker's ID, as the model names it
            elif op in ("stage", "acquire", "release_gpu", "leave") and not before:
                continue  # no lane of this GPU ever joined: the prover writes after its join
            elif op == "stage":
                got = stage(admin, name, a, "synth_done")
                want = decide_stage(before, a, "synth_done", datetime.now(UTC))
                told = model.stage(a.pod_uid, "synth_done", t)
            elif op == "acquire":
                got = acquire(admin, name, a, wait_s=0)
                want = decide_acquire(before, a, datetime.now(UTC))
                told = model.acquire(a.pod_uid, t)
            elif op == "release_gpu":
                got = release_gpu(admin, name, a)
                want = decide_release_gpu(before, a, datetime.now(UTC))
                told = model.release_gpu(a.pod_uid, t)
            elif op == "leave":
                got = leave(admin, name, a, "succeeded")
                want = decide_release(before, a, "succeeded", datetime.now(UTC))
                told = model.leave(a.pod_uid, True)
            elif op == "finalizer":
                got = release(admin, node, a.pod, "failed")
                want = decide_release(before, a.pod, "failed", datetime.now(UTC))
                told = model.finalizer(a.pod_uid, False)
            elif op == "sweep":
                moment = datetime.now(UTC)
                befores = {n: _status(admin, n) for n in names}
                got = [r for n in names for r in sweep(admin, n, live, moment)]
                wants = {n: decide_sweep(b, live, moment) for n, b in befores.items()}
                assert got == [r for w in wants.values() for r in w.result]
                told = [(r.worker_id, r.pod.uid, r.outcome) for w in wants.values()
                        for r in w.result]
                assert sorted(model.sweep_live(live)) == sorted(told)
                for n, w in wants.items():
                    expected = befores[n] if w.status is None else w.status
                    assert _lanes(_status(admin, n)) == _lanes(expected), f"after sweep: {n}"
            else:
                dead.add(a.pod_uid)
                continue
            after = _status(admin, name)
            if op != "sweep":
                assert got == want.result, f"{op} of lane {index} answered {got!r}"
                assert got == told, f"{op} of lane {index}: the model says {told!r}"
                expected = before if want.status is None else want.status
                assert _lanes(after) == _lanes(expected), f"after {op} of lane {index}"
            assert _by_id(observed(_node_status(admin, node))) == _by_id(model.expected()), (
                f"after {op} of lane {index}")
            for w in parse(after).workers:
                assert w.holder is None or w.lane(w.holder.pod.uid) is not None
                if op == "sweep":
                    assert w.holder is None or w.holder.pod.uid not in dead
    finally:
        delete_node(admin, node)
