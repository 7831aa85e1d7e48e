"""Hypothesis drives interleavings of claim, stage, heartbeat and release (by the prover's
assignment or by the finalizer's pod reference) from 2 to 4 assignments over 1 or 2 GPUs,
against a fresh WorkerStatus per example. After every step the object, its refused-write
count and each call's answer equal an independent model's."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from kuzk.workers import Assignment, Gpu, claim, heartbeat, release, stage
from tests.integration.workers.conftest import (
    create_worker_status,
    delete_worker_status,
    new_assignment,
    read_worker_status,
)
from tests.integration.workers.model import Job, NodeModel, observed

STAGES = ("synthesizing", "synth_done", "gpu")
OPERATIONS = ("claim", "stage", "heartbeat", "release", "finalizer")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], list[tuple[str, int, str, bool]]]:
    gpus = draw(st.integers(1, 2))
    count = draw(st.integers(2, 4))
    gpu_of = [draw(st.integers(0, gpus - 1)) for _ in range(count)]
    steps = draw(
        st.lists(
            st.tuples(
                st.sampled_from(OPERATIONS),
                st.integers(0, count - 1),
                st.sampled_from(STAGES),
                st.booleans(),
            ),
            min_size=1,
            max_size=14,
        )
    )
    return gpu_of, steps


def _job(a: Assignment) -> Job:
    return Job(a.job_name, a.partition, a.attempt, a.pod_uid)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_object_follows_the_model(
    admin: client.ApiClient, scenario: tuple[list[int], list[tuple[str, int, str, bool]]]
) -> None:
    gpu_of, steps = scenario
    gpus = [Gpu(f"GPU-{uuid.uuid4()}") for _ in range(2)]
    # The first two share a job and partition, as a retried attempt does.
    assignments = [
        new_assignment("prop", partition=0, attempt=1),
        new_assignment("prop", partition=0, attempt=2),
        new_assignment("prop", partition=1),
        new_assignment("prop", partition=2),
    ]
    node = f"prop-{uuid.uuid4().hex[:10]}"
    create_worker_status(admin, node)
    model = NodeModel()
    try:
        for op, index, stage_name, succeeded in steps:
            a = assignments[index]
            got: str | bool
            want: str | bool
            if op == "claim":
                gpu = gpus[gpu_of[index]]
                got, want = claim(admin, node, gpu, a), model.claim(gpu.uuid, _job(a))
            elif op == "stage":
                got = stage(admin, node, a, stage_name)
                want = model.stage(_job(a), stage_name)
            elif op == "heartbeat":
                got, want = heartbeat(admin, node, a), model.heartbeat(_job(a))
            else:
                who = a if op == "release" else a.pod
                got = release(admin, node, who, "succeeded" if succeeded else "failed")
                want = model.release(a.pod_uid, succeeded, by_pod_ref=op == "finalizer")
            assert got == want, f"{op} of assignment {index} answered {got!r}"
            status = read_worker_status(admin, node).get("status") or {}
            assert observed(status) == model.expected(), f"after {op} of assignment {index}"
    finally:
        delete_worker_status(admin, node)
