"""Which events are worth a sync: a lane's liveness mark or stage is not, an assignment is;
a pod's change of liveness is worth a sweep of its node's WorkerStatuses, its other changes
are not; and the peering rule that pauses a replica (Kopf's, applied to the same peering
object)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk.contract import api
from kuzk.contract.workerstatus.lanes import LaneView, lane_views
from kuzk.operator.caches import Caches, Index, pod_keys, worker_status_keys
from kuzk.operator.controller import Controller
from kuzk.operator.decide.actions import CreatePod
from kuzk.operator.decide.observe import Claim, worker_claims
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.peering import outranked
from kuzk.operator.runtime import JobState, Runtime, changed_jobs

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def ws(*workers: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"nodeName": "n1"}, "status": {"workers": list(workers)}}


def proving(job: str, pod: str, stage: str = "starting", live: bool = True) -> dict[str, Any]:
    """A worker with one lane of ``job`` on ``pod`` in ``stage``."""
    lane: dict[str, Any] = {"job": {"namespace": "ns", "name": job},
                            "pod": {"name": pod, "uid": pod}, "stage": stage}
    if not live:
        lane["notLiveSince"] = "2026-12-02T12:00:01Z"
    return {"id": "W0", "lanes": [lane]}


def test_the_operator_reads_one_view_of_a_lane() -> None:
    """The sync's claims and the runtime's event filter read a lane the same way: its node,
    worker and job, and the partition state its stage shows as."""
    status = ws(proving("a", "p1", "starting"), proving("b", "p2", "committing"))
    assert lane_views(status) == {"p1": LaneView("n1", "W0", api.SCHEDULED, "ns", "a"),
                                  "p2": LaneView("n1", "W0", api.COMMITTING, "ns", "b")}
    assert worker_claims([status, ws()]) == {"p1": Claim("n1", "W0", api.SCHEDULED),
                                             "p2": Claim("n1", "W0", api.COMMITTING)}


def test_a_versions_lanes_are_read_once_and_a_new_version_again() -> None:
    """The index, the event filter and each sync ask for the same version's lanes."""
    first = ws(proving("a", "p1", "synthesizing"))
    first["metadata"] = {"name": "n1-0", "resourceVersion": "7"}
    views = lane_views(first)
    assert lane_views({**first}) is views
    second = ws(proving("a", "p1", "gpu"))
    second["metadata"] = {"name": "n1-0", "resourceVersion": "8"}
    assert lane_views(second)["p1"].state == api.GPU
    assert lane_views(first)["p1"].state == api.SYNTHESIZING, "an older version read again"


def test_a_liveness_mark_syncs_no_job() -> None:
    before = lane_views(ws(proving("a", "p1", "gpu")))
    after = lane_views(ws(proving("a", "p1", "gpu", live=False)))
    assert changed_jobs(before, after) == set()


def pod(ready: str, *, phase: str = "Running", uid: str = "p1") -> dict[str, Any]:
    """A partition pod on n1 whose container started at 12:00:00 and whose Ready condition
    is ``ready`` since 12:00:30."""
    return {"metadata": {"namespace": "ns", "name": uid, "uid": uid},
            "spec": {"nodeName": "n1"},
            "status": {"phase": phase,
                       "conditions": [{"type": "Ready", "status": ready,
                                       "lastTransitionTime": "2026-12-02T12:00:30Z"}],
                       "containerStatuses": [{"name": "prover", "state": {
                           "running": {"startedAt": "2026-12-02T12:00:00Z"}}}]}}


async def test_a_pod_that_stops_or_starts_again_being_live_sweeps_its_nodes_gpus_soon() -> None:
    controller = Controller(client.ApiClient(), PodSettings(image="unused"), lambda *_: None)
    names = ("n1-0", "n1-1", "n2-0")
    gpus = Index(worker_status_keys)
    for name, node in zip(names, ("n1", "n1", "n2"), strict=True):
        gpus.put(name, {"metadata": {"name": name}, "spec": {"nodeName": node}})
    runtime = Runtime(controller, Caches({}, {}, gpus))

    def swept() -> list[str]:
        return [name for name in names if runtime.queue.scheduled(("sweep", name))]

    runtime.on_pod("ADDED", pod("True"))
    assert swept() == [], "live, as before: nothing to mark"
    runtime.on_pod("MODIFIED", pod("False"))
    assert swept() == ["n1-0", "n1-1"], "the WorkerStatuses of the pod's node"
    for name in names:
        runtime.queue.forget(("sweep", name))
    runtime.on_pod("MODIFIED", pod("False"))
    assert swept() == [], "still not live: marked already"
    runtime.on_pod("MODIFIED", pod("True"))
    assert swept() == ["n1-0", "n1-1"], "live again: the mark goes"
    for name in names:
        runtime.queue.forget(("sweep", name))
    runtime.on_pod("MODIFIED", pod("False", phase="Failed"))
    assert swept() == [], "an ended pod is its finalizer's"
    await runtime.close()


def test_a_pod_is_not_live_once_its_ready_condition_turned_false_after_its_start() -> None:
    assert api.pod_not_live_since(pod("False")) == datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC)
    assert api.pod_not_live_since(pod("True")) is None
    assert api.pod_not_live_since(pod("False", phase="Failed")) is None
    starting = pod("False")
    starting["status"]["conditions"][0]["lastTransitionTime"] = "2026-12-02T12:00:00Z"
    assert api.pod_not_live_since(starting) is None, "not ready yet at its start: not hung"


def test_a_stage_change_alone_syncs_no_job() -> None:
    """The job's status takes a lane's stage with its next write (STAGE_SECONDS)."""
    before = lane_views(ws(proving("a", "p1", "synthesizing")))
    after = lane_views(ws(proving("a", "p1", "gpu")))
    assert changed_jobs(before, after) == set()


def test_a_new_assignment_syncs_the_old_and_the_new_job() -> None:
    before = lane_views(ws(proving("a", "p1", "gpu")))
    after = lane_views(ws(proving("b", "p2")))
    assert changed_jobs(before, after) == {("ns", "a"), ("ns", "b")}


def test_a_release_syncs_the_job_and_a_new_object_syncs_what_it_names() -> None:
    idle = {"id": "W0", "lanes": []}
    assert changed_jobs(lane_views(ws(proving("a", "p1", "gpu"))), lane_views(ws(idle))) == {
        ("ns", "a")
    }
    assert changed_jobs({}, lane_views(ws(proving("a", "p1")))) == {("ns", "a")}
    assert changed_jobs({}, lane_views(ws(idle))) == set()


def test_the_written_job_stands_in_until_the_watch_catches_up() -> None:
    state = JobState()
    old = {"metadata": {"name": "j", "resourceVersion": "5"}}
    new = {"metadata": {"name": "j", "resourceVersion": "6"}, "status": {"phase": "Running"}}
    state.written = (("5",), new)
    assert state.job(old) is new
    assert state.job(new) is new
    assert state.written is None
    assert state.empty


def test_created_pods_stand_in_until_the_watch_delivers_them() -> None:
    state = JobState()
    pod = {"metadata": {"name": "j-p0-a1"}}
    state.created["j-p0-a1"] = pod
    assert state.pods([]) == [pod]
    assert state.pods([pod]) == [pod]
    assert state.empty


def test_a_dropped_finalizer_shows_until_the_watch_delivers_the_pod() -> None:
    """A sync that comes before the watch's event must not release the pod again (each
    repeat cost a patch answered 422 and a GET)."""
    state = JobState()
    held = {"metadata": {"name": "p", "resourceVersion": "7", "finalizers": ["kuzk.io/x"]}}
    dropped = {"metadata": {"name": "p", "resourceVersion": "8", "finalizers": []}}
    state.released["p"] = ("7", dropped)
    assert state.pods([held]) == [dropped]
    assert not state.empty
    later = {"metadata": {"name": "p", "resourceVersion": "9"}}
    assert state.pods([later]) == [later]
    assert state.empty
    state.released["p"] = ("7", dropped)
    assert state.pods([]) == []
    assert state.empty


async def test_the_echo_of_its_own_status_write_syncs_no_job() -> None:
    """Every status write comes back as a job event; only someone else's change syncs."""
    job = {"metadata": {"namespace": "ns", "name": "j", "resourceVersion": "5"}}
    controller = Controller(client.ApiClient(), PodSettings(image="unused"), lambda *_: None)
    runtime = Runtime(controller, Caches({("ns", "j"): [job]}, {}, {}))
    after = {"metadata": {"namespace": "ns", "name": "j", "resourceVersion": "6"}}
    runtime.jobs[("ns", "j")] = JobState(written=(("5",), after))
    runtime.on_job("MODIFIED", "ns", "j", "uid", "6")
    assert not runtime.queue.scheduled(("job", "ns", "j"))
    runtime.on_job("MODIFIED", "ns", "j", "uid", "7")
    assert runtime.queue.scheduled(("job", "ns", "j"))
    await runtime.close()


async def test_the_pods_a_failed_sync_created_stand_in_for_its_retry() -> None:
    """A sync that fails after some of its creates went through (a 429 on the next call)
    hands them to the job's state, so its retry does not send them again."""
    job = {"metadata": {"namespace": "ns", "name": "j", "resourceVersion": "5", "uid": "u"}}
    made = {"metadata": {"namespace": "ns", "name": "j-p0-a1"}}

    class FailingAfterACreate(Controller):
        def _create(self, ns: str, action: CreatePod) -> dict[str, Any]:
            return made

        def _sync(self, job: Any, pods: Any, statuses: Any, moment: Any, creates: Any) -> Any:
            creates.submit("ns", CreatePod(manifest={"metadata": {"name": "j-p0-a1"}},
                                           partition=0, attempt=1))
            raise ApiException(status=429, reason="Too Many Requests")

    controller = FailingAfterACreate(client.ApiClient(), PodSettings(image="unused"),
                                     lambda *_: None)
    runtime = Runtime(controller, Caches({("ns", "j"): [job]}, Index(pod_keys), {}))
    with pytest.raises(ApiException) as raised:
        await runtime._sync_job("ns", "j")
    assert raised.value.status == 429, "the retry logs the API server's answer"
    assert runtime.jobs[("ns", "j")].pods([]) == [made]
    await runtime.close()


def peer(priority: int, seconds_ago: float = 0, lifetime: int = 15) -> dict[str, Any]:
    seen = (NOW - timedelta(seconds=seconds_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": seen}


def test_a_live_higher_or_equal_peer_pauses_until_its_record_expires() -> None:
    status = {"me": peer(10), "other": peer(20, seconds_ago=5)}
    paused, wait = outranked(status, "me", 10, NOW)
    assert paused
    assert wait == 10
    assert outranked({"me": peer(10), "twin": peer(10)}, "me", 10, NOW)[0]


def test_lower_dead_or_own_records_do_not_pause() -> None:
    status = {"me": peer(10), "low": peer(5), "dead": peer(99, seconds_ago=20)}
    assert outranked(status, "me", 10, NOW) == (False, None)
    assert outranked({}, "me", 10, NOW) == (False, None)
