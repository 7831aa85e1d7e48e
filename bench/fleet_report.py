"""What ``bench/fleet_scale.py`` prints: each system's end to end, the figures per partition
attempt side by side with their goals, the comparisons the issues ask for, the operator's
requests, the projection to a fleet (``fleet_projection.py``), the CPU by process and the
stand-in's counters. It reads the run's result (the JSON ``--json`` writes) and nothing else."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable
from typing import Any

from fleet_measure import (
    JOB,
    KUZK,
    MOVES,
    OPERATOR,
    OPERATOR_WATCH_EVENTS,
    PROVERS,
    UNSEEN,
    WORKERSTATUS,
    Figures,
    Obj,
    by_prefix,
    on_workerstatus,
    own_writer,
    quantile,
    system_side,
    total,
)
from fleet_projection import PEAK, Fleet

# Goals: issue 12's for the operator's requests, issue 28's for heartbeats and the fleet
# projection, issue 40's for the kubelets, issue 41's for the rest: the operator and the API
# server against the Job controller, completion, and the lanes' writes no worse than issue 28
# left them (5.43 and 0.21 per attempt).
GOALS = {"requests_per_attempt": 8.0, "lists_per_sync": 0.0, "completion_ratio": 1.25,
         "rss_mb": 400.0, "ws_writes_per_attempt": 5.43, "ws_conflicts_per_attempt": 0.21,
         "not_moves_per_attempt": 0.0, "operator_cpu_vs_kcm": 2.0,
         "apiserver_cpu_vs_job": 1.75, "kubelet_cpu_vs_job": 1.2,
         "operator_writes_vs_jc": 1.25, "status_patches_per_attempt": 0.5,
         "events_per_attempt": 0.6, "fleet_writes_per_s": 1000.0,
         "fleet_operator_cores": 1.0}


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _verdict(ok: bool | None) -> str:
    return "unknown" if ok is None else "met" if ok else "MISSED"


def _by_component(fk: Figures, fj: Figures, prefix: str, heading: str,
                  order: Callable[[str], Any] | None = None) -> None:
    """Under ``heading``, a line per ``<prefix>|<component>|<what>`` figure (a call, or what a
    write moved), each system's beside the other's; "none" when neither has one."""
    print(f"  {heading}")
    keys = sorted({key.split("|", 1)[1] for f in (fk, fj) for key in f
                   if key.startswith(f"{prefix}|")}, key=order)
    for who_what in keys:
        who, what = who_what.split("|")
        _row(f"  {who:<20} {what}", fk.get(f"{prefix}|{who_what}", 0.0),
             fj.get(f"{prefix}|{who_what}", 0.0))
    if not keys:
        print("    none")


def _row(label: str, k: float | None, j: float | None, goal: str = "",
         spec: str = ".2f") -> None:
    print(f"  {label:<52} {_fmt(k, spec):>10} {_fmt(j, spec):>10}  {goal}")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def report(result: Obj) -> None:
    k, j, op = result["kuzk"], result["job"], result["operator"]
    rounds = result["rounds"]
    last = f"; the last of {rounds} rounds" if rounds > 1 else ""
    print(f"\nend to end (from the first create call to the last job finished; "
          f"{' first, then '.join(result['order'])}{last})")
    print(f"{'system':<6} {'jobs':>5} {'partitions':>10} {'attempts':>8} {'seconds':>8} "
          f"{'partitions/s':>12} {'lag p50 s':>9} {'lag p99 s':>9} {'lag max s':>9}")
    for s in (k, j):
        print(f"{s['system']:<6} {s['jobs']:>5} {s['partitions']:>10} {s['attempts']:>8} "
              f"{s['seconds']:>8.1f} {s['partitions_per_s']:>12.2f} {_fmt(s['lag_p50_s']):>9} "
              f"{_fmt(s['lag_p99_s']):>9} {_fmt(s['lag_max_s']):>9}")
        print(f"       retries counted against the backoff limit {s['retries_counted']},"
              f" not counted (disruptions) {s['retries_disrupted']}; probe kills"
              f" {s['probe_kills']}")
        if s["failed_jobs"]:
            print(f"       failed: {', '.join(s['failed_jobs'][:10])}")
            by_reason = ", ".join(f"{n} {r}" for r, n in sorted(s["failed_by_reason"].items()))
            print(f"       failed by reason: {by_reason}")
            for message in s["failure_messages"]:
                print(f"         {message}")
        if s["unfinished_jobs"]:
            print(f"       {s['unfinished_jobs']} jobs unfinished at the timeout: seconds is "
                  "the timeout, partitions/s counts all partitions")
        if s["watch_relists"]:
            print(f"       {s['watch_relists']} watch relists: events missed meanwhile arrived "
                  "late, lags are underestimated")
    if rounds > 1:
        _rounds(result)
    ratio = result["completion_ratio"]
    median = " (median of the rounds)" if rounds > 1 else ""
    print(f"\ncompletion-time ratio kuzk/job{median} {ratio:.2f} "
          f"(goal <= {GOALS['completion_ratio']}): "
          f"{_verdict(ratio <= GOALS['completion_ratio'])}; "
          f"partitions/s ratio kuzk/job {1 / ratio:.2f}")
    _per_attempt(result)
    _comparisons(result)
    _operator_requests(op)
    _shards(result)
    _projection(result)
    cpu = result["cpu_s"]
    names = sorted({n for phase in cpu.values() for n in phase})
    print("\nCPU seconds by process, all rounds (2 cores: what one system spends, the "
          "other's pods wait for)")
    print(f"{'process':<24} {'kuzk':>8} {'job':>8}")
    for name in names:
        print(f"{name:<24} {cpu[KUZK].get(name, 0.0):>8.1f} {cpu[JOB].get(name, 0.0):>8.1f}")
    print(f"{'total':<24} {sum(cpu[KUZK].values()):>8.1f} {sum(cpu[JOB].values()):>8.1f}")
    print(f"\nstand-in prover (one process, kuzk_prover.reporter's ProverReporter), the last "
          f"round\n  ProofJobs: {result['standin']['summary']}\n"
          f"  Jobs:      {result['standin_job']['summary']}")
    stale = result["stale_writes_refused"]
    print(f"stale writes refused (the WorkerStatuses' staleWritesRejected, every writer): "
          f"{stale[KUZK]} in the ProofJob phases, {stale[JOB]} in the Job phases")


# The CPU per attempt each comparison sets side by side: kuzk's process's, the Job run's.
CPU_PAIRS = {"operator": (f"cpu_ms|{OPERATOR}", "cpu_ms|kube-controller-manager"),
             "apiserver": ("cpu_ms|kube-apiserver", "cpu_ms|kube-apiserver"),
             "kubelets": ("cpu_ms|kubelets", "cpu_ms|kubelets")}


def _cpu_pair(fk: Obj, fj: Obj, which: str) -> tuple[float | None, float | None, float | None]:
    """kuzk's and the Job run's CPU per attempt for ``which`` (``CPU_PAIRS``), and their
    ratio."""
    k, j = CPU_PAIRS[which]
    kuzk, job = fk.get(k), fj.get(j)
    return kuzk, job, _ratio(kuzk, job)


def _rounds(result: Obj) -> None:
    """Each round's seconds and completion ratio, and its own ratios of CPU per attempt: the
    API server's, the operator's against kube-controller-manager's, the kubelets'."""
    # The per-attempt medians the report prints are each system's, taken apart, and may
    # pair different rounds.
    print(f"\n{'round':<6} {'kuzk s':>8} {'job s':>8} {'ratio':>6} {'api':>6} {'op/kcm':>6} "
          f"{'kubelet':>7}  first")
    order = result["order"]
    per_round = result["per_attempt_rounds"]
    for i, (ks, js, r) in enumerate(zip(result["seconds"][KUZK], result["seconds"][JOB],
                                        result["round_ratios"], strict=True)):
        api_r, op_r, kub_r = (_cpu_pair(per_round[KUZK][i], per_round[JOB][i], which)[2]
                              for which in ("apiserver", "operator", "kubelets"))
        print(f"{i + 1:<6} {ks:>8.1f} {js:>8.1f} {r:>6.2f} {_fmt(api_r):>6} {_fmt(op_r):>6} "
              f"{_fmt(kub_r):>7}  {order[i % 2]}")


def _per_attempt(result: Obj) -> None:
    fk, fj = result["per_attempt"][KUZK], result["per_attempt"][JOB]
    rounds = result["rounds"]
    print(f"\nper partition attempt{f' (median of {rounds} rounds)' if rounds > 1 else ''}; "
          f"{result['nodes']} nodes x {result['gpus']} GPUs x {result['lanes']} lanes")
    print(f"  {'':<52} {'kuzk':>10} {'job':>10}  goal")
    _row("attempts (pods that ran)", fk.get("attempts"), fj.get("attempts"), spec=".0f")
    print("  API writes by component and resource (audit log)")
    writers = sorted({key.split("|")[1] for f in (fk, fj) for key in f
                      if key.startswith("writes|")})
    for who in writers:
        calls = sorted({key.split("|")[2] for f in (fk, fj) for key in f
                        if key.startswith(f"writes|{who}|")},
                       key=lambda c: -(fk.get(f"writes|{who}|{c}", 0.0)
                                       + fj.get(f"writes|{who}|{c}", 0.0)))
        for call in calls:
            key = f"writes|{who}|{call}"
            _row(f"  {who:<20} {call}", fk.get(key, 0.0), fj.get(key, 0.0))
    print("  API writes by component")
    for who in writers:
        _row(f"  {who}", total(fk, "writes", who=who.__eq__),
             total(fj, "writes", who=who.__eq__))
    _row("  own: kuzk's operator+provers / the job controller",
         total(fk, "writes", who=own_writer(KUZK)), total(fj, "writes", who=own_writer(JOB)))
    _row("  every component but the harness (bench)", total(fk, "writes", who=system_side),
         total(fj, "writes", who=system_side))
    print("  API reads by component (get, list, watch starts; audited for these two only)")
    for who in (OPERATOR, PROVERS):
        _row(f"  {who}", total(fk, "reads", who=who.__eq__), total(fj, "reads", who=who.__eq__))
    ws_writes = total(fk, "writes", call=on_workerstatus)
    ws_goal = GOALS["ws_writes_per_attempt"]
    _row("WorkerStatus writes (PUTs, those answered 409 too)", ws_writes,
         total(fj, "writes", call=on_workerstatus),
         f"<= {ws_goal:g}: {_verdict(ws_writes <= ws_goal)}")
    ws_409 = total(fk, "409", call=on_workerstatus)
    c_goal = GOALS["ws_conflicts_per_attempt"]
    _row("WorkerStatus 409 Conflicts", ws_409, total(fj, "409", call=on_workerstatus),
         f"<= {c_goal:g}: {_verdict(ws_409 <= c_goal)}")
    _by_component(fk, fj, "409", "409 Conflicts by component and call (audit log's "
                  "responseStatus)")
    _by_component(fk, fj, "429", "429 Too Many Requests by component and call (the API "
                  "server's priority and fairness turned them away; each is tried again)")
    _by_component(fk, fj, "ws_kind", "WorkerStatus writes that succeeded, by writer and what "
                  "each moved (a watch's change, told by the audit entry's resourceVersion)",
                  order=lambda k: (k.split("|")[0], _kind_order(k.split("|")[1])))
    not_moves = fk.get("not_moves", 0.0)
    _row("writes that moved no lane (heartbeats)", not_moves,
         fj.get("not_moves", 0.0),
         f"0: {_verdict(not_moves <= GOALS['not_moves_per_attempt'])}")
    if result["ws_watch_relists"]:
        print(f"    the WorkerStatus watch listed again {result['ws_watch_relists']} times: a "
              f"change it missed counts as {UNSEEN!r}")
    _row("a lane's life, join to leave (s; not per attempt)", fk.get("lane_s"), None)
    sources = result["event_sources"]
    print("  watch events delivered to the operator, by resource (source)")
    events = by_prefix(fk, "events")
    for resource, n in sorted(events.items(), key=lambda kv: -kv[1]):
        _row(f"  {resource} ({sources.get(resource, '?')})", n, None)
    _row("  all", sum(events.values()) if events else None, None)
    if not any(s == OPERATOR_WATCH_EVENTS for s in sources.values()):
        print(f"    the operator exports no {OPERATOR_WATCH_EVENTS}: every count is of its "
              "Kopf streams (bench/counted_operator.py)")
    print("  watch events sent to every watcher (apiserver_watch_events_total), by resource")
    sent_k, sent_j = by_prefix(fk, "apiserver_events"), by_prefix(fj, "apiserver_events")
    for resource in sorted(set(sent_k) | set(sent_j),
                           key=lambda r: -(sent_k.get(r, 0.0) + sent_j.get(r, 0.0)))[:8]:
        _row(f"  {resource}", sent_k.get(resource, 0.0), sent_j.get(resource, 0.0))
    print("  CPU ms by process (/proc)")
    cpu_k, cpu_j = by_prefix(fk, "cpu_ms"), by_prefix(fj, "cpu_ms")
    for process in sorted(set(cpu_k) | set(cpu_j)):
        _row(f"  {process}", cpu_k.get(process, 0.0), cpu_j.get(process, 0.0), spec=".1f")
    _row("etcd bytes written (etcd_disk_wal_write_bytes_total)", fk.get("etcd_wal_bytes"),
         fj.get("etcd_wal_bytes"), spec=".0f")
    _row("etcd puts (etcd_mvcc_put_total)", fk.get("etcd_puts"), fj.get("etcd_puts"))
    _row("status lag p50 (s; not per attempt)", fk.get("lag_p50_s"), fj.get("lag_p50_s"))
    lag_k, lag_j = fk.get("lag_p99_s"), fj.get("lag_p99_s")
    _row("status lag p99 (s; not per attempt)", lag_k, lag_j,
         f"<= the Job controller's: "
         f"{_verdict(None if lag_k is None or lag_j is None else lag_k <= lag_j)}")


def _kind_order(kind: str) -> int:
    """A write kind's place in a table: a lane's moves in order, then the rest."""
    first = kind.split("+")[0]
    return MOVES.index(first) if first in MOVES else len(MOVES)


def _comparisons(result: Obj) -> None:
    fk, fj = result["per_attempt"][KUZK], result["per_attempt"][JOB]
    op_cpu, kcm_cpu, r_op = _cpu_pair(fk, fj, "operator")
    print("\nagainst kube-controller-manager's job controller")
    op_w, jc_w = total(fk, "writes", who=OPERATOR.__eq__), total(fj, "writes", who=own_writer(JOB))
    r_w = _ratio(op_w, jc_w)
    print(f"  operator writes per attempt {_fmt(op_w)}, the job controller's {_fmt(jc_w)}: "
          f"{_fmt(r_w)}x (goal <= {GOALS['operator_writes_vs_jc']:g}x): "
          f"{_verdict(None if r_w is None else r_w <= GOALS['operator_writes_vs_jc'])}")
    patches = fk.get(f"writes|{OPERATOR}|patch proofjobs/status", 0.0)
    events = (fk.get(f"writes|{OPERATOR}|create events", 0.0)
              + fk.get(f"writes|{OPERATOR}|patch events", 0.0))
    print(f"  of them ProofJob status patches {patches:.2f} "
          f"(goal <= {GOALS['status_patches_per_attempt']:g}): "
          f"{_verdict(patches <= GOALS['status_patches_per_attempt'])}, Events {events:.2f} "
          f"(goal <= {GOALS['events_per_attempt']:g}): "
          f"{_verdict(events <= GOALS['events_per_attempt'])}")
    print(f"  operator CPU per attempt {_fmt(op_cpu, '.1f')} ms, kube-controller-manager's per "
          f"Job pod {_fmt(kcm_cpu, '.1f')} ms: {_fmt(r_op)}x "
          f"(goal <= {GOALS['operator_cpu_vs_kcm']:g}x): "
          f"{_verdict(None if r_op is None else r_op <= GOALS['operator_cpu_vs_kcm'])}")
    api_k, api_j, r_api = _cpu_pair(fk, fj, "apiserver")
    print(f"  kube-apiserver CPU per attempt for kuzk's whole system {_fmt(api_k, '.1f')} ms, "
          f"for the Job run {_fmt(api_j, '.1f')} ms: {_fmt(r_api)}x "
          f"(goal <= {GOALS['apiserver_cpu_vs_job']:g}x): "
          f"{_verdict(None if r_api is None else r_api <= GOALS['apiserver_cpu_vs_job'])}")
    kub_k, kub_j, r_kub = _cpu_pair(fk, fj, "kubelets")
    print(f"  kubelets' CPU per attempt (probes included) {_fmt(kub_k, '.1f')} ms, per Job pod"
          f" {_fmt(kub_j, '.1f')} ms: {_fmt(r_kub)}x (goal <= {GOALS['kubelet_cpu_vs_job']:g}x):"
          f" {_verdict(None if r_kub is None else r_kub <= GOALS['kubelet_cpu_vs_job'])}")
    gave_up = result["gave_up"]
    print(f"  writes that gave up (WorkerWriteConflict), all rounds: {gave_up} (goal 0): "
          f"{_verdict(gave_up == 0)}")


def _operator_requests(op: Obj) -> None:
    attempts = op["attempts"]
    print(f"\noperator API requests during the ProofJob phases (audit log, user {op['user']}),"
          f" per partition attempt ({attempts} attempts, all rounds; issue 12)")
    for verb, n in sorted(op["by_verb"].items(), key=lambda kv: -kv[1]):
        print(f"  {verb:<8} {n:>7} {n / attempts:>8.2f}")
    print("  by call:")
    for call, n in sorted(op["by_call"].items(), key=lambda kv: -kv[1]):
        print(f"    {call:<40} {n:>7} {n / attempts:>8.2f}")
    per = op["requests_per_attempt"]
    print(f"  total {sum(op['by_verb'].values())} = {per:.2f} per attempt "
          f"(goal <= {GOALS['requests_per_attempt']:.0f}): "
          f"{_verdict(per <= GOALS['requests_per_attempt'])}; 409 answers {op['conflicts']}")
    lps = op["lists_per_sync"]
    print(f"  LISTs {op['by_verb'].get('list', 0)}, syncs {op['syncs']} (reconcile passes): "
          f"LISTs per sync {_fmt(lps)} (goal 0): {_verdict(None if lps is None else lps == 0)}")
    print(f"operator CPU {op['cpu_s']:.1f} s during the ProofJob phases; peak RSS "
          f"{op['peak_rss_mb']:.0f} MB (goal < {GOALS['rss_mb']:.0f}): "
          f"{_verdict(op['peak_rss_mb'] < GOALS['rss_mb'])}")


def _shards(result: Obj) -> None:
    """Each operator shard's CPU during the ProofJob phases: per attempt of the whole run
    (beside one operator's figure for the same jobs, the operator CPU per attempt above when
    one runs alone) and per attempt of its own jobs; whether any ProofJob was written by
    another than its own shard, and any partition attempt run by two pods."""
    shards, checks = result["shards"], result["shard_writes"]
    attempts = max(result["operator"]["attempts"], 1)
    whole = sum(s["cpu_s"] for s in shards)
    print(f"\noperator shards: {len(shards)} (each its own process, namespace and identity; "
          f"{attempts} attempts, all rounds)")
    print(f"  {'shard':<8} {'namespace':<16} {'attempts':>8} {'CPU s':>7} "
          f"{'ms/attempt of all':>17} {'ms/own attempt':>14} {'share':>6}")
    for s in shards:
        own = 1000 * s["cpu_s"] / s["attempts"] if s["attempts"] else None
        share = s["cpu_s"] / whole if whole else None
        print(f"  {s['name'] or '-':<8} {s['namespace']:<16} {s['attempts']:>8} "
              f"{s['cpu_s']:>7.1f} {1000 * s['cpu_s'] / attempts:>17.1f} "
              f"{_fmt(own, '.1f'):>14} {_fmt(share):>6}")
    print(f"  {'all':<8} {'':<16} {attempts:>8} {whole:>7.1f} {1000 * whole / attempts:>17.1f}")
    crossed = checks["crossed"]
    print(f"  ProofJobs written, each by one identity (audit log): {checks['jobs_written']}; "
          f"written by another than their own shard: {len(crossed)} (goal 0): "
          f"{_verdict(not crossed)}{' ' + ', '.join(crossed[:5]) if crossed else ''}")
    twice = checks["created_twice"]
    print(f"  partition attempts run by more than one pod: {twice} (goal 0): "
          f"{_verdict(twice == 0)}")


def _projection(result: Obj) -> None:
    fleet = Fleet(**result["fleet"])
    fk = result["per_attempt"][KUZK]
    print(f"\nprojection to {fleet.gpus:,} GPUs x {fleet.lanes} lanes, {fleet.partition_s:g} s "
          f"partitions: {fleet.attempts_per_s:.0f} partition attempts/s; and to {PEAK.what}: "
          f"{PEAK.attempts_per_s:.0f} a second (per-attempt counts above x attempts/s)")
    at = {"fleet": result["projection"], "peak": result["projection_peak"]}
    print(f"  {'':<52} {'kuzk':>10} {'job':>10}  goal (issue 28)")
    for name, rate in (("fleet", fleet.attempts_per_s), ("peak", PEAK.attempts_per_s)):
        pk, pj = at[name][KUZK], at[name][JOB]
        print(f"  at {rate:.0f} attempts/s")
        writes, goal_w = pk["own_writes_per_s"], GOALS["fleet_writes_per_s"]
        _row("writes/s by kuzk (operator, provers) / job controller", writes,
             pj["own_writes_per_s"], f"<= {goal_w:,.0f}: {_verdict(writes <= goal_w)}", ".0f")
        _row("writes/s by every component (kubelets, scheduler too)", pk["all_writes_per_s"],
             pj["all_writes_per_s"], spec=".0f")
        _row("watch events/s delivered to the operator", pk["controller_events_per_s"], None,
             spec=".0f")
        cores, goal_c = pk["controller_cores"], GOALS["fleet_operator_cores"]
        _row("operator / kube-controller-manager cores", cores, pj["controller_cores"],
             f"<= {goal_c:g}: {_verdict(cores <= goal_c)}")
        _row("operator processes at one core each", pk["processes"], pj["processes"],
             spec=".0f")
        _row("kube-apiserver cores", pk["apiserver_cores"], pj["apiserver_cores"],
             f"<= 2x the Job run's: "
             f"{_verdict(pk['apiserver_cores'] <= 2 * pj['apiserver_cores'])}")
        _row("etcd MB/s written", pk["etcd_wal_mb_per_s"], pj["etcd_wal_mb_per_s"])
    sent = by_prefix(fk, "apiserver_events").get(WORKERSTATUS, 0.0)
    size = by_prefix(fk, "apiserver_event_bytes").get(WORKERSTATUS, 0.0)
    print("  what grows with what (the rest is per attempt, and so scales with attempts/s):")
    print(f"  - with lanes: the writers of one WorkerStatus (every lane of a node while one object"
          f" holds a node, a GPU's lanes with one per GPU), so its 409s and the writes tried "
          f"again after them (here {total(fk, '409', call=on_workerstatus):.2f} per attempt), "
          f"and the lanes that wait for a GPU's phase; a lane's own writes per attempt do not")
    print(f"  - with GPUs per node (and lanes) while one object holds a node: the bytes of each "
          f"WorkerStatus write and of each of its events to every watcher (here "
          f"{_fmt(_ratio(size, sent), '.0f')} bytes a workerstatuses event, "
          f"{_fmt(_ratio(fk.get('etcd_wal_bytes'), fk.get('etcd_puts')), '.0f')} etcd bytes "
          f"a put), and its 409s; with one object per GPU, neither")
    print(f"  - with partition length: no count per attempt (here lanes lived "
          f"{_fmt(fk.get('lane_s'), '.1f')} s, and {fk.get('not_moves', 0.0):.2f} writes per "
          f"attempt moved no lane); longer partitions only make fewer attempts a second")


def standin_summary(before: Obj, after: Obj) -> Obj:
    counts = Counter(after["counts"])
    counts.subtract(before["counts"])
    latency = {op: sorted(v[len(before["latency"].get(op, [])):])
               for op, v in after["latency"].items()}

    def p50_p99(op: str) -> str:
        values = latency.get(op, [])
        return (f"{_fmt(quantile(values, .5), '.3f')}/"
                f"{_fmt(quantile(values, .99), '.3f')} s")

    puts = counts.get("put", 0)
    gave_up = sum(n for key, n in counts.items() if key.endswith("_gave_up"))
    lanes = latency.get("lane", [])
    line = (f"{counts.get('pods', 0)} pods with lanes, {counts.get('bare', 0)} bare pods, "
            f"{counts.get('claim', 0)} joins, {counts.get('stage', 0)} stage writes, "
            f"{counts.get('acquire', 0)} acquires, "
            f"{counts.get('release', 0)} leaves; {puts} PUTs, "
            f"{counts.get('put_409', 0) / puts if puts else 0:.1%} answered 409; "
            f"p50/p99 join {p50_p99('claim')}, acquire {p50_p99('acquire')}, leave "
            f"{p50_p99('release')}; writes that gave up (WorkerWriteConflict): {gave_up}")
    return {"counts": {k: v for k, v in counts.items() if v}, "summary": line,
            "claim_p99_s": quantile(latency.get("claim", []), .99),
            "acquire_p99_s": quantile(latency.get("acquire", []), .99),
            "release_p99_s": quantile(latency.get("release", []), .99), "gave_up": gave_up,
            "lane_s": statistics.fmean(lanes) if lanes else 0.0}
