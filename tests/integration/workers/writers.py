"""One lane writer of the concurrency test, run as a thread or as a spawned process.

A writer is a lane on one GPU: it runs fresh partitions one after another as the built-in
prover does (join, synthesizing, synth_done, acquire the GPU phase, waiting on a watch while
another lane holds it, release it, leave). Every GPU carries
several writers at once, so acquires wait and writes conflict. Now and then a prover dies,
holding the GPU phase or before it asked for it: either the writer, as the operator's
finalizer, then releases the dead pod by its pod reference (the lane, and the GPU phase with
it, go), or it hands the pod's UID to the test's sweeper (``dead``, a queue) as a pod that is
gone, and goes on with its next partition, whose acquire waits until the sweep has freed the
GPU phase. Late writes about partitions the writer ran before (a GPU release or a leave of a
lane that is gone) are sent on purpose: each must be refused and counted. A write that gives
up after the conflict budget is tried again, and counted, as callers are told to. Each hold
of the GPU phase is reported with the monotonic times it was granted and given up (for a pod
left to the sweep: when the sweep that removed it began, which the test fills in), so the test
can check that no two lanes held one GPU's phase at once.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from kubernetes import config

from kuzk.contract.workerstatus import worker_status_name
from kuzk.contract.workerstatus.decisions import Acquired, Assignment, Gpu
from kuzk.contract.workerstatus.writes import (
    WorkerWriteConflict,
    acquire,
    join,
    leave,
    release,
    release_gpu,
    stage,
)

DIED_SHARE = 0.1  # of the partitions whose prover dies, released by the finalizer
SWEPT_SHARE = 0.1  # of the partitions whose prover dies and whose pod is gone: the sweep's
STALE_SHARE = 0.3  # of the partitions after which a late write about an earlier one goes out
T = TypeVar("T")


@dataclass
class Hold:
    """One hold of a GPU's phase: from the acquire's answer to the release's send."""

    gpu: int
    pod_uid: str
    granted: float
    released: float | None  # None: the sweep released it


@dataclass
class Report:
    writer: int
    gpu: int
    partitions: int = 0
    succeeded: int = 0
    finalized: int = 0
    swept: list[str] = field(default_factory=list)
    outcomes: dict[str, str] = field(default_factory=dict)  # pod UID: how its lane ended
    stale_sent: int = 0
    gave_up: int = 0
    writes: int = 0
    holds: list[Hold] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_writer(
    kubeconfig: str, node: str, writer: int, gpus: list[str], gpu: int, partitions: int,
    seed: int, dead: Any,
) -> dict[str, Any]:
    """Run ``partitions`` partitions as a lane on ``gpus[gpu]``, putting the UIDs of pods left
    to the sweep on ``dead``; return the Report as a dict."""
    api = config.new_client_from_config(config_file=kubeconfig)
    rng = random.Random(seed)
    report = Report(writer, gpu)
    device = Gpu(gpus[gpu])
    name = worker_status_name(node, device.uuid)
    done: list[Assignment] = []

    def call(operation: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        # The join and the finalizer's release are addressed by node (the release finds the
        # GPU), the lane's other writes by its GPU's WorkerStatus. Giving up after the
        # conflict budget means that no write landed: try again.
        where = node if operation in (join, release) else name
        while True:
            try:
                report.writes += 1
                return operation(api, where, *args, **kwargs)
            except WorkerWriteConflict:
                report.gave_up += 1

    def expect(what: str, got: object, want: object) -> None:
        if got != want:
            report.errors.append(f"writer {writer}: {what} answered {got!r}, expected {want!r}")

    for k in range(partitions):
        a = Assignment("concurrency", f"job-{writer}", str(uuid.uuid4()), "porep-c2", k, 1,
                       f"pod-{writer}-{k}", str(uuid.uuid4()))
        expect("join", call(join, device, a), name)
        expect("synthesizing", call(stage, a, "synthesizing"), True)
        fate = rng.random()
        dies = fate < DIED_SHARE + SWEPT_SHARE
        holding = not dies or rng.random() < 0.7
        if holding:
            expect("synth_done", call(stage, a, "synth_done"), True)
            expect("acquire", call(acquire, a, wait_s=60), Acquired.GRANTED)
            granted = time.monotonic()
            time.sleep(rng.uniform(0, 0.02))  # the GPU work
        if fate < DIED_SHARE:
            # The prover dies; the operator's finalizer releases its pod.
            if holding:
                report.holds.append(Hold(gpu, a.pod_uid, granted, time.monotonic()))
            expect("finalizer", call(release, a.pod, "failed"), True)
            report.finalized += 1
            report.outcomes[a.pod_uid] = "failed"
        elif dies:
            # The prover dies and its pod is gone: the sweep removes the lane (and the GPU
            # phase with it). Late writes about it would race the sweep: none are sent.
            if holding:
                report.holds.append(Hold(gpu, a.pod_uid, granted, None))
            report.swept.append(a.pod_uid)
            report.outcomes[a.pod_uid] = "lost"
            dead.put(a.pod_uid)
            report.partitions += 1
            continue
        else:
            report.holds.append(Hold(gpu, a.pod_uid, granted, time.monotonic()))
            expect("release_gpu", call(release_gpu, a), True)
            expect("leave", call(leave, a, "succeeded"), True)
            report.succeeded += 1
            report.outcomes[a.pod_uid] = "succeeded"
            if rng.random() < 0.2:
                # The finalizer after the prover's own leave: done already, not stale.
                expect("finalizer after leave", call(release, a.pod, "succeeded"), False)
        report.partitions += 1
        done.append(a)
        if rng.random() < STALE_SHARE:
            old = rng.choice(done)
            if rng.random() < 0.5:
                expect("late GPU release", call(release_gpu, old), False)
            else:
                expect("late leave", call(leave, old, "succeeded"), False)
            report.stale_sent += 1
    return asdict(report)


def process_main(queue: Any, *args: Any) -> None:
    """Entry point of a writer process: run, then hand the report back through ``queue``."""
    try:
        queue.put(run_writer(*args))
    except Exception as error:  # the parent must learn why, not wait for a report forever
        queue.put({"writer": args[2], "crash": f"{type(error).__name__}: {error}"})
        raise
