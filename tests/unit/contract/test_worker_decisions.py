"""The pure decisions of the WorkerStatus protocol (kuzk.contract.workerstatus.decisions
``decide_*``) on the lanes model (kuzk.contract.workerstatus): what each write makes of a status,
when it is stale, and what it leaves alone; then random interleavings of every write over two and
three lanes, checked against the independent model (tests/integration/workers/model.py), and the
order in which waiting lanes get the GPU phase."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kuzk.contract import api
from kuzk.contract.workerstatus import gpu_id, parse, worker_status_name
from kuzk.contract.workerstatus.decisions import (
    PREVIOUS_PODS,
    Acquired,
    Assignment,
    Gpu,
    PodRef,
    Released,
    WriteDecision,
    decide_acquire,
    decide_join,
    decide_leave,
    decide_release,
    decide_release_gpu,
    decide_stage,
    decide_sweep,
)
from kuzk.contract.workerstatus.lane_model import LaneStage
from kuzk.contract.workerstatus.lanes import lane_priority
from tests.integration.workers.model import NodeModel, explain, observed

NOW = datetime(2025, 3, 4, 5, 6, 7, 891_234, tzinfo=UTC)
GPU0, GPU1 = Gpu("GPU-0", "NVIDIA H200", 1 << 37), Gpu("GPU-1")
W0, W1 = gpu_id(GPU0.uuid), gpu_id(GPU1.uuid)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def assignment(pod: str, partition: int = 3, attempt: int = 1,
               kind: str = "snap-update", priority_class: str = "") -> Assignment:
    return Assignment("ns", "job", "job-uid", kind, partition, attempt, pod, f"uid-{pod}",
                      priority_class)


A, B, C = assignment("a"), assignment("b", partition=4), assignment("c", partition=5)
WINNING = assignment("w", partition=0, kind="winning-post")


def apply(status: dict[str, Any], decision: WriteDecision[Any]) -> dict[str, Any]:
    return status if decision.status is None else decision.status


def run(*steps: Callable[[dict[str, Any]], WriteDecision[Any]]) -> tuple[dict[str, Any], list[Any]]:
    status: dict[str, Any] = {}
    results = []
    for step in steps:
        decision = step(status)
        status = apply(status, decision)
        results.append(decision.result)
    return status, results


def worker(status: dict[str, Any], worker_id: str = W0) -> dict[str, Any]:
    return next(w for w in status["workers"] if w["id"] == worker_id)


def holder(status: dict[str, Any], worker_id: str = W0) -> str | None:
    return (worker(status, worker_id).get("holder") or {}).get("pod", {}).get("uid")


def stages(status: dict[str, Any], worker_id: str = W0) -> dict[str, str]:
    return {lane["pod"]["name"]: lane["stage"] for lane in worker(status, worker_id)["lanes"]}


def join(who: Assignment, gpu: Gpu = GPU0, t: float = 0) -> Callable[..., WriteDecision[str]]:
    return lambda s: decide_join(s, gpu, who, at(t))


def acquire(who: Assignment, t: float = 0) -> Callable[..., WriteDecision[Acquired]]:
    return lambda s: decide_acquire(s, who, at(t))


def release_gpu(who: Assignment, t: float = 0) -> Callable[..., WriteDecision[bool]]:
    return lambda s: decide_release_gpu(s, who, at(t))


def test_stamps_are_utc_with_milliseconds() -> None:
    status, _ = run(join(A))
    assert worker(status)["lanes"][0]["since"] == "2025-03-04T05:06:07.891Z"
    assert status["updatedAt"] == api.format_time(NOW, millis=True)


def test_join_adds_the_worker_of_a_new_gpu_and_a_lane_starting() -> None:
    status, results = run(join(A), join(B, GPU1), join(C))
    assert results == [W0, W1, W0]
    w0 = worker(status)
    assert w0["gpu"] == {"uuid": "GPU-0", "name": "NVIDIA H200", "memoryBytes": 1 << 37}
    assert (w0["state"], stages(status)) == ("waiting", {"a": "starting", "c": "starting"})
    assert [lane["pod"]["uid"] for lane in w0["lanes"]] == ["uid-a", "uid-c"], "arrival order"
    assert (status["workerCount"], status["lanes"], status["proving"]) == (2, 3, 0)


def test_joining_twice_writes_nothing() -> None:
    status, _ = run(join(A))
    assert decide_join(status, GPU0, A, at(1)).status is None


def test_a_gpus_worker_id_comes_from_its_uuid_and_names_its_worker_status() -> None:
    status = {"workers": [{"id": "W1", "gpu": {"uuid": "GPU-1"}, "state": "idle", "lanes": []}]}
    assert decide_join(status, GPU0, A, NOW).result == W0 == gpu_id("GPU-0")
    assert len(W0) == 8 and W0 != W1 and int(W0, 16) >= 0
    assert worker_status_name("gpu-node-3", "GPU-0") == f"gpu-node-3-{W0}"
    long = worker_status_name("n" * 250 + ".-x", "GPU-0")
    assert len(long) == 253 and long.endswith(f"n-{W0}"), "cut to a DNS subdomain"


def test_a_stage_moves_only_its_lane_and_no_lane_carries_a_heartbeat() -> None:
    status, _ = run(join(A), join(B, t=1))
    status = apply(status, decide_stage(status, A, "synthesizing", at(2)))
    lanes = {lane["pod"]["name"]: lane for lane in worker(status)["lanes"]}
    assert (lanes["a"]["stage"], lanes["a"]["since"]) == ("synthesizing", api.format_time(
        at(2), millis=True))
    assert (lanes["b"]["stage"], lanes["b"]["since"]) == ("starting", api.format_time(
        at(1), millis=True))
    assert not any("heartbeat" in lane for lane in lanes.values())


def test_a_prover_that_synthesizes_at_once_joins_synthesizing_and_its_report_writes_nothing(
        ) -> None:
    status, _ = run(lambda s: decide_join(s, GPU0, A, at(1), stage=LaneStage.SYNTHESIZING))
    assert stages(status) == {"a": "synthesizing"}
    assert decide_stage(status, A, "synthesizing", at(2)).status is None


@pytest.mark.parametrize("stage", [LaneStage.SYNTH_DONE, LaneStage.GPU, LaneStage.COMMITTING])
def test_a_lane_joins_starting_or_synthesizing_only(stage: LaneStage) -> None:
    with pytest.raises(ValueError, match="a lane joins in one of starting, synthesizing"):
        decide_join({}, GPU0, A, NOW, stage=stage)


@pytest.mark.parametrize("stage", ["gpu", "committing", "starting", "proving"])
def test_the_prover_writes_only_synthesis_stages(stage: str) -> None:
    status, _ = run(join(A))
    with pytest.raises(ValueError, match="stage must be one of synthesizing, synth_done"):
        decide_stage(status, A, stage, NOW)


def test_acquire_grants_a_free_gpu_and_the_next_lane_waits() -> None:
    status, results = run(join(A), join(B), acquire(A, 1), acquire(B, 2))
    assert results[2:] == [Acquired.GRANTED, Acquired.WAITING]
    assert (holder(status), worker(status)["state"]) == ("uid-a", "gpu")
    assert stages(status) == {"a": "gpu", "b": "synth_done"}, "a lane waits in synth_done"
    waiting = worker(status)["lanes"][1]
    assert waiting["readyAt"] == api.format_time(at(2), millis=True)
    assert decide_acquire(status, B, at(3)).status is None, "asking again writes nothing"
    assert decide_acquire(status, A, at(3)).status is None, "the holder holds already"
    late = decide_stage(status, A, "synth_done", at(3))
    assert (late.status, late.result) == (None, True), "a late stage report moves nothing back"


def test_release_gpu_lets_the_waiter_in_and_the_lane_commits() -> None:
    status, results = run(join(A), join(B), acquire(A), acquire(B), release_gpu(A, 4),
                          acquire(B, 5))
    assert results[4:] == [True, Acquired.GRANTED]
    assert holder(status) == "uid-b"
    assert stages(status) == {"a": "committing", "b": "gpu"}
    assert "readyAt" not in worker(status)["lanes"][1]


def test_the_seeds_race_on_the_normal_path_is_refused_and_counted() -> None:
    """A finishes its GPU phase, B acquires it, then A's late release of the GPU phase (a
    retried write) arrives: refused and counted, B stays the holder. The finalizer's release
    of A removes A's lane only; a second one finds nothing to do and counts nothing."""
    status, _ = run(join(A), join(B), acquire(A), acquire(B), release_gpu(A), acquire(B))
    late = decide_release_gpu(status, A, at(6))
    assert (late.result, late.stale) == (False, "GPU release")
    status = apply(status, late)
    assert (holder(status), status["staleWritesRejected"]) == ("uid-b", 1)
    assert f"{W0} GPU phase held by b" in late.notes[0]
    status = apply(status, decide_release(status, PodRef("a", "uid-a"), "succeeded", at(7)))
    assert (holder(status), stages(status), worker(status)["completed"]) == (
        "uid-b", {"b": "gpu"}, 1)
    again = decide_release(status, PodRef("a", "uid-a"), "succeeded", at(8))
    assert (again.status, again.result, again.stale) == (None, False, None)
    assert status["staleWritesRejected"] == 1


def test_a_winning_post_lane_ready_later_goes_before_waiting_snap_updates() -> None:
    assert lane_priority("winning-post", "") > lane_priority("window-post", "") > lane_priority(
        "snap-update", "") == lane_priority("porep-c2", "")
    status, results = run(join(A), join(B), join(C), join(WINNING), acquire(A, 1),
                          acquire(B, 2), acquire(C, 3), acquire(WINNING, 4), release_gpu(A, 5),
                          acquire(B, 6), acquire(C, 6), acquire(WINNING, 6))
    assert results[9:] == [Acquired.WAITING, Acquired.WAITING, Acquired.GRANTED]
    assert holder(status) == "uid-w"
    status = apply(status, decide_release_gpu(status, WINNING, at(7)))
    assert decide_acquire(status, C, at(8)).result is Acquired.WAITING, "B was ready first"
    assert decide_acquire(status, B, at(8)).result is Acquired.GRANTED


def test_a_lane_of_a_job_marked_critical_goes_before_its_kinds_lanes_ready_earlier() -> None:
    """Two snap-updates (kuzk-normal by their kind) wait on a busy GPU; a third, of a job whose
    spec.prover.priorityClassName is kuzk-critical, gets ready last and is granted first."""
    urgent = assignment("u", partition=7, priority_class="kuzk-critical")
    status, results = run(join(A), join(B), join(C), join(urgent), acquire(A, 1),
                          acquire(B, 2), acquire(C, 3), acquire(urgent, 4), release_gpu(A, 5),
                          acquire(B, 6), acquire(C, 6), acquire(urgent, 6))
    ranks = {lane["pod"]["name"]: lane["priority"] for lane in worker(status)["lanes"]}
    assert ranks == {"a": 0, "b": 0, "c": 0, "u": 2}
    assert results[9:] == [Acquired.WAITING, Acquired.WAITING, Acquired.GRANTED]
    assert holder(status) == "uid-u"


def test_leave_removes_the_lane_and_the_gpu_phase_it_held() -> None:
    status, _ = run(join(A), join(B), acquire(A), acquire(B))
    status = apply(status, decide_leave(status, A, "failed", at(3)))
    assert (worker(status).get("holder"), stages(status), worker(status)["completed"]) == (
        None, {"b": "synth_done"}, 0)
    assert decide_acquire(status, B, at(4)).result is Acquired.GRANTED
    status = apply(status, decide_leave(status, B, "succeeded", at(5)))
    assert (worker(status)["state"], worker(status)["lanes"], worker(status)["completed"]) == (
        "idle", [], 1)


@pytest.mark.parametrize(
    "write",
    [
        lambda s: decide_stage(s, A, "synth_done", NOW),
        lambda s: decide_acquire(s, A, NOW),
        lambda s: decide_release_gpu(s, A, NOW),
        lambda s: decide_leave(s, A, "succeeded", NOW),
    ],
    ids=["stage", "acquire", "release_gpu", "leave"],
)
def test_the_provers_writes_about_a_lane_that_is_gone_are_stale(write: Any) -> None:
    status, _ = run(join(B))
    decision = write(status)
    assert decision.stale is not None
    assert decision.status["staleWritesRejected"] == 1
    assert stages(decision.status) == {"b": "starting"}, "nothing else changed"


def test_a_finalizer_release_of_a_pod_without_a_lane_writes_nothing() -> None:
    status, _ = run(join(B))
    decision = decide_release(status, PodRef("x", "uid-x"), "lost", NOW)
    assert (decision.status, decision.result, decision.stale) == (None, False, None)
    assert "holds no lane" in decision.notes[0]


def test_sweep_removes_gone_and_ended_lanes_and_frees_their_gpu_phase() -> None:
    """``live`` says None for a pod whose lane is its prover's or finalizer's to end (b
    runs), an outcome for a pod that ended with its finalizer gone (c); a is gone."""
    status, _ = run(join(A), join(B), join(C, GPU1), acquire(A))
    assert decide_sweep(status, {"uid-a": None, "uid-b": None, "uid-c": None},
                        at(100)).status is None, "every pod runs: nothing to write"
    live = {"uid-b": None, "uid-c": "succeeded"}
    swept = decide_sweep(status, live, at(31))
    assert [(r.worker_id, r.pod.uid, r.outcome) for r in swept.result] == [
        (W0, "uid-a", "lost"), (W1, "uid-c", "succeeded")]
    status = apply(status, swept)
    assert (worker(status).get("holder"), worker(status)["previousPodUIDs"]) == (None, ["uid-a"])
    assert worker(status, W1)["completed"] == 1
    stale = decide_release(status, PodRef("a", "uid-a"), "lost", at(32))
    assert stale.stale == "release", "a pod taken from its GPU phase is remembered"


def test_sweep_marks_the_lanes_of_pods_not_live_once_and_unmarks_them_when_live() -> None:
    status, _ = run(join(A), join(B), acquire(A))
    running = {"uid-a": None, "uid-b": None}
    marked = decide_sweep(status, running, at(20), {"uid-a": at(12)})
    assert (marked.result, marked.stale) == ([], None)
    status = apply(status, marked)
    lanes = {lane["pod"]["name"]: lane for lane in worker(status)["lanes"]}
    assert lanes["a"]["notLiveSince"] == api.format_time(at(12), millis=True)
    assert "notLiveSince" not in lanes["b"]
    assert (worker(status)["state"], holder(status)) == ("gpu", "uid-a"), (
        "a hung holder keeps the GPU phase: its pod's end releases it")
    assert decide_sweep(status, running, at(25), {"uid-a": at(12)}).status is None, (
        "a mark already written is not written again")
    assert decide_sweep(status, {"uid-b": None, "uid-a": "failed"}, at(26),
                        {"uid-a": at(12)}).result == [Released(W0, A.pod, "failed")]
    live = apply(status, decide_sweep(status, running, at(30)))
    assert not any("notLiveSince" in lane for lane in worker(live)["lanes"])
    assert observed(live) == observed(status), "marks change no lane, holder or count"


def test_previous_pods_are_newest_first_and_bounded() -> None:
    status: dict[str, Any] = {}
    for k in range(PREVIOUS_PODS + 2):
        who = assignment(f"p{k}")
        status, _ = (apply(status, decide_join(status, GPU0, who, NOW)), None)
        status = apply(status, decide_acquire(status, who, NOW))
        status = apply(status, decide_sweep(status, {}, NOW))
    remembered = worker(status)["previousPodUIDs"]
    assert remembered == [f"uid-p{k}" for k in range(PREVIOUS_PODS + 1, 1, -1)]


# --- more tables ------------------------------------------------------------------------
def test_release_gpu_leaves_the_gpu_without_holder_until_the_next_acquire() -> None:
    status, _ = run(join(A), join(B), acquire(A, 1), acquire(B, 2))
    decision = decide_release_gpu(status, A, at(3))
    status = apply(status, decision)
    w0 = worker(status)
    assert (decision.result, decision.stale) == (True, None)
    assert ("holder" in w0, w0["state"], status["proving"]) == (False, "waiting", 0)
    assert stages(status) == {"a": "committing", "b": "synth_done"}
    assert w0["lanes"][0]["since"] == api.format_time(at(3), millis=True)
    assert "readyAt" in w0["lanes"][1], "B still waits: it is granted when it asks again"
    again = decide_release_gpu(status, A, at(4))
    assert (again.result, again.stale, again.status["staleWritesRejected"]) == (
        False, "GPU release", 1), "a second GPU release of a lane that does not hold it"


def test_acquire_of_a_lane_that_is_gone_answers_gone_and_counts() -> None:
    status, _ = run(join(B))
    decision = decide_acquire(status, A, NOW)
    assert (decision.result, decision.stale) == (Acquired.GONE, "acquire")
    assert decision.status["staleWritesRejected"] == 1


def test_equal_priority_goes_by_ready_time_not_arrival() -> None:
    status, results = run(join(A), join(B), join(C), acquire(A, 1), acquire(C, 2),
                          acquire(B, 3), release_gpu(A, 4), acquire(B, 5), acquire(C, 5))
    assert results[-2:] == [Acquired.WAITING, Acquired.GRANTED], "C was ready before B"
    assert holder(status) == "uid-c"


def test_a_lane_ready_first_is_granted_even_if_it_asks_after_the_gpu_is_free() -> None:
    """B waits; A releases the GPU phase; C, ready later, asks before B asks again: C waits,
    B is granted when it asks (its watch sees the GPU free)."""
    status, results = run(join(A), join(B), join(C), acquire(A, 1), acquire(B, 2),
                          release_gpu(A, 3), acquire(C, 4), acquire(B, 5))
    assert results[-2:] == [Acquired.WAITING, Acquired.GRANTED]
    assert (holder(status), stages(status)) == (
        "uid-b", {"a": "committing", "b": "gpu", "c": "synth_done"})


def test_completed_counts_successes_only_whoever_releases() -> None:
    d = assignment("d", partition=6)
    status, _ = run(join(A), join(B), join(C), join(d), acquire(A))
    status = apply(status, decide_leave(status, A, "succeeded", at(1)))  # the prover: +1
    status = apply(status, decide_release(status, B.pod, "failed", at(2)))  # finalizer: 0
    status = apply(status, decide_release(status, C.pod, "succeeded", at(3)))  # finalizer: +1
    swept = decide_sweep(status, {"uid-d": "succeeded"}, at(40))  # ended, no finalizer: +1
    status = apply(status, swept)
    w0 = worker(status)
    assert (w0["completed"], w0["lanes"], w0["state"]) == (3, [], "idle")
    assert "previousPodUIDs" not in w0, "only a holder taken by the sweep is remembered"


# --- interleavings against the independent model ---------------------------------------
BASE = datetime(2025, 3, 4, 5, 6, 7, 891_000, tzinfo=UTC)
GPUS = [Gpu("GPU-0"), Gpu("GPU-1")]
# "advance" makes a replica's current pod do the next thing of its life (LIFE, the prover's
# order, with no write through the GPU phase, which takes a while; an acquire answered
# "waiting" is asked again); the rest, in any order, make the interleavings: any write of
# either of a replica's last two pods at any time, the finalizer, the sweep, pods deleted,
# ending, or hanging (not live) and live again, time passing.
LIFE = ("join", "synthesizing", "synth_done", "acquire", "idle", "release_gpu", "leave", "next")
OPS = (*["advance"] * 12, "join", "synth_done", "acquire", "release_gpu", "leave",
       "finalizer", "finalizer", "sweep", "sweep", "die", "end", "hang", "idle", "next")
# Which transitions (model.explain) each write may make when it writes.
KINDS = {
    "join": {"join"},
    "synthesizing": {"stage", "stale"},
    "synth_done": {"stage", "stale"},
    "acquire": {"acquire-wait", "acquire-grant", "stale"},
    "release_gpu": {"release_gpu", "stale"},
    "leave": {"release", "stale"},
    "finalizer": {"release", "stale"},
    "sweep": {"release", "sweep", "mark"},
}
Step = tuple[str, int, bool, bool]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], list[Step]]:
    """Two or three replicas (lanes) of one GPU, the second sometimes on a second GPU; each
    replica runs pods one after another ("next": the next partition's pod, or a retried
    attempt of the same partition), the last being a winning-post replica. A step is
    (operation, replica, flag: outcome succeeded or failed, late: about the replica's
    previous pod instead of its current one, the seed's late write)."""
    count = draw(st.sampled_from([2, 3, 3]))
    gpu_of = [0, draw(st.sampled_from([0, 0, 0, 1])), 0][:count]
    steps = draw(st.lists(
        st.tuples(st.sampled_from(OPS), st.integers(0, count - 1), st.booleans(),
                  st.integers(0, 3).map(lambda n: n == 0)),
        min_size=30, max_size=80))
    return gpu_of, steps


def _lanes(status: dict[str, Any]) -> dict[str, datetime | None]:
    """Each lane's pod UID and since when it is marked not live."""
    return {lane.pod.uid: lane.not_live_since
            for w in parse(status).workers for lane in w.lanes}


def _decide(op: str, who: Assignment, gpu: Gpu, flag: bool, status: dict[str, Any],
            live: dict[str, Any], now: datetime,
            hung: dict[str, datetime]) -> WriteDecision[Any]:
    outcome = "succeeded" if flag else "failed"
    if op == "join":
        return decide_join(status, gpu, who, now)
    if op in ("synthesizing", "synth_done"):
        return decide_stage(status, who, op, now)
    if op == "acquire":
        return decide_acquire(status, who, now)
    if op == "release_gpu":
        return decide_release_gpu(status, who, now)
    if op == "leave":
        return decide_leave(status, who, outcome, now)
    if op == "finalizer":
        return decide_release(status, who.pod, outcome, now)
    assert op == "sweep"
    return decide_sweep(status, live, now, hung)


def _play(op: str, who: Assignment, gpu: Gpu, flag: bool, node: NodeModel,
          live: dict[str, Any], now: datetime, names: dict[str, str]) -> Any:
    """The same write on the model; its answer in the decision's terms."""
    uid = who.pod_uid
    if op == "join":
        return node.join(gpu.uuid, uid, who.proof_kind, now)
    if op in ("synthesizing", "synth_done"):
        return node.stage(uid, op, now)
    if op == "acquire":
        return Acquired(node.acquire(uid, now))
    if op == "release_gpu":
        return node.release_gpu(uid, now)
    if op == "leave":
        return node.leave(uid, flag)
    if op == "finalizer":
        return node.finalizer(uid, flag)
    swept = node.sweep_live(live)
    return [Released(w, PodRef(names[u], u), o) for w, u, o in swept]


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_random_interleavings_follow_the_model_and_lose_no_lane(
    scenario: tuple[list[int], list[Step]],
) -> None:
    """Joins, stage reports, acquires, GPU releases, leaves, finalizer releases and sweeps in
    any order over two or three replicas of a GPU, each running pod after pod, late writes
    about a replica's previous pod, pods deleted, ended or hanging at random and time
    passing. After every write: each answer and the whole object
    are what the independent model says (so staleWritesRejected grows exactly by the writes
    the model finds stale, and never goes down), the counts match, at most one holder per GPU
    and it is one of its lanes, a lane disappears only by its own leave, its finalizer
    release, or a sweep that saw its pod gone or ended, no holder's pod is gone after a
    sweep, after a sweep exactly the lanes of hanging pods are marked not live, the
    transition is one model.explain names, and the stored form reads back unchanged."""
    gpu_of, steps = scenario
    kinds = ["snap-update"] * (len(gpu_of) - 1) + ["winning-post"]
    pods = [[assignment(f"r{k}p0", partition=k, kind=kinds[k])] for k in range(len(gpu_of))]
    names = {a.pod_uid: a.pod_name for replica in pods for a in replica}
    status: dict[str, Any] = {}
    node = NodeModel()
    gone: set[str] = set()
    ended: dict[str, str] = {}
    hung: dict[str, datetime] = {}
    now = BASE
    phase = [0] * len(pods)
    for step, k, flag, late in steps:
        op = LIFE[phase[k]] if step == "advance" else step
        if step == "advance":
            flag, late = True, False
            phase[k] = (phase[k] + 1) % len(LIFE)
        now += timedelta(seconds=16 if op == "idle" else 1)
        replica = pods[k]
        who, gpu = replica[-2] if late and len(replica) > 1 else replica[-1], GPUS[gpu_of[k]]
        if op == "next":
            # The next pod on this replica: the next partition, or (flag) a retry of this one.
            n, last = len(replica), replica[-1]
            replica.append(assignment(f"r{k}p{n}", partition=last.partition + (not flag),
                                      attempt=last.attempt + flag, kind=kinds[k]))
            names[replica[-1].pod_uid] = replica[-1].pod_name
            continue
        if op == "die":
            gone.add(who.pod_uid)
            continue
        if op == "end":
            ended.setdefault(who.pod_uid, "succeeded" if flag else "failed")
            continue
        if op == "hang":
            # flag: its readiness probe failed (a second before); else it is live again
            if flag:
                hung.setdefault(who.pod_uid, now - timedelta(seconds=1))
            else:
                hung.pop(who.pod_uid, None)
            continue
        if op == "idle":
            continue
        live = {uid: ended.get(uid) for uid in names if uid not in gone}
        before = status
        not_live = {uid: t for uid, t in hung.items() if uid in live and live[uid] is None}
        decision = _decide(op, who, gpu, flag, status, live, now, not_live)
        answer = _play(op, who, gpu, flag, node, live, now, names)
        status = apply(status, decision)
        if step == "advance" and answer is Acquired.WAITING:
            phase[k] -= 1  # it waits, and asks again
        elif step == "advance" and decision.stale is not None:
            phase[k] = LIFE.index("next")  # its lane is gone: the prover exits
        where = f"{op} of {who.pod_name}"
        assert decision.result == answer, where
        assert observed(status) == node.expected(), where
        stale_before = before.get("staleWritesRejected", 0)
        assert status.get("staleWritesRejected", 0) == stale_before + (
            decision.stale is not None), where

        lanes_before, lanes_after = _lanes(before), _lanes(status)
        removed = set(lanes_before) - set(lanes_after)
        if op in ("leave", "finalizer"):
            assert removed <= {who.pod_uid}, where
        elif op == "sweep":
            allowed = {uid for uid in lanes_before if uid in gone or uid in ended}
            assert removed == allowed, where
            assert not set(lanes_after) & gone, "a lane of a gone pod after the sweep"
            assert lanes_after == {uid: not_live.get(uid) for uid in lanes_after}, where
        else:
            assert not removed, f"{where} lost a lane"

        if decision.status is not None:
            transition = explain(before, status)
            assert transition is not None and transition.kind in KINDS[op], (where, transition)
            model = parse(status)
            for w in model.workers:
                assert w.holder is None or w.lane(w.holder.pod.uid) is not None, where
            stored = {k: v for k, v in status.items() if k != "updatedAt"}
            again = model.as_status(now + timedelta(seconds=1))
            assert {k: v for k, v in again.items() if k != "updatedAt"} == stored, where


KINDS_BY_PRIORITY = ("snap-update", "porep-c2", "window-post", "winning-post")
# A job's resolved PriorityClass: none (a pod of an earlier release), kuzk's, or another.
CLASSES = ("", "kuzk-normal", "kuzk-high", "kuzk-critical", "system-node-critical")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS_BY_PRIORITY), st.sampled_from(CLASSES)),
                min_size=2, max_size=5), st.data())
def test_the_gpu_phase_goes_by_priority_then_ready_time(lanes_of: list[tuple[str, str]],
                                                        data: Any) -> None:
    """A holder and waiting lanes of random kinds and jobs' PriorityClasses that got ready in
    a random order; each time the GPU phase is given up, the waiting lanes ask again in a
    random order: exactly one is granted, the one with the highest priority that got ready
    first (as the model says too), and every lane gets it once."""
    first = assignment("h", partition=99)
    lanes = [assignment(f"q{k}", partition=k, kind=kind, priority_class=cls)
             for k, (kind, cls) in enumerate(lanes_of)]
    status, _ = run(*(join(x) for x in [first, *lanes]), acquire(first))
    node = NodeModel()
    for x in [first, *lanes]:
        node.join(GPU0.uuid, x.pod_uid, x.proof_kind, NOW, x.priority_class)
    node.acquire(first.pod_uid, NOW)
    t = 0
    ready = data.draw(st.permutations(lanes), label="ready order")
    for x in ready:
        t += 1
        decision = decide_acquire(status, x, at(t))
        assert decision.result is Acquired.WAITING
        assert node.acquire(x.pod_uid, at(t)) == "waiting"
        status = apply(status, decision)
    current, waiting = first, list(lanes)
    while waiting:
        t += 1
        status = apply(status, decide_release_gpu(status, current, at(t)))
        node.release_gpu(current.pod_uid, at(t))
        granted = []
        for x in data.draw(st.permutations(waiting), label="asking order"):
            t += 1
            decision = decide_acquire(status, x, at(t))
            assert decision.result is Acquired(node.acquire(x.pod_uid, at(t))), x.pod_name
            status = apply(status, decision)
            if decision.result is Acquired.GRANTED:
                granted.append(x)
        want = min(waiting, key=lambda x: (-lane_priority(x.proof_kind, x.priority_class),
                                           ready.index(x)))
        assert granted == [want], ([x.pod_name for x in granted], want.pod_name)
        assert holder(status) == want.pod_uid
        current = want
        waiting.remove(want)
    assert observed(status) == node.expected()
