"""bench/fleet_scale.py's arithmetic (fleet_measure.py, fleet_projection.py), without a
cluster: whose each audited request is, what each WorkerStatus write moved, the figures per
partition attempt, the medians of rounds, where the operator's watch events are counted, and
the projection to a fleet."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:  # the benchmark's modules import each other by name
    sys.path.insert(0, str(BENCH_DIR))

from fleet_measure import (  # noqa: E402
    BENCH,
    JOB,
    KUBELET,
    KUZK,
    NO_MOVE,
    OPERATOR,
    OPERATOR_WATCH_EVENTS,
    PROVERS,
    SCHEDULER,
    UNSEEN,
    Calls,
    Cost,
    Moves,
    Phase,
    Writers,
    Written,
    audit_policy,
    by_prefix,
    component,
    delta,
    kuzk_own,
    lane_moves,
    medians,
    on_workerstatus,
    operator_events,
    parse_metrics,
    system_side,
    total,
    updates,
    write_kinds,
)
from fleet_projection import (  # noqa: E402
    FLEET,
    PEAK,
    Fleet,
    projection,
)
from fleet_report import _by_component, _rounds, _shards  # noqa: E402

OPERATOR_USER = "system:serviceaccount:kuzk-bench:bench-kuzk-operator"
PROVER_USER = "system:serviceaccount:kuzk-bench:kuzk-prover"
KUBELET_USER = "system:serviceaccount:kuzk-bench:bench-kubelet"
USERS = {OPERATOR_USER: OPERATOR, PROVER_USER: PROVERS, KUBELET_USER: KUBELET}
ADMIN = "kuzk-admin"


def event(verb: str, resource: str, user: str, *, code: int = 200, agent: str = "",
          subresource: str | None = None, stage: str = "ResponseComplete",
          name: str = "node-a", version: str = "") -> dict[str, Any]:
    ref = ({"resource": resource, "name": name}
           | ({"subresource": subresource} if subresource else {})
           | ({"resourceVersion": version} if version else {}))
    return {"verb": verb, "stage": stage, "user": {"username": user}, "userAgent": agent,
            "objectRef": ref, "responseStatus": {"code": code}}


@pytest.mark.parametrize(("user", "agent", "who"), [
    (OPERATOR_USER, "kuzk", OPERATOR),
    (PROVER_USER, "OpenAPI-Generator/x/python", PROVERS),
    (KUBELET_USER, "OpenAPI-Generator/x/python", KUBELET),
    (ADMIN, "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0ab1c2d/job-controller",
     "kcm/job-controller"),
    (ADMIN, "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0ab1c2d/"
            "generic-garbage-collector", "kcm/generic-garbage-collector"),
    (ADMIN, "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/0ab1c2d/scheduler", SCHEDULER),
    ("system:serviceaccount:kube-system:job-controller", "", "kcm/job-controller"),
    (ADMIN, "OpenAPI-Generator/x/python", BENCH),
    ("someone-else", "kubectl", "someone-else"),
])
def test_each_request_is_told_by_its_user_or_its_agent(user: str, agent: str, who: str) -> None:
    assert component(event("create", "pods", user, agent=agent), USERS, ADMIN) == who


def test_calls_count_writes_their_conflicts_and_refusals_by_component_and_call() -> None:
    calls = Calls()
    for e in (event("update", "workerstatuses", PROVER_USER, subresource="status"),
              event("update", "workerstatuses", PROVER_USER, subresource="status", code=409),
              event("patch", "pods", KUBELET_USER, subresource="status", code=429),
              event("create", "pods", OPERATOR_USER, code=409),
              event("watch", "pods", OPERATOR_USER, stage="ResponseStarted"),
              # a watch's end and a write's start are the same request again
              event("watch", "pods", OPERATOR_USER),
              event("create", "pods", OPERATOR_USER, stage="ResponseStarted")):
        calls.add_event(e, component(e, USERS, ADMIN))
    assert calls.calls == Counter({(PROVERS, "update workerstatuses/status"): 2,
                                   (KUBELET, "patch pods/status"): 1,
                                   (OPERATOR, "create pods"): 1,
                                   (OPERATOR, "watch pods"): 1})
    assert calls.conflicts == Counter({(PROVERS, "update workerstatuses/status"): 1,
                                       (OPERATOR, "create pods"): 1})
    # turned away by the API server's priority and fairness: a request, neither a write nor
    # a conflict
    assert calls.throttled == Counter({(KUBELET, "patch pods/status"): 1})
    # the successful WorkerStatus write, with the version it was made on
    assert calls.written == [Written(PROVERS, "update workerstatuses/status", "node-a", "")]
    mine = Calls()
    mine.add(calls, OPERATOR)
    assert mine.of(OPERATOR) == Counter({"create pods": 1, "watch pods": 1})
    assert mine.conflicts == Counter({(OPERATOR, "create pods"): 1})
    assert not mine.of(PROVERS) and not mine.throttled
    theirs = Calls()
    theirs.add(calls, KUBELET)
    assert theirs.throttled == calls.throttled


def test_the_audit_policy_records_every_write_and_all_of_the_watched_users() -> None:
    rules = audit_policy([PROVER_USER, OPERATOR_USER])["rules"]
    assert rules[0] == {"level": "Metadata", "users": sorted([PROVER_USER, OPERATOR_USER])}
    assert set(rules[1]["verbs"]) == {"create", "update", "patch", "delete", "deletecollection"}
    assert rules[-1] == {"level": "None"}


def cost(**overrides: Any) -> Cost:
    calls = Calls(
        calls=Counter({(PROVERS, "update workerstatuses/status"): 10,
                       (OPERATOR, "create pods"): 2, (OPERATOR, "patch pods"): 2,
                       (KUBELET, "patch pods/status"): 6, (BENCH, "create proofjobs"): 1,
                       (OPERATOR, "watch pods"): 1}),
        conflicts=Counter({(PROVERS, "update workerstatuses/status"): 1}),
        throttled=Counter({(KUBELET, "patch pods/status"): 2}))
    values: dict[str, Any] = {
        "system": KUZK, "attempts": 2, "calls": calls,
        "cpu_s": {OPERATOR: 0.01, "kube-apiserver": 0.1},
        "etcd_wal_bytes": 4000.0, "etcd_puts": 8.0,
        "apiserver_events": {"workerstatuses": 20.0},
        "apiserver_event_bytes": {"workerstatuses": 40000.0},
        "operator_events": {"pods": 6.0, "workerstatuses": 10.0},
        "ws_kinds": Counter({(PROVERS, "join"): 2, (PROVERS, "stage"): 4,
                             (OPERATOR, "leave+mark"): 1, (PROVERS, NO_MOVE): 1,
                             (PROVERS, UNSEEN): 1}),
        "lane_s": 3.0,
        "lag_p50_s": 0.2, "lag_p99_s": 0.9}
    return Cost(**(values | overrides))


def test_figures_are_per_attempt_and_split_writes_from_reads() -> None:
    figures = cost().figures()
    assert figures["writes|provers|update workerstatuses/status"] == 5.0
    assert figures["409|provers|update workerstatuses/status"] == 0.5
    assert figures[f"429|{KUBELET}|patch pods/status"] == 1.0
    assert figures["reads|operator|watch pods"] == 0.5
    assert "writes|operator|watch pods" not in figures
    assert figures["cpu_ms|operator"] == pytest.approx(5.0)
    assert figures["events|workerstatuses"] == 5.0
    assert figures["etcd_wal_bytes"] == 2000.0
    assert figures["ws_kind|provers|stage"] == 2.0
    assert figures["ws_kind|operator|leave+mark"] == 0.5
    assert figures["not_moves"] == 1.0  # one moved no lane, one changed nothing seen
    # not per attempt
    assert (figures["attempts"], figures["lane_s"], figures["lag_p99_s"]) == (2.0, 3.0, 0.9)
    assert total(figures, "writes", call=on_workerstatus) == 5.0
    assert total(figures, "writes", who=kuzk_own) == 7.0
    # every writer but the harness: operator 2, provers 5, kubelet 3
    assert total(figures, "writes", who=system_side) == 10.0


def test_a_job_run_has_no_operator_events_and_no_lags_when_none_were_seen() -> None:
    figures = cost(system=JOB, operator_events=None, lag_p50_s=None, lag_p99_s=None,
                   attempts=0).figures()
    assert not by_prefix(figures, "events")
    assert "lag_p99_s" not in figures
    assert figures["writes|kubelet|patch pods/status"] == 6.0  # divided by at least one


def test_medians_count_a_missing_call_as_zero_but_a_missing_lag_as_unknown() -> None:
    rounds = [{"writes|operator|create pods": 1.0, "lag_p99_s": 2.0},
              {"writes|operator|create pods": 3.0},
              {"writes|provers|update workerstatuses": 4.0, "lag_p99_s": 4.0}]
    out = medians(rounds)
    assert out["writes|operator|create pods"] == 1.0  # median of 1, 3, 0
    assert out["writes|provers|update workerstatuses"] == 0.0  # median of 0, 0, 4
    assert out["lag_p99_s"] == 3.0  # median of the two rounds that saw lags


def test_operator_events_take_one_source_per_resource() -> None:
    counts, sources = operator_events({"pods": 3.0, "proofjobs": 2.0},
                                         {"pods": 5.0, "nodes": 0.0})
    assert counts == {"pods": 5.0, "nodes": 0.0, "proofjobs": 2.0}
    assert sources == {"pods": OPERATOR_WATCH_EVENTS, "nodes": OPERATOR_WATCH_EVENTS,
                       "proofjobs": "Kopf streams"}
    assert operator_events({"pods": 3.0}, None) == ({"pods": 3.0},
                                                       {"pods": "Kopf streams"})


def test_metrics_are_read_by_resource_and_their_growth_taken() -> None:
    before = parse_metrics(
        '# TYPE apiserver_watch_events_total counter\n'
        'apiserver_watch_events_total{group="",resource="pods",version="v1"} 5\n'
        '# TYPE etcd_disk_wal_write_bytes_total gauge\netcd_disk_wal_write_bytes_total 100\n')
    after = parse_metrics(
        '# TYPE apiserver_watch_events_total counter\n'
        'apiserver_watch_events_total{group="",resource="pods",version="v1"} 12\n'
        'apiserver_watch_events_total{group="kuzk.io",resource="workerstatuses",version="v1"}'
        ' 4\n'
        '# TYPE etcd_disk_wal_write_bytes_total gauge\netcd_disk_wal_write_bytes_total 350\n')
    assert delta(before, after, "apiserver_watch_events_total") == Counter(
        {"pods": 7, "workerstatuses": 4})
    assert sum(delta(before, after, "etcd_disk_wal_write_bytes_total").values()) == 250
    assert delta(before, after, "absent_total") == Counter()


def lane(uid: str, stage: str, *, mark: str | None = None,
         ready: str | None = None) -> dict[str, Any]:
    return ({"pod": {"name": f"pod-{uid}", "uid": uid},
             "job": {"namespace": "ns", "name": "j", "uid": "j1", "proofKind": "porep-c2"},
             "partition": 0, "attempt": 1, "priority": 1, "stage": stage,
             "since": "2026-12-05T13:00:00Z"} | ({"notLiveSince": mark} if mark else {})
            | ({"readyAt": ready} if ready else {}))


def status(*lanes: dict[str, Any], holder: str | None = None, host_bytes: int = 0,
           stale: int = 0) -> dict[str, Any]:
    worker: dict[str, Any] = {"id": "gpu-0", "gpu": {"uuid": "GPU-0"}, "lanes": [
        {**ln, "memory": {"hostBytes": host_bytes}} for ln in lanes]}
    if holder:
        worker["holder"] = {"pod": {"name": f"pod-{holder}", "uid": holder},
                            "since": "2026-12-05T13:00:01Z"}
    return {"workers": [worker], "staleWritesRejected": stale}


def test_each_write_is_told_by_what_it_moved() -> None:
    empty = status()
    one = status(lane("a", "synthesizing"))
    done = status(lane("a", "synth_done"))
    held = status(lane("a", "gpu"), holder="a")
    given = status(lane("a", "committing"))
    assert lane_moves(empty, one) == "join"
    assert lane_moves(one, done) == "stage"
    assert lane_moves(done, held) == "acquire"
    assert lane_moves(held, given) == "release_gpu"
    assert lane_moves(given, empty) == "leave"
    assert lane_moves(held, empty) == "leave"  # a holder's lane removed
    marked = status(lane("a", "synthesizing", mark="2026-12-05T13:00:05Z"),
                    lane("b", "synthesizing"))
    two = status(lane("a", "synthesizing"), lane("b", "synthesizing"))
    assert lane_moves(two, marked) == "mark"
    assert lane_moves(marked, status(lane("b", "synthesizing"))) == "leave"
    swept = status(lane("b", "synthesizing", mark="2026-12-05T13:00:06Z"))
    assert lane_moves(marked, swept) == "leave+mark"
    # a lane that waits for the GPU phase another holds joins the GPU's queue
    other = status(lane("b", "gpu"), lane("a", "synth_done"), holder="b")
    waits = status(lane("b", "gpu"), lane("a", "synth_done", ready="2026-12-05T13:00:07Z"),
                   holder="b")
    assert lane_moves(other, waits) == "ready"
    assert lane_moves(one, status(lane("a", "synthesizing"), stale=1)) == "refused"
    # a write of the lane's memory alone, as a heartbeat carrying it would be: no move
    assert lane_moves(one, status(lane("a", "synthesizing"), host_bytes=1 << 30)) == NO_MOVE


def ws(rv: str, st: dict[str, Any], name: str = "node-a") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}, "status": st}


def test_a_write_is_matched_to_the_change_made_on_the_version_it_carried() -> None:
    moves = Moves()
    moves.on_event("ADDED", ws("10", status()), 0.0)
    moves.on_event("MODIFIED", ws("12", status(lane("a", "synthesizing"))), 0.0)
    moves.on_event("MODIFIED", ws("15", status(lane("a", "synthesizing"), host_bytes=9)), 0.0)
    # a relist delivers ADDED: no change is taken from across the gap
    moves.on_event("ADDED", ws("20", status()), 0.0)
    moves.on_event("ADDED", ws("21", status(), name="node-b"), 0.0)
    moves.on_event("DELETED", ws("22", status(), name="node-b"), 0.0)
    call = "update workerstatuses/status"
    written = [Written(PROVERS, call, "node-a", "10"),
               Written(PROVERS, call, "node-a", "12"),
               Written(PROVERS, call, "node-a", "15"),  # its change was never seen
               Written(OPERATOR, "create workerstatuses", "node-c", "")]
    assert updates(written) == written[:3]
    assert write_kinds(written, moves.of) == Counter({
        (PROVERS, "join"): 1, (PROVERS, NO_MOVE): 1, (PROVERS, UNSEEN): 1,
        (OPERATOR, "create"): 1})


def test_the_fleet_makes_a_third_of_a_thousand_attempts_a_second() -> None:
    assert FLEET.attempts_per_s == pytest.approx(10_000 * 2 / 60)


def test_the_projection_is_per_attempt_counts_times_the_fleet_rate() -> None:
    fleet = Fleet(gpus=600, lanes=1, partition_s=60.0)  # 10 attempts/s
    figures = cost().figures()
    out = projection(figures, KUZK, fleet)
    assert out["attempts_per_s"] == pytest.approx(10.0)
    # kuzk's own: operator 2 + provers 5 per attempt
    assert out["own_writes_per_s"] == pytest.approx(7.0 * 10)
    assert out["all_writes_per_s"] == pytest.approx(10.0 * 10)
    # events: pods 3 + workerstatuses 5 per attempt
    assert out["controller_events_per_s"] == pytest.approx(8.0 * 10)
    assert out["controller_cores"] == pytest.approx(5.0 * 10 / 1000)
    assert out["apiserver_cores"] == pytest.approx(50.0 * 10 / 1000)
    assert out["etcd_wal_mb_per_s"] == pytest.approx(2000.0 * 10 / 1e6)


def test_the_job_runs_projection_counts_the_job_controller_as_its_own() -> None:
    figures = {"writes|kcm/job-controller|create pods": 1.0,
               "writes|kcm/job-controller|update jobs/status": 0.5,
               "writes|kubelet|patch pods/status": 3.0, "writes|bench|create jobs": 0.1,
               "cpu_ms|kube-controller-manager": 4.0, "cpu_ms|kube-apiserver": 20.0}
    out = projection(figures, JOB, Fleet(gpus=60, lanes=1, partition_s=60.0))
    assert out["own_writes_per_s"] == pytest.approx(1.5)
    assert out["all_writes_per_s"] == pytest.approx(4.5)
    assert out["controller_events_per_s"] == 0.0
    assert out["controller_cores"] == pytest.approx(0.004)


def test_the_peak_projection_counts_one_core_operator_processes() -> None:
    assert PEAK.attempts_per_s == pytest.approx(215.0)
    out = projection({"cpu_ms|operator": 10.0}, KUZK, PEAK)
    assert out["controller_cores"] == pytest.approx(2.15)
    assert out["processes"] == 3.0  # whole processes, one core each
    assert projection({"cpu_ms|operator": 0.0}, KUZK, PEAK)["processes"] == 1.0


# --- shards (issue 41) --------------------------------------------------------------------
SHARD_A = "system:serviceaccount:kuzk-bench:bench-kuzk-operator-s0"
SHARD_B = "system:serviceaccount:kuzk-bench:bench-kuzk-operator-s1"
SHARD_USERS = {**USERS, SHARD_A: "shard s0", SHARD_B: "shard s1"}
SHARD_OF = {"fleet-kuzk-0": "shard s0", "fleet-kuzk-1": "shard s1"}


def job_write(verb: str, user: str, ns: str, name: str, *, code: int = 200,
              subresource: str | None = None) -> dict[str, Any]:
    e = event(verb, "proofjobs", user, code=code, subresource=subresource, name=name)
    e["objectRef"]["namespace"] = ns
    return e


def test_each_proofjob_is_written_by_its_own_shard_alone() -> None:
    writers = Writers()
    for e in (job_write("create", ADMIN, "fleet-kuzk-0", "j0"),  # the harness: left out
              job_write("patch", SHARD_A, "fleet-kuzk-0", "j0", subresource="status"),
              job_write("patch", SHARD_B, "fleet-kuzk-1", "j1", subresource="status"),
              job_write("patch", SHARD_A, "fleet-kuzk-1", "j1", code=403),  # refused: no write
              job_write("delete", ADMIN, "fleet-kuzk-1", "j1")):
        writers.add_event(e, component(e, SHARD_USERS, ADMIN))
    assert writers.jobs == {"fleet-kuzk-0/j0": {"shard s0"}, "fleet-kuzk-1/j1": {"shard s1"}}
    assert writers.crossed(SHARD_OF) == []
    stray = job_write("patch", SHARD_B, "fleet-kuzk-0", "j0")
    writers.add_event(stray, component(stray, SHARD_USERS, ADMIN))
    assert writers.crossed(SHARD_OF) == ["fleet-kuzk-0/j0"], "two shards wrote one job"
    wrong = Writers()
    e = job_write("patch", SHARD_B, "fleet-kuzk-0", "j2")
    wrong.add_event(e, component(e, SHARD_USERS, ADMIN))
    assert wrong.crossed(SHARD_OF) == ["fleet-kuzk-0/j2"], "a shard wrote another's job"


def pod(uid: str, ns: str, job: str, partition: int, attempt: int) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": ns, "labels": {
        "kuzk.io/partition": str(partition), "kuzk.io/attempt": str(attempt)},
        "ownerReferences": [{"kind": "ProofJob", "name": job}]}, "status": {}}


def test_a_phase_counts_attempts_by_namespace_and_partitions_created_twice() -> None:
    phase = Phase(KUZK, {"j0": 2, "j1": 1})
    for p in (pod("u1", "fleet-kuzk-0", "j0", 0, 1), pod("u2", "fleet-kuzk-0", "j0", 1, 1),
              pod("u3", "fleet-kuzk-0", "j0", 1, 2), pod("u4", "fleet-kuzk-1", "j1", 0, 1)):
        phase.on_pod("ADDED", p, 0.0)
        phase.on_pod("MODIFIED", p, 0.1)
    assert (phase.attempts_in("fleet-kuzk-0"), phase.attempts_in("fleet-kuzk-1")) == (3, 1)
    assert phase.created_twice() == 0, "a retry is a new attempt, not a partition made twice"
    phase.on_pod("ADDED", pod("u5", "fleet-kuzk-1", "j1", 0, 1), 0.2)
    assert phase.created_twice() == 1
    assert phase.summary()["created_twice"] == 1


def test_the_report_prints_each_shards_cpu_beside_the_whole(
        capsys: pytest.CaptureFixture[str]) -> None:
    result = {"operator": {"attempts": 400},
              "shards": [{"name": "s0", "namespace": "fleet-kuzk-0", "cpu_s": 3.0,
                          "attempts": 200},
                         {"name": "s1", "namespace": "fleet-kuzk-1", "cpu_s": 1.0,
                          "attempts": 200}],
              "shard_writes": {"jobs_written": 50, "crossed": [], "created_twice": 0}}
    _shards(result)
    lines = capsys.readouterr().out.splitlines()
    s0 = next(line.split() for line in lines if line.strip().startswith("s0"))
    assert s0 == ["s0", "fleet-kuzk-0", "200", "3.0", "7.5", "15.0", "0.75"]
    every = next(line.split() for line in lines if line.strip().startswith("all"))
    assert every == ["all", "400", "4.0", "10.0"]
    assert any("written by another than their own shard: 0 (goal 0): met" in line
               for line in lines)
    assert any("more than one pod: 0 (goal 0): met" in line for line in lines)


def test_the_rounds_table_gives_each_rounds_own_cpu_ratios(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The medians of each system's figures may pair different rounds; each round's ratios
    are printed beside its completion ratio."""
    kuzk = [{"cpu_ms|kube-apiserver": 90.0, "cpu_ms|operator": 12.0, "cpu_ms|kubelets": 30.0},
            {"cpu_ms|kube-apiserver": 80.0, "cpu_ms|operator": 10.0, "cpu_ms|kubelets": 24.0}]
    job = [{"cpu_ms|kube-apiserver": 50.0, "cpu_ms|kube-controller-manager": 6.0,
            "cpu_ms|kubelets": 25.0},
           {"cpu_ms|kube-apiserver": 40.0, "cpu_ms|kube-controller-manager": 5.0,
            "cpu_ms|kubelets": 24.0}]
    _rounds({"order": ["kuzk", "job"], "seconds": {"kuzk": [30.0, 28.0], "job": [15.0, 14.0]},
             "round_ratios": [2.0, 2.0], "per_attempt_rounds": {"kuzk": kuzk, "job": job}})
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["round", "kuzk", "s", "job", "s", "ratio", "api", "op/kcm",
                                "kubelet", "first"]
    assert lines[2].split() == ["1", "30.0", "15.0", "2.00", "1.80", "2.00", "1.20", "kuzk"]
    assert lines[3].split() == ["2", "28.0", "14.0", "2.00", "2.00", "2.00", "1.00", "job"]


def test_the_report_lists_the_refused_requests_by_component_and_call(
        capsys: pytest.CaptureFixture[str]) -> None:
    kuzk = cost().figures()
    _by_component(kuzk, {}, "429", "429 Too Many Requests")
    _by_component({}, {}, "429", "429 Too Many Requests")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines] == [
        ["429", "Too", "Many", "Requests"],
        [KUBELET, "patch", "pods/status", "1.00", "0.00"],
        ["429", "Too", "Many", "Requests"],
        ["none"]]
