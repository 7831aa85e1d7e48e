"""What ``bench/fleet_scale.py`` measures of a phase (one system's jobs, from the create calls
to the last finish) and how the counts become figures per partition attempt: the phase's pods
and jobs as watches see them (attempts, status lag, how each job ended), whose each audited
request is, what each WorkerStatus write moved, the control plane's own counters (``/metrics``
and ``/proc``), what a phase cost per attempt and the medians of rounds. It starts nothing:
``fleet_scale.py`` runs the phases, ``fleet_projection.py`` carries the figures to a fleet and
``fleet_report.py`` prints them."""

from __future__ import annotations

import json
import os
import ssl
import statistics
import threading
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from twins import COMPLETION_INDEX, JOB_NAME_LABEL

from kuzk.contract import api
from kuzk.contract.workerstatus import WorkerStatusModel, parse
from kuzk.operator.decide.ranges import expand

KUZK, JOB = "kuzk", "job"
OPERATOR, PROVERS, KUBELET = "operator", "provers", "kubelet"
SCHEDULER, BENCH = "scheduler", "bench"
JOB_CONTROLLER = "kcm/job-controller"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
WORKERSTATUS = api.WORKERSTATUS_PLURAL
OPERATOR_WATCH_EVENTS = "kuzk_operator_watch_events_total"
Obj = dict[str, Any]
Figures = dict[str, float]


# --- one phase: N jobs of one system, watched from the create calls to the last finish -------
@dataclass
class Phase:
    system: str
    partitions: dict[str, int]
    t0: float = 0.0
    t_end: float = 0.0
    attempts: set[str] = field(default_factory=set)
    succeeded_at: dict[tuple[str, int], float] = field(default_factory=dict)
    shown_at: dict[tuple[str, int], float] = field(default_factory=dict)
    finished: dict[str, tuple[float, bool]] = field(default_factory=dict)
    # Per finished job: retries counted against its backoff limit, retries that were not
    # (disruptions), and why it failed ("" when it succeeded).
    outcomes: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    probe_kills: int = 0
    relists: int = 0
    # Each attempt's namespace (by pod UID), and the pods seen for each partition attempt
    # (job, partition, attempt): more than one is a partition created twice.
    attempt_namespaces: dict[str, str] = field(default_factory=dict)
    pods_of_attempt: defaultdict[tuple[str, int, str], set[str]] = field(
        default_factory=lambda: defaultdict(set))
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _key(self, pod: Obj) -> tuple[str, int] | None:
        md = pod["metadata"]
        labels, notes = md.get("labels") or {}, md.get("annotations") or {}
        if self.system == KUZK:
            owners = [o["name"] for o in md.get("ownerReferences") or []
                      if o.get("kind") == api.PROOFJOB_KIND]
            index = labels.get(api.LABEL_PARTITION)
            return (owners[0], int(index)) if owners and index is not None else None
        index = notes.get(COMPLETION_INDEX.split("'")[1])
        name = labels.get(JOB_NAME_LABEL)
        return (name, int(index)) if name and index is not None else None

    def on_pod(self, kind: str, pod: Obj, arrival: float) -> None:
        if kind not in ("ADDED", "MODIFIED"):
            return
        key = self._key(pod)
        md = pod["metadata"]
        with self.lock:
            self.attempts.add(md["uid"])
            self.attempt_namespaces[md["uid"]] = md.get("namespace", "")
            if key:
                attempt = (md.get("labels") or {}).get(api.LABEL_ATTEMPT, "")
                self.pods_of_attempt[(*key, attempt)].add(md["uid"])
            if key and (pod.get("status") or {}).get("phase") == "Succeeded":
                self.succeeded_at.setdefault(key, arrival)

    def on_job(self, kind: str, job: Obj, arrival: float) -> None:
        if kind not in ("ADDED", "MODIFIED"):
            return
        name, status = job["metadata"]["name"], job.get("status") or {}
        failed = next((c for c in status.get("conditions") or []
                       if c["type"] == "Failed" and c["status"] == "True"), None)
        reason = f"{failed.get('reason')}: {failed.get('message') or ''}"[:100] if failed else ""
        if self.system == KUZK:
            parts = status.get("partitions") or []
            shown = [p["index"] for p in parts if p.get("state") == "done"]
            phase = status.get("phase")
            end = None if phase not in ("Succeeded", "Failed") else phase == "Succeeded"
            outcome = (sum(p.get("retries", 0) for p in parts),
                       sum(p.get("disruptions", 0) for p in parts), reason)
        else:
            shown = expand(status.get("completedIndexes") or "")
            true = {c["type"] for c in status.get("conditions") or [] if c["status"] == "True"}
            end = True if "Complete" in true else False if "Failed" in true else None
            # The Job controller counts every failed pod against backoffLimitPerIndex.
            outcome = (int(status.get("failed") or 0), 0, reason)
        with self.lock:
            for index in shown:
                self.shown_at.setdefault((name, index), arrival)
            if end is not None and name not in self.finished:
                self.finished[name] = (arrival, end)
                self.outcomes[name] = outcome
                if len(self.finished) == len(self.partitions):
                    self.t_end = max(t for t, _ in self.finished.values())
                    self.done.set()

    def lags(self) -> list[float]:
        with self.lock:
            return [self.shown_at[k] - t for k, t in self.succeeded_at.items()
                    if k in self.shown_at]

    def summary(self) -> Obj:
        lags = sorted(self.lags())
        seconds = self.t_end - self.t0
        total = sum(self.partitions.values())
        failed = sorted(n for n, (_, ok) in self.finished.items() if not ok)
        unfinished = len(self.partitions) - len(self.finished)
        reasons = Counter(r.split(":")[0] for _, _, r in self.outcomes.values() if r)
        return {"system": self.system, "jobs": len(self.partitions), "partitions": total,
                "attempts": len(self.attempts), "failed_jobs": failed,
                "failed_by_reason": dict(reasons),
                "failure_messages": sorted({r for _, _, r in self.outcomes.values() if r})[:10],
                "retries_counted": sum(c for c, _, _ in self.outcomes.values()),
                "retries_disrupted": sum(d for _, d, _ in self.outcomes.values()),
                "probe_kills": self.probe_kills,
                "unfinished_jobs": unfinished, "seconds": seconds,
                "partitions_per_s": total / seconds if seconds > 0 else 0.0,
                "lag_p50_s": quantile(lags, 0.5), "lag_p90_s": quantile(lags, 0.9),
                "lag_p99_s": quantile(lags, 0.99), "lag_max_s": lags[-1] if lags else None,
                "lag_samples": len(lags), "watch_relists": self.relists,
                "created_twice": self.created_twice()}

    def created_twice(self) -> int:
        """Partition attempts that more than one pod ran (the Jobs' pods carry no attempt:
        a Job's retried index counts here too)."""
        with self.lock:
            return sum(1 for uids in self.pods_of_attempt.values() if len(uids) > 1)

    def attempts_in(self, namespace: str) -> int:
        with self.lock:
            return sum(1 for ns in self.attempt_namespaces.values() if ns == namespace)


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]




# --- identities, the audit log and whose each request is -------------------------------------
def service_account(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


def audit_policy(users: Iterable[str]) -> Obj:
    """Metadata for every request of ``users`` (the operator's and the provers': their reads
    are counted too) and for every write of anyone; nothing else."""
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata", "users": sorted(users)},
                      {"level": "Metadata", "verbs": sorted(WRITE_VERBS)},
                      {"level": "None"}]}


def component(event: Mapping[str, Any], users: Mapping[str, str], admin: str) -> str:
    """Whose request an audit event is: the component of a user in ``users``, else a
    kube-controller-manager controller (``kcm/<name>``, from the user agent its client builder
    gives each controller) or the scheduler, else the harness (``admin``'s other requests:
    creating and deleting the jobs), else the user's own name."""
    user = str((event.get("user") or {}).get("username", "?"))
    if user in users:
        return users[user]
    agent = str(event.get("userAgent") or "")
    program = agent.split("/", 1)[0]
    if program == "kube-controller-manager":
        parts = agent.rsplit(" ", 1)[-1].split("/")  # kubernetes/<commit>/<controller>
        return f"kcm/{parts[2]}" if len(parts) > 2 else "kcm"
    if program == "kube-scheduler":
        return SCHEDULER
    if user.startswith("system:serviceaccount:kube-system:"):
        return f"kcm/{user.rsplit(':', 1)[1]}"
    return BENCH if user == admin else user


@dataclass(frozen=True)
class Written:
    """A WorkerStatus write that succeeded: whose, which call, on which object, made on which
    of its versions (the resourceVersion it carried; "" when it carried none)."""

    who: str
    call: str
    name: str
    version: str


@dataclass
class Calls:
    """API requests in one window of the audit log: by component and call ("verb resource",
    a subresource after a slash), the 409 Conflicts among them, those the API server's
    priority and fairness turned away (429 Too Many Requests: the client tries again, a
    request more), and the WorkerStatus writes that succeeded, one by one."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    conflicts: Counter[tuple[str, str]] = field(default_factory=Counter)
    throttled: Counter[tuple[str, str]] = field(default_factory=Counter)
    written: list[Written] = field(default_factory=list)

    def add(self, other: Calls, who: str) -> None:
        """Add ``other``'s requests of component ``who``."""
        for mine, theirs in ((self.calls, other.calls), (self.conflicts, other.conflicts),
                             (self.throttled, other.throttled)):
            for key, n in theirs.items():
                if key[0] == who:
                    mine[key] += n

    def of(self, who: str) -> Counter[str]:
        return Counter({call: n for (c, call), n in self.calls.items() if c == who})

    def add_event(self, event: Mapping[str, Any], who: str) -> None:
        verb = str(event["verb"])
        if event["stage"] != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
            return
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "?") + (
            f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (who, f"{verb} {resource}")
        self.calls[key] += 1
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        if code == 409:
            self.conflicts[key] += 1
        elif code == 429:
            self.throttled[key] += 1
        elif code < 300 and is_write(key[1]) and on_workerstatus(key[1]):
            self.written.append(Written(who, key[1], str(ref.get("name", "")),
                                        str(ref.get("resourceVersion", ""))))

    @classmethod
    def read(cls, log: Path, start: int, end: int, users: Mapping[str, str],
             admin: str) -> Calls:
        out = cls()
        feed(out, log, start, end, users, admin)
        return out


@dataclass
class Writers:
    """Whose writes changed each ProofJob in one window of the audit log (shards, issue 41):
    by job ("namespace/name"), the components whose writes to it succeeded, the harness's
    creates and deletes left out."""

    jobs: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def add_event(self, event: Mapping[str, Any], who: str) -> None:
        ref = event.get("objectRef") or {}
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        if (event["stage"] == "ResponseComplete" and ref.get("resource") == api.PROOFJOB_PLURAL
                and str(event["verb"]) in WRITE_VERBS and code < 300 and who != BENCH):
            self.jobs[f"{ref.get('namespace', '')}/{ref.get('name', '')}"].add(who)

    def crossed(self, shard_of: Mapping[str, str]) -> list[str]:
        """The jobs some writer other than their namespace's shard (``shard_of``: namespace
        to the shard's component) wrote: two shards, or a shard not its own."""
        return sorted(job for job, who in self.jobs.items()
                      if who != {shard_of.get(job.split("/", 1)[0])})

    @classmethod
    def read(cls, log: Path, start: int, end: int, users: Mapping[str, str],
             admin: str) -> Writers:
        out = cls()
        feed(out, log, start, end, users, admin)
        return out


def feed(sink: Calls | Writers, log: Path, start: int, end: int, users: Mapping[str, str],
         admin: str) -> None:
    """Hand ``sink`` every audit event between the offsets ``start`` and ``end`` of ``log``,
    with the component that made it."""
    with log.open("rb") as f:
        f.seek(start)
        data = f.read(end - start)
    for line in data.splitlines():
        event = json.loads(line)
        sink.add_event(event, component(event, users, admin))


def is_write(call: str) -> bool:
    return call.split(" ", 1)[0] in WRITE_VERBS


def on_workerstatus(call: str) -> bool:
    return call.split(" ", 1)[-1].split("/")[0] == WORKERSTATUS


# --- what each WorkerStatus write moved: the watch's view of it, told by its audit entry -------
# A lane's moves, in the order a write that made several names them ("leave+mark"), and a
# stale write refused and counted (``staleWritesRejected``).
MOVES = ("join", "stage", "ready", "acquire", "release_gpu", "leave", "mark", "refused")
# A write that changed the object but no lane's membership, stage, place in its GPU's queue,
# holding or not-live mark, and counted no refusal.
NO_MOVE = "no lane moved"
# A write the API server took whose change no watch event showed: it changed nothing (the
# API server stores no new version then), or the watch missed it (a relist).
UNSEEN = "no change seen"
NOT_MOVES = (NO_MOVE, UNSEEN)
LaneState = tuple[str, bool, Any, Any]


def _lanes(model: WorkerStatusModel) -> dict[str, LaneState]:
    """Each lane of a WorkerStatus by its pod's UID: its stage, whether it holds its GPU's
    phase, since when it waits for it, its not-live mark."""
    out: dict[str, LaneState] = {}
    for worker in model.workers:
        holder = worker.holder.pod.uid if worker.holder is not None else None
        for lane in worker.lanes:
            out[lane.pod.uid] = (str(lane.stage), lane.pod.uid == holder, lane.ready_at,
                                 lane.not_live_since)
    return out


def lane_moves(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """What a write that took a WorkerStatus's status from ``before`` to ``after`` moved: for
    each lane, "join" (it appeared), "leave" (it went: the prover's leave, the finalizer
    release or the sweep), "acquire" or "release_gpu" (it took or gave up its GPU's phase),
    else "stage" (its stage changed) or "ready" (it joined its GPU's queue: a wait for the
    phase another lane holds), and "mark" (its not-live mark was set or cleared); "refused"
    when the write counted a stale write; joined by "+" in ``MOVES``'s order, or
    ``NO_MOVE``."""
    was_model, now_model = parse(before), parse(after)
    old, new = _lanes(was_model), _lanes(now_model)
    moves: set[str] = set()
    if now_model.stale_writes_rejected > was_model.stale_writes_rejected:
        moves.add("refused")
    for uid in old.keys() | new.keys():
        was, now = old.get(uid), new.get(uid)
        if was is None or now is None:
            moves.add("join" if was is None else "leave")
            continue
        if was[1] != now[1]:
            moves.add("acquire" if now[1] else "release_gpu")
        elif was[0] != now[0]:
            moves.add("stage")
        elif was[2] != now[2]:
            moves.add("ready")
        if was[3] != now[3]:
            moves.add("mark")
    return "+".join(m for m in MOVES if m in moves) or NO_MOVE


class Moves:
    """Every change of the WorkerStatuses that a watch of them sees (the ``on_event`` of a
    ``Follow``), by the object's name and the version it was made on, as what it moved
    (``lane_moves``). Every kuzk write of a WorkerStatus is a compare-and-swap: only one
    write can succeed on a version, so the audit entry of a write, which carries the version
    it was made on, names its change."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last: dict[str, Obj] = {}
        self.changes: dict[tuple[str, str], str] = {}

    def on_event(self, kind: str, ws: Obj, arrival: float) -> None:
        name = str(ws["metadata"]["name"])
        with self.lock:
            before = self.last.pop(name, None)
            if kind == "DELETED":
                return
            if kind == "MODIFIED" and before is not None:
                made_on = str(before["metadata"]["resourceVersion"])
                self.changes[(name, made_on)] = lane_moves(before.get("status") or {},
                                                           ws.get("status") or {})
            self.last[name] = ws

    def of(self, write: Written) -> str | None:
        """What ``write``'s change moved; None while no change made on its version was seen."""
        with self.lock:
            return self.changes.get((write.name, write.version))


def updates(written: Iterable[Written]) -> list[Written]:
    """The writes that change an existing WorkerStatus (not its create or delete)."""
    return [w for w in written if w.call.split(" ", 1)[0] in ("update", "patch")]


def write_kinds(written: Iterable[Written],
                moved: Callable[[Written], str | None]) -> Counter[tuple[str, str]]:
    """The successful WorkerStatus writes by writer and kind: "create" and "delete" as such,
    an update or patch by what its change moved (``moved``: ``Moves.of``), ``UNSEEN`` when no
    change made on the version it carried was seen."""
    out: Counter[tuple[str, str]] = Counter()
    for write in written:
        verb = write.call.split(" ", 1)[0]
        if verb in ("update", "patch"):
            kind = moved(write) or UNSEEN
        else:
            kind = "delete" if verb.startswith("delete") else verb
        out[(write.who, kind)] += 1
    return out


# --- the control plane's own counters: /metrics and /proc --------------------------------------
def scrape(url: str, context: ssl.SSLContext | None = None) -> dict[str, Counter[str]]:
    """A /metrics page as sample name -> {label values joined by ',': value}."""
    with urllib.request.urlopen(url, timeout=30, context=context) as response:
        text = response.read().decode()
    return parse_metrics(text)


def parse_metrics(text: str) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name][_label_key(sample.labels)] += sample.value
    return dict(out)


def _label_key(labels: Mapping[str, str]) -> str:
    """The resource a sample is about when it names one, else all its label values."""
    for name in ("resource", "plural", "kind"):
        if name in labels:
            return labels[name]
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def delta(before: Mapping[str, Counter[str]], after: Mapping[str, Counter[str]],
          name: str) -> Counter[str]:
    """How much each labelled sample of ``name`` grew (counters only grow)."""
    grown = Counter(after.get(name, Counter()))
    grown.subtract(before.get(name, Counter()))
    return grown


def read_counts(path: Path) -> Obj | None:
    """The operator's counts so far (bench/counted_operator.py), None before its first
    report."""
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def rewritten(path: Path, since_ns: int) -> bool:
    return path.stat().st_mtime_ns != since_ns


def cpu_seconds(pid: int, *, children: bool = False) -> float:
    """A process's CPU seconds so far; with ``children``, also those of its children that
    ended and were waited for (the pods' shells of the process kubelets)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_by_process(pids: Mapping[str, Sequence[int]]) -> dict[str, float]:
    """CPU seconds by name, each the sum of its processes' (and their waited children's)."""
    return {name: sum(cpu_seconds(pid, children=True) for pid in group)
            for name, group in pids.items()}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- what one phase cost, per attempt; medians of rounds; the fleet -----------------------------
@dataclass
class Cost:
    """What one phase of one system cost the control plane, as counted."""

    system: str
    attempts: int
    calls: Calls
    cpu_s: Mapping[str, float]
    etcd_wal_bytes: float
    etcd_puts: float
    apiserver_events: Mapping[str, float]
    apiserver_event_bytes: Mapping[str, float]
    # events delivered to the operator by resource (None: no operator ran in the phase)
    operator_events: Mapping[str, float] | None
    # the successful WorkerStatus writes by writer and what each moved (``write_kinds``)
    ws_kinds: Mapping[tuple[str, str], int]
    lane_s: float  # mean life of a lane (join to leave); 0 without lanes
    lag_p50_s: float | None
    lag_p99_s: float | None

    def figures(self) -> Figures:
        """Per attempt, flat: ``writes|<component>|<call>``, ``409|<component>|<call>``,
        ``429|<component>|<call>``, ``reads|<component>|<call>``, ``cpu_ms|<process>``,
        ``events|<resource>`` (the operator's), ``apiserver_events|<resource>`` (all watchers'),
        ``apiserver_event_bytes|<resource>``, ``etcd_wal_bytes``, ``etcd_puts``,
        ``ws_kind|<component>|<kind>`` (WorkerStatus writes by what they moved) and
        ``not_moves`` (those that moved no lane); and, not per attempt, ``attempts``,
        ``lane_s``, ``lag_p50_s`` and ``lag_p99_s`` (when there were lags)."""
        n = max(self.attempts, 1)
        not_moves = sum(c for (_, kind), c in self.ws_kinds.items() if kind in NOT_MOVES)
        out: Figures = {"attempts": float(self.attempts), "lane_s": self.lane_s,
                        "etcd_wal_bytes": self.etcd_wal_bytes / n,
                        "etcd_puts": self.etcd_puts / n, "not_moves": not_moves / n}
        for (who, kind), count in self.ws_kinds.items():
            out[f"ws_kind|{who}|{kind}"] = count / n
        for (who, call), count in self.calls.calls.items():
            out[f"{'writes' if is_write(call) else 'reads'}|{who}|{call}"] = count / n
        for (who, call), count in self.calls.conflicts.items():
            out[f"409|{who}|{call}"] = count / n
        for (who, call), count in self.calls.throttled.items():
            out[f"429|{who}|{call}"] = count / n
        for process, seconds in self.cpu_s.items():
            out[f"cpu_ms|{process}"] = seconds * 1000 / n
        for resource, count in (self.operator_events or {}).items():
            out[f"events|{resource}"] = count / n
        for resource, count in self.apiserver_events.items():
            out[f"apiserver_events|{resource}"] = count / n
        for resource, size in self.apiserver_event_bytes.items():
            out[f"apiserver_event_bytes|{resource}"] = size / n
        for name, lag in (("lag_p50_s", self.lag_p50_s), ("lag_p99_s", self.lag_p99_s)):
            if lag is not None:
                out[name] = lag
        return out


def medians(rounds: list[Figures]) -> Figures:
    """Each figure's median over the rounds; a figure a round lacks is 0 in it (no such call
    was made), except the lags, taken from the rounds that have them."""
    keys = {k for figures in rounds for k in figures}
    out: Figures = {}
    for key in keys:
        if key.startswith("lag_"):
            values = [f[key] for f in rounds if key in f]
        else:
            values = [f.get(key, 0.0) for f in rounds]
        if values:
            out[key] = statistics.median(values)
    return out


def total(figures: Mapping[str, float], kind: str, *,
          who: Callable[[str], bool] = lambda _: True,
          call: Callable[[str], bool] = lambda _: True) -> float:
    """The sum of the ``kind|<component>|<call>`` figures whose component and call match."""
    out = 0.0
    for key, value in figures.items():
        parts = key.split("|")
        if len(parts) == 3 and parts[0] == kind and who(parts[1]) and call(parts[2]):
            out += value
    return out


def by_prefix(figures: Mapping[str, float], kind: str) -> dict[str, float]:
    """The ``kind|<name>`` figures by name."""
    return {k.split("|", 1)[1]: v for k, v in figures.items()
            if k.startswith(f"{kind}|") and k.count("|") == 1}


def kuzk_own(who: str) -> bool:
    """The writers kuzk adds to a cluster: the operator and the provers."""
    return who in (OPERATOR, PROVERS)


def system_side(who: str) -> bool:
    """Every writer but the harness (its creates and deletes of the jobs are the user's)."""
    return who != BENCH


def own_writer(system: str) -> Callable[[str], bool]:
    """The writers a system adds to a cluster: kuzk's operator and provers; the Job
    controller."""
    return kuzk_own if system == KUZK else (lambda who: who == JOB_CONTROLLER)


def operator_events(kopf: Mapping[str, float], own: Mapping[str, float] | None,
                    ) -> tuple[dict[str, float], dict[str, str]]:
    """Watch events delivered to the operator by resource, and where each count came from:
    its own ``/metrics`` counter for the resources it names there (``own``; None when the
    operator exports no such counter), its Kopf streams' for the rest. One source per
    resource, so nothing is counted twice."""
    counts: dict[str, float] = {}
    sources: dict[str, str] = {}
    for resource, n in (own or {}).items():
        counts[resource], sources[resource] = n, OPERATOR_WATCH_EVENTS
    for resource, n in kopf.items():
        if resource not in counts:
            counts[resource], sources[resource] = n, "Kopf streams"
    return counts, sources
