"""One writer of the concurrency test, run as a thread or as a spawned process.

A writer repeatedly takes a GPU's lease (the harness's stand-in for the kubelet's GPU
exclusivity), runs one fresh assignment on it (claim, then stages and heartbeats in random
order, then release) and gives the lease back. Now and then an assignment's prover dies
after its claim, without a release, and the next assignment takes the GPU from it (claims
the worker it still holds). While it holds a GPU a writer also sends, on purpose, late
writes about assignments it ran on that GPU before (the stale finalizer): those must be
refused, except a finalizer release about a pod the worker does not remember, which is
nothing to do: one released by its own prover, or one taken over more than PREVIOUS_PODS
takeovers ago. A write that gives up after the conflict budget is tried again (and counted),
as callers are told to. It checks every answer against what the protocol promises and
reports what the test's model needs: per assignment its GPU, order on that GPU, outcome and
stages.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

from kubernetes import config

from kuzk.workers import (
    PREVIOUS_PODS,
    Assignment,
    Gpu,
    WorkerWriteConflict,
    claim,
    heartbeat,
    release,
    stage,
)

STAGES = ("synthesizing", "synth_done", "gpu")
DIED_SHARE = 0.15  # of the turns on a GPU that start with a prover dying before its release
T = TypeVar("T")


class Lock(Protocol):
    def __enter__(self) -> object: ...
    def __exit__(self, *exc: object) -> None: ...


@dataclass
class Ran:
    """One assignment a writer ran: its GPU, its order among that GPU's assignments, the
    worker that took it, the stages it set and how it ended."""

    gpu: int
    order: int
    pod_uid: str
    worker: str
    stages: list[str]
    succeeded: bool


@dataclass
class Report:
    writer: int
    operations: int = 0
    stale_sent: int = 0
    gave_up: int = 0
    ran: list[Ran] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run_writer(
    kubeconfig: str,
    node: str,
    writer: int,
    gpus: list[str],
    leases: list[Lock],
    orders: Any,
    takeovers: Any,
    operations: int,
    seed: int,
) -> dict[str, Any]:
    """Run until ``operations`` writes are done; return the Report as a dict. ``orders`` and
    ``takeovers`` are shared integer arrays, one counter per GPU, advanced under that GPU's
    lease: the assignments run on it, and those a claim took it from."""
    api = config.new_client_from_config(config_file=kubeconfig)
    rng = random.Random(seed)
    report = Report(writer)
    # Per GPU, what this writer ran on it: (takeover number when a claim took the GPU from
    # it, else None; the assignment)
    past: dict[int, list[tuple[int | None, Assignment]]] = {g: [] for g in range(len(gpus))}

    def assignment(order: int) -> Assignment:
        return Assignment(
            "concurrency",
            f"job-{writer}",
            str(uuid.uuid4()),
            "porep-c2",
            rng.randrange(10),
            1 + rng.randrange(3),
            f"pod-{writer}-{order}",
            str(uuid.uuid4()),
        )

    def call(operation: Callable[..., T], *args: Any) -> T:
        # Giving up after the conflict budget means that no write landed: the caller may
        # simply try again, and the model still holds.
        while True:
            try:
                return operation(api, node, *args)
            except WorkerWriteConflict:
                report.gave_up += 1

    def expect(what: str, got: object, want: object) -> None:
        report.operations += 1
        if got != want:
            report.errors.append(f"writer {writer}: {what} answered {got!r}, expected {want!r}")

    while report.operations < operations:
        g = rng.randrange(len(gpus))
        with leases[g]:
            if rng.random() < DIED_SHARE:
                orders[g] += 1
                died = assignment(orders[g])
                report.ran.append(
                    Ran(g, orders[g], died.pod_uid, call(claim, Gpu(gpus[g]), died), [], False))
                report.operations += 1
                takeovers[g] += 1  # by the claim just below
                past[g].append((takeovers[g], died))
            orders[g] += 1
            order = orders[g]
            a = assignment(order)
            worker = call(claim, Gpu(gpus[g]), a)
            report.operations += 1
            steps: list[str] = [rng.choice(STAGES) for _ in range(rng.randrange(4))]
            steps += ["heartbeat"] * rng.randrange(2)
            if past[g] and rng.random() < 0.5:
                steps.append("stale")
            rng.shuffle(steps)
            stages: list[str] = []
            for step in steps:
                if step == "heartbeat":
                    expect("heartbeat", call(heartbeat, a), True)
                elif step == "stale":
                    taken, old = rng.choice(past[g])
                    remembered = taken is not None and takeovers[g] - taken < PREVIOUS_PODS
                    report.stale_sent += _send_stale(call, rng, old, remembered, expect)
                else:
                    expect(f"stage {step}", call(stage, a, step), True)
                    stages.append(step)
            succeeded = rng.random() < 0.75
            expect("release", call(release, a, "succeeded" if succeeded else "failed"), True)
            if rng.random() < 0.2:
                # The operator's finalizer after the prover's own release: done, not stale.
                expect("second release", call(release, a.pod, "succeeded"), False)
        past[g].append((None, a))
        report.ran.append(Ran(g, order, a.pod_uid, worker, stages, succeeded))
    return asdict(report)


def _send_stale(
    call: Any, rng: random.Random, old: Assignment, remembered: bool, expect: Any
) -> int:
    """Send one late write about ``old``; 1 if it must be refused and counted, else 0 (a
    finalizer release about a pod the worker does not remember writes nothing)."""
    kind = rng.choice(("release", "finalizer", "stage", "heartbeat"))
    if kind == "release":
        expect("stale release", call(release, old, "succeeded"), False)
    elif kind == "finalizer":
        expect("stale finalizer release", call(release, old.pod, "succeeded"), False)
        return int(remembered)
    elif kind == "stage":
        expect("stale stage", call(stage, old, rng.choice(STAGES)), False)
    else:
        expect("stale heartbeat", call(heartbeat, old), False)
    return 1


def process_main(queue: Any, *args: Any) -> None:
    """Entry point of a writer process: run, then hand the report back through ``queue``."""
    try:
        queue.put(run_writer(*args))
    except Exception as error:  # the parent must learn why, not wait for a report forever
        queue.put({"writer": args[2], "crash": f"{type(error).__name__}: {error}"})
        raise
