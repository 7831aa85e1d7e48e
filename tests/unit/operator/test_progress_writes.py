"""Which status changes a sync may hold back (``progress_only``): how far live partitions got
(scheduled, a prover's stage, with their node, worker and start time) may wait; a partition
done, failed or retried, the phase and the counts may not. The runtime writes what was held
back at most ``PROGRESS_SECONDS`` later, or with the next change that matters."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from kuzk import crds
from kuzk.controller import Controller, Synced, progress_only
from kuzk.runtime import PROGRESS_SECONDS, Caches, Runtime
from tests.unit.operator.objects import SETTINGS, Cluster, Make


def step(cluster: Cluster, change: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job's status before and after ``change`` and one reconcile."""
    before = copy.deepcopy(cluster.job["status"])
    change()
    after = cluster.decide().status
    cluster.reconcile()
    return before, after


def test_a_partition_getting_further_is_progress_only() -> None:
    cluster = Cluster(Make.job(partitions=2), nodes={"n1": 2})
    cluster.reconcile()
    first = cluster.partition(0)["pod"]
    cluster.schedule()
    cluster.reconcile()  # both scheduled: the phase becomes Running, which matters
    cluster.tick()
    assert progress_only(*step(cluster, lambda: cluster.start(first)))
    assert cluster.partition(0)["state"] == "synthesizing"
    assert progress_only(*step(cluster, lambda: cluster.stage(first, "gpu")))
    assert cluster.partition(0)["state"] == "gpu"


def test_what_a_reader_must_not_miss_is_never_held() -> None:
    cluster = Cluster(Make.job(partitions=2), nodes={"n1": 2})
    assert not progress_only({}, cluster.decide().status)  # the first status of a job
    cluster.reconcile()
    assert not progress_only(*step(cluster, cluster.schedule))  # Pending to Running
    first, second = cluster.partition(0)["pod"], cluster.partition(1)["pod"]
    cluster.start(first)
    cluster.start(second)
    cluster.reconcile()
    assert not progress_only(*step(cluster, lambda: cluster.finish(first)))  # done
    assert not progress_only(*step(cluster, lambda: cluster.preempt(second)))  # retried
    status = cluster.job["status"]
    assert not progress_only(status, status)  # nothing changed: nothing to write


class FakeController:
    """Holds progress when asked, as ``Controller.sync`` does for a progress-only status."""

    def __init__(self) -> None:
        self.asked: list[bool] = []

    def sync(self, job: Any, pods: Any, statuses: Any, *, hold_progress: bool) -> Synced:
        self.asked.append(hold_progress)
        return Synced(10.0, held=hold_progress)


async def test_held_progress_is_written_within_its_pace() -> None:
    job = {"metadata": {"namespace": "ns", "name": "j", "resourceVersion": "5", "uid": "u"}}
    fake = FakeController()
    runtime = Runtime(controller=fake, caches=Caches({("ns", "j"): [job]}, {}, {}))  # type: ignore[arg-type]
    first = await runtime._sync_job("ns", "j")
    assert fake.asked == [True]
    assert first is not None and first <= PROGRESS_SECONDS  # not the 10 s resync
    state = runtime.jobs[("ns", "j")]
    assert state.progress_due is not None
    again = await runtime._sync_job("ns", "j")  # a sync before it is due holds it still
    assert fake.asked == [True, True] and again is not None and again <= first
    state.progress_due -= PROGRESS_SECONDS  # due now
    assert await runtime._sync_job("ns", "j") == 10.0
    assert fake.asked == [True, True, False]
    assert ("ns", "j") not in runtime.jobs  # nothing held: no per-job state is kept
    await runtime.close()


def test_the_controller_holds_only_when_asked() -> None:
    """``Controller.sync`` skips the write of a progress-only status when asked to hold."""
    cluster = Cluster(Make.job(partitions=1), nodes={"n1": 1})
    cluster.reconcile()
    cluster.schedule()
    cluster.reconcile()
    cluster.start(cluster.partition(0)["pod"])
    job, pods, workers = cluster.inputs()
    writes: list[Any] = []
    controller = Controller(client.ApiClient(), SETTINGS, lambda job, event: None)
    # No API server here: the status write is recorded, nothing else is sent.
    controller._write_status = lambda j, s: writes.append(s)  # type: ignore[method-assign]
    controller._apply = lambda *a: ([], [])  # type: ignore[method-assign]
    held = controller.sync(job, pods, workers, cluster.now, hold_progress=True)
    assert held.held and writes == []
    written = controller.sync(job, pods, workers, cluster.now)
    assert not written.held and writes[0]["partitions"][0]["state"] == "synthesizing"


def test_the_crd_says_how_late_a_stage_may_show() -> None:
    """``kubectl explain proofjob.status.partitions.state`` names the pace the runtime keeps."""
    job = next(c for c in crds.all_crds() if c["spec"]["names"]["kind"] == "ProofJob")
    schema = job["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    state = schema["properties"]["status"]["properties"]["partitions"]["items"]["properties"][
        "state"]
    assert f"at most {PROGRESS_SECONDS:g} s late" in state["description"]
