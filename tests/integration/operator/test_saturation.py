"""Overload slows proofs and fails none: a ProofJob whose provers run beside busy loops on
every core of the machine, twice over, for the whole of its run succeeds, each partition in
its first attempt, with no prover killed by its probes (the kubelet's ``Killing`` Event) and
no attempt retried. The provers run long enough under the load for their liveness probes to
ask (they start 20 s after a container: ``kuzk.operator.decide.pods.LIVE_AFTER_S``).

It saturates the whole test machine for about 40 s, the other workers' tests too: it runs
on the long tests' worker (tests/conftest.py), whose tests wait more than they compute.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kuzk.operator.decide.pods import LIVE_AFTER_S
from testenv.cluster import Cluster
from tests.integration.operator.conftest import apply_job, proofjob, wait_job
from tests.integration.operator.test_worker_truth import REAL_PROVER

pytestmark = pytest.mark.worker("long")


@pytest.fixture
def busy_loops() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two busy loops per core, at the provers' own priority, until the test ends."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(2 * (os.cpu_count() or 1))]
    try:
        yield loops
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_a_job_beside_busy_loops_on_every_core_succeeds_with_no_attempt_killed(
        cluster: Cluster, namespace: str, nodes, run_operator,
        busy_loops: list[subprocess.Popen[bytes]]) -> None:
    nodes(1, gpus=2, replicas=2)
    run_operator(*REAL_PROVER)
    started = time.monotonic()
    apply_job(cluster, namespace, proofjob("busy", partitions=4, circuitLog2=23,
                                           activeDeadlineSeconds=600))
    job = wait_job(cluster, namespace, "busy", "Succeeded", timeout=400)
    ran = time.monotonic() - started
    assert all(loop.poll() is None for loop in busy_loops), "the machine stayed saturated"
    # Its liveness probes asked (10 s apart, from LIVE_AFTER_S) while it ran.
    assert ran > LIVE_AFTER_S + 10, f"the job ran {ran:.0f} s: its liveness probes never asked"
    parts = job["status"]["partitions"]
    assert [(p["state"], p["attempt"]) for p in parts] == [("done", 1)] * 4, parts
    assert job["status"].get("retries", 0) == 0

    def killings() -> list[str]:
        events = cluster.core.list_namespaced_event(namespace).items
        return [f"{e.involved_object.name}: {e.message}" for e in events
                if e.reason == "Killing"]

    # The kubelet posts its Killing Event as it kills: none, and the pods all ended by
    # themselves (Succeeded), none by a signal.
    assert killings() == []
    pods = cluster.core.list_namespaced_pod(namespace).items
    assert pods and {p.status.phase for p in pods} == {"Succeeded"}, [
        (p.metadata.name, p.status.phase) for p in pods]
