"""The kuzk operator at fleet scale, against the Indexed Job controller, on one control plane.

Why: a partition must cost the API server and the operator what a Job's pod costs, not more
(issues 12 and 28). This run counts what each system spends per partition attempt, from the
API server's audit log, the control plane's own /metrics and /proc, racing kuzk against the
batch/v1 Job controller running the same pods in the same run; then it carries those counts
to a fleet of 10,000 GPUs.

How: one test control plane (etcd, kube-apiserver, kube-controller-manager with its job
controller, kube-scheduler) and process kubelets (``bench/fleet_kubelets.py``) with
``--nodes`` x ``--gpus`` GPU nodes, each GPU advertised as ``--lanes`` time-slicing replicas
(the device plugin's ``replicas``): that many partition pods share a GPU as its lanes. The
operator, the provers and the kubelets each run under a ServiceAccount of their own (the
operator's bound to the chart's operator ClusterRole, the provers' to the prover's), so that
the audit log, at Metadata level for every write and for all of the operator's and the
provers' requests, tells whose each write is; kube-controller-manager's controllers and the
scheduler are told by their user agents, the harness's own creates and deletes are "bench".
Partition pods run a stand-in prover (``bench/fleet_standin.py``): one process serves every
kuzk pod through kuzk's real lane protocol (join, stage writes, the GPU phase acquired and
released, one holder per GPU at a time, leave; a lane writes only when it moves) and each
partition works 0.5-2 s instead of proving; the Jobs' pods only work, as a Job's pod reports
to no WorkerStatus (the GPU part of their work taking turns on their GPU, as the pods given
replicas of one time-sliced GPU do). ``--jobs`` ProofJobs of the four kinds in turn (winning-post,
snap-update, window-post, porep-c2; partitions by kind) are created at once; when all have
finished, they are deleted, the operator is stopped, and the same number of Indexed Jobs
(twins from ``bench/twins.py``: pods from kuzk's own pod builder) run the same way.
``--job-first`` runs the Jobs first, then starts the operator again (a fresh process) for the
ProofJobs. ``--rounds N`` runs both N times, each round in the reverse order of the one
before, and reports the median of the rounds' figures: on two cores one round's times move
by a fifth from run to run.

Reported per system, per partition attempt (a pod that ran; its count is the divisor):

* API writes (create, update, patch, delete) by component (operator, provers, kubelet,
  scheduler, kube-controller-manager's controllers by name, bench) and resource, and the 409
  Conflicts among them (the audit log's responseStatus);
* watch events delivered to the operator by resource: the operator's own
  ``kuzk_operator_watch_events_total`` on its ``/metrics`` where it exports it, else the
  events of its Kopf streams (``bench/counted_operator.py``); the audit log sees a watch
  start, never its events. Beside them the API server's ``apiserver_watch_events_total``,
  which counts the events sent to every watcher (kubelets, controllers, this harness too);
* CPU milliseconds of every process (the operator, kube-apiserver, etcd, the controllers,
  the kubelets, the stand-in), from /proc before and after the phase;
* etcd bytes written: ``etcd_disk_wal_write_bytes_total`` from etcd's own /metrics, the bytes
  its write-ahead log took (every change is written there whole before it is applied;
  the database file's size, ``etcd_mvcc_db_total_size_in_bytes``, moves with compaction,
  not with writes), and its puts (``etcd_mvcc_put_total``);
* WorkerStatus writes by what each moved (``Moves``): a watch of the WorkerStatuses sees
  every change, and the audit entry of the write that made it carries the resourceVersion it
  was made on (one compare-and-swap write can succeed on a version), so each successful write
  is told by its writer and its kind: a lane's join, stage, ready (it waits in its GPU's
  queue), acquire, release_gpu or leave, the operator's liveness mark, a stale write refused
  and counted, or none of them. Writes that moved no lane (none of those, or no change at
  all) are the heartbeats the issue rules out between stage changes: measured, their goal
  is 0. And writes that gave up (WorkerWriteConflict);
* how the jobs ended: retries counted against the backoff limit and those that were not
  (disruptions: preemption, eviction, a lost node), containers killed by their probes (the
  kubelets' ``Killing`` Events; the stand-in answers every probe of a pod it serves, so each
  is a live prover killed), and the failed jobs by the reason of their ``Failed`` condition;
* the status lag p50/p99, from a partition pod's Succeeded (as a watch sees it) to its job's
  status showing the partition done (ProofJob status.partitions; Job completedIndexes).

Then the comparisons the issues ask for: operator CPU per attempt against
kube-controller-manager's per Job pod, kube-apiserver CPU per attempt for kuzk's whole system
against the Job run's, the kubelets' CPU per attempt (their probes' cost) against a Job
pod's, lag p99 against the Job controller's; and a projection of the per-attempt counts to
10,000 GPUs x 2 lanes with 60 s partitions (``FLEET``): writes/s, operator events/s, operator
cores and API server cores, each beside its goal (``GOALS``), with which counts grow with
lanes, with GPUs per node and with partition length. For the operator also (issue 12): its
requests per attempt by verb, LISTs per sync (a sync is one pass of
``reconcile``, counted by ``bench/counted_operator.py``) and its peak RSS.

    .venv/bin/python bench/fleet_scale.py [--nodes 64] [--gpus 8] [--lanes 1] [--jobs 200]
        [--rounds 1] [--job-first] [--json out]

Needs the control-plane binaries (``bash testenv/build``). Wall-clock figures move with
the machine's load, printed with them; the counts per attempt are the point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

import kuzk
from kuzk.contract import api
from kuzk.contract.workerstatus import WorkerStatusModel, parse
from kuzk.operator.pods import PodSettings
from kuzk.operator.ranges import expand

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from fleet_kubelets import node_names  # noqa: E402
from fleet_standin import pod_command, stats_of  # noqa: E402
from follow import Follow, start_all  # noqa: E402
from twins import COMPLETION_INDEX, JOB_NAME_LABEL, indexed_job, proofjob  # noqa: E402

from testenv.cluster import Cluster, chart_objects, install_kuzk  # noqa: E402
from testenv.controlplane import ControlPlane, free_port, stop_group  # noqa: E402
from testenv.waiting import wait_for  # noqa: E402

KINDS = ("winning-post", "snap-update", "window-post", "porep-c2")
SYSTEM_NS, KUZK_NS, JOB_NS = "kuzk-bench", "fleet-kuzk", "fleet-job"
RELEASE = "bench"  # the chart's objects are named <release>-kuzk-...
PROVER_SA, KUBELET_SA = "kuzk-prover", "bench-kubelet"
IMAGE = "kuzk-standin:bench"
DEADLINE_S = 3600  # every job gets it, so no kind's default deadline (25 s) ends a queued job
CREATORS = 8
KUZK, JOB = "kuzk", "job"
OPERATOR, PROVERS, KUBELET = "operator", "provers", "kubelet"
SCHEDULER, BENCH = "scheduler", "bench"
JOB_CONTROLLER = "kcm/job-controller"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
WORKERSTATUS = api.WORKERSTATUS_PLURAL
# Goals: issue 12's for the operator's requests, issue 28's for the costs per attempt and the
# fleet projection.
GOALS = {"requests_per_attempt": 8.0, "lists_per_sync": 0.0, "completion_ratio": 1.0,
         "rss_mb": 400.0, "ws_writes_per_attempt": 6.0, "ws_conflicts_per_attempt": 0.3,
         "not_moves_per_attempt": 0.0, "operator_cpu_vs_kcm": 1.5,
         "apiserver_cpu_vs_job": 2.0, "kubelet_cpu_vs_job": 1.2,
         "fleet_writes_per_s": 1000.0,
         "fleet_operator_cores": 1.0}
OPERATOR_WATCH_EVENTS = "kuzk_operator_watch_events_total"
Obj = dict[str, Any]
Figures = dict[str, float]


@dataclass(frozen=True)
class Fleet:
    """The fleet the per-attempt counts are carried to."""

    gpus: int = 10_000
    lanes: int = 2
    partition_s: float = 60.0

    @property
    def attempts_per_s(self) -> float:
        """Every lane of every GPU starts a partition each ``partition_s``."""
        return self.gpus * self.lanes / self.partition_s


FLEET = Fleet()


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
        with self.lock:
            self.attempts.add(pod["metadata"]["uid"])
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
                "lag_p50_s": _quantile(lags, 0.5), "lag_p90_s": _quantile(lags, 0.9),
                "lag_p99_s": _quantile(lags, 0.99), "lag_max_s": lags[-1] if lags else None,
                "lag_samples": len(lags), "watch_relists": self.relists}


def _quantile(values: list[float], q: float) -> float | None:
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
    a subresource after a slash), the 409 Conflicts among them, and the WorkerStatus writes
    that succeeded, one by one."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    conflicts: Counter[tuple[str, str]] = field(default_factory=Counter)
    written: list[Written] = field(default_factory=list)

    def add(self, other: Calls, who: str) -> None:
        """Add ``other``'s requests of component ``who``."""
        for key, n in other.calls.items():
            if key[0] == who:
                self.calls[key] += n
        for key, n in other.conflicts.items():
            if key[0] == who:
                self.conflicts[key] += n

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
        elif code < 300 and is_write(key[1]) and on_workerstatus(key[1]):
            self.written.append(Written(who, key[1], str(ref.get("name", "")),
                                        str(ref.get("resourceVersion", ""))))

    @classmethod
    def read(cls, log: Path, start: int, end: int, users: Mapping[str, str],
             admin: str) -> Calls:
        out = cls()
        with log.open("rb") as f:
            f.seek(start)
            data = f.read(end - start)
        for line in data.splitlines():
            event = json.loads(line)
            out.add_event(event, component(event, users, admin))
        return out


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


def cpu_by_process(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid, children=True) for name, pid in pids.items()}


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
        ``reads|<component>|<call>``, ``cpu_ms|<process>``, ``events|<resource>`` (the
        operator's), ``apiserver_events|<resource>`` (all watchers'),
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


CONTROLLER_PROCESS = {KUZK: OPERATOR, JOB: "kube-controller-manager"}


def projection(figures: Mapping[str, float], system: str, fleet: Fleet) -> dict[str, float]:
    """A system's per-attempt counts carried to ``fleet``: arithmetic, no model, each count
    per attempt times the fleet's attempts per second (no write is made for time passing:
    the run measures the writes that moved no lane, ``not_moves``, and its goal is 0). The
    controller is kuzk's operator, or the Job run's kube-controller-manager (its job
    controller and the rest)."""
    rate = fleet.attempts_per_s
    own = total(figures, "writes", who=own_writer(system))
    every = total(figures, "writes", who=system_side)
    events = sum(by_prefix(figures, "events").values())
    return {"attempts_per_s": rate, "own_writes_per_s": own * rate,
            "all_writes_per_s": every * rate, "controller_events_per_s": events * rate,
            "controller_cores": figures.get(f"cpu_ms|{CONTROLLER_PROCESS[system]}", 0.0)
            * rate / 1000,
            "apiserver_cores": figures.get("cpu_ms|kube-apiserver", 0.0) * rate / 1000,
            "etcd_wal_mb_per_s": figures.get("etcd_wal_bytes", 0.0) * rate / 1e6}


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
@contextlib.contextmanager
def process(argv: list[str], env: dict[str, str], log: Path, stdout: int | None = None,
            grace: float = 20) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=stdout or out, stderr=out,
                                start_new_session=True)
    try:
        yield proc
    finally:
        stop_group(proc, grace=grace)


# --- setup -----------------------------------------------------------------------------------
def namespace(cluster: Cluster, name: str, *service_accounts: str) -> None:
    cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    for sa in service_accounts:
        cluster.core.create_namespaced_service_account(
            name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=sa)))


def bind_prover_role(cluster: Cluster) -> None:
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "bench-kuzk-prover"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "kuzk-prover"},
               "subjects": [{"kind": "ServiceAccount", "name": PROVER_SA,
                             "namespace": SYSTEM_NS}]}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))


def bind_kubelet(cluster: Cluster) -> None:
    """The kubelets' own identity: cluster-admin, as the test kubelet's admin kubeconfig is;
    its name is what the audit log tells their writes by."""
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "bench-kubelet"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "cluster-admin"},
               "subjects": [{"kind": "ServiceAccount", "name": KUBELET_SA,
                             "namespace": SYSTEM_NS}]}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))


def operator_rbac(cluster: Cluster) -> tuple[list[Obj], str]:
    """The chart's operator ClusterRole and binding for release RELEASE in SYSTEM_NS, and the
    ServiceAccount the binding names."""
    objects = chart_objects(cluster, "operator-rbac.yaml", RELEASE, SYSTEM_NS)
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    return objects, str(binding["subjects"][0]["name"])


def token_kubeconfig(cluster: Cluster, namespace: str, sa: str, path: Path) -> Path:
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=4 * 3600))
    token = cluster.core.create_namespaced_service_account_token(sa, namespace, request)
    path.write_text(yaml.safe_dump(cluster.plane.kubeconfig_for(
        service_account(namespace, sa), {"token": token.status.token})))
    path.chmod(0o600)
    return path


def ready_nodes(cluster: Cluster) -> set[str]:
    return {n.metadata.name for n in cluster.core.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])}


def check_nodes(cluster: Cluster, names: set[str], phase: str) -> int:
    """How many nodes are not Ready after ``phase``; says so, as it makes that phase's
    figures suspect (pods wait for nodes that the scheduler no longer uses)."""
    missing = len(names - ready_nodes(cluster))
    if missing:
        print(f"WARNING: {missing} of {len(names)} nodes not Ready after the {phase}: "
              f"figures of that phase are suspect", flush=True)
    return missing


def worker_statuses(custom: client.CustomObjectsApi) -> list[Obj]:
    listing = custom.list_cluster_custom_object(api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL)
    return list(listing.get("items", []))


def stale_writes(custom: client.CustomObjectsApi) -> int:
    """The refused stale writes of every WorkerStatus, as the status server sums them."""
    return sum(int((ws.get("status") or {}).get("staleWritesRejected") or 0)
               for ws in worker_statuses(custom))


def clear(cluster: Cluster, system: str, ns: str) -> None:
    """Delete a phase's jobs and wait until their pods are gone too. The namespace stays, so
    that the operator's watches in it go on without a new list."""
    if system == KUZK:
        client.CustomObjectsApi(cluster.api).delete_collection_namespaced_custom_object(
            api.GROUP, api.VERSION, ns, api.PROOFJOB_PLURAL)
    else:
        client.BatchV1Api(cluster.api).delete_collection_namespaced_job(
            ns, propagation_policy="Background")

    def empty() -> bool:
        if cluster.core.list_namespaced_pod(ns, limit=1).items:
            return False
        if system == KUZK:
            return not client.CustomObjectsApi(cluster.api).list_namespaced_custom_object(
                api.GROUP, api.VERSION, ns, api.PROOFJOB_PLURAL, limit=1)["items"]
        return not client.BatchV1Api(cluster.api).list_namespaced_job(ns, limit=1).items

    wait_for(empty, 600, f"the {system} jobs and pods of {ns} gone", 2)


# --- running a phase ---------------------------------------------------------------------------
def run_phase(cluster: Cluster, system: str, ns: str, manifests: list[Obj],
              partitions: dict[str, int], timeout: float) -> Phase:
    custom, batch, core = (client.CustomObjectsApi(cluster.api), client.BatchV1Api(cluster.api),
                           cluster.core)
    phase = Phase(system, partitions)
    if system == KUZK:
        list_jobs: Callable[..., Any] = partial(custom.list_namespaced_custom_object, api.GROUP,
                                                api.VERSION, ns, api.PROOFJOB_PLURAL)
        create: Callable[[Obj], Any] = partial(custom.create_namespaced_custom_object,
                                               api.GROUP, api.VERSION, ns, api.PROOFJOB_PLURAL)
    else:
        list_jobs = partial(batch.list_namespaced_job, ns)
        create = partial(batch.create_namespaced_job, ns)
    streams = [Follow(f"pods in {ns}", partial(core.list_namespaced_pod, ns), phase.on_pod),
               Follow(f"{system} jobs in {ns}", list_jobs, phase.on_job)]
    try:
        start_all(streams)
        phase.t0 = time.monotonic()
        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(create, manifests))
        deadline = time.monotonic() + timeout
        while not phase.done.wait(5):
            broken = [s for s in streams if s.error]
            if broken:
                raise RuntimeError(f"watch {broken[0].what} failed: {broken[0].error}")
            if time.monotonic() > deadline:
                print(f"WARNING: {system}: only {len(phase.finished)} of {len(partitions)} "
                      f"jobs finished after {timeout:.0f}s; reporting what was seen",
                      flush=True)
                with phase.lock:
                    phase.t_end = time.monotonic()
                break
            print(f"  {system}: {len(phase.finished)}/{len(partitions)} jobs finished, "
                  f"{len(phase.succeeded_at)} partitions succeeded, "
                  f"{time.monotonic() - phase.t0:.0f}s, load {os.getloadavg()[0]:.1f}",
                  flush=True)
    finally:
        for stream in streams:
            stream.close()
    phase.relists = sum(stream.relists for stream in streams)
    phase.probe_kills = probe_kills(core, ns, phase.attempts)
    return phase


def probe_kills(core: client.CoreV1Api, ns: str, pods: set[str]) -> int:
    """Containers of ``pods`` that a kubelet killed on a failed probe: its ``Killing`` Events
    (the stand-in answers every probe while it serves a pod, so each is of a live prover)."""
    events = core.list_namespaced_event(ns, field_selector="reason=Killing").items
    return sum(1 for e in events if e.involved_object.uid in pods)




# --- report ----------------------------------------------------------------------------------
def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _verdict(ok: bool | None) -> str:
    return "unknown" if ok is None else "met" if ok else "MISSED"


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
        print(f"\n{'round':<6} {'kuzk s':>8} {'job s':>8} {'ratio':>6}  first")
        order = result["order"]
        for i, (ks, js, r) in enumerate(zip(result["seconds"][KUZK], result["seconds"][JOB],
                                            result["round_ratios"], strict=True)):
            print(f"{i + 1:<6} {ks:>8.1f} {js:>8.1f} {r:>6.2f}  {order[i % 2]}")
    ratio = result["completion_ratio"]
    median = " (median of the rounds)" if rounds > 1 else ""
    print(f"\ncompletion-time ratio kuzk/job{median} {ratio:.2f} "
          f"(goal <= {GOALS['completion_ratio']}): "
          f"{_verdict(ratio <= GOALS['completion_ratio'])}; "
          f"partitions/s ratio kuzk/job {1 / ratio:.2f}")
    _per_attempt(result)
    _comparisons(result)
    _operator_requests(op)
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


def _per_attempt(result: Obj) -> None:
    fk, fj = result["per_attempt"][KUZK], result["per_attempt"][JOB]
    rounds = result["rounds"]
    print(f"\nper partition attempt{f' (median of {rounds} rounds)' if rounds > 1 else ''}; "
          f"{result['nodes']} nodes x {result['gpus']} GPUs x {result['lanes']} lanes")
    print(f"  {'':<52} {'kuzk':>10} {'job':>10}  goal (issue 28)")
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
    print("  409 Conflicts by component and call (audit log's responseStatus)")
    conflicted = sorted({key.split("|", 1)[1] for f in (fk, fj) for key in f
                         if key.startswith("409|")})
    for who_call in conflicted:
        who, call = who_call.split("|")
        _row(f"  {who:<20} {call}", fk.get(f"409|{who_call}", 0.0),
             fj.get(f"409|{who_call}", 0.0))
    if not conflicted:
        print("    none")
    print("  WorkerStatus writes that succeeded, by writer and what each moved (a watch's "
          "change, told by the audit entry's resourceVersion)")
    kinds = sorted({key.split("|", 1)[1] for f in (fk, fj) for key in f
                    if key.startswith("ws_kind|")},
                   key=lambda k: (k.split("|")[0], _kind_order(k.split("|")[1])))
    for who_kind in kinds:
        who, kind = who_kind.split("|")
        _row(f"  {who:<20} {kind}", fk.get(f"ws_kind|{who_kind}", 0.0),
             fj.get(f"ws_kind|{who_kind}", 0.0))
    if not kinds:
        print("    none")
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
    op_cpu, kcm_cpu = fk.get(f"cpu_ms|{OPERATOR}"), fj.get("cpu_ms|kube-controller-manager")
    r_op = _ratio(op_cpu, kcm_cpu)
    print("\nagainst kube-controller-manager's job controller")
    print(f"  operator CPU per attempt {_fmt(op_cpu, '.1f')} ms, kube-controller-manager's per "
          f"Job pod {_fmt(kcm_cpu, '.1f')} ms: {_fmt(r_op)}x "
          f"(goal <= {GOALS['operator_cpu_vs_kcm']:g}x): "
          f"{_verdict(None if r_op is None else r_op <= GOALS['operator_cpu_vs_kcm'])}")
    api_k, api_j = fk.get("cpu_ms|kube-apiserver"), fj.get("cpu_ms|kube-apiserver")
    r_api = _ratio(api_k, api_j)
    print(f"  kube-apiserver CPU per attempt for kuzk's whole system {_fmt(api_k, '.1f')} ms, "
          f"for the Job run {_fmt(api_j, '.1f')} ms: {_fmt(r_api)}x "
          f"(goal <= {GOALS['apiserver_cpu_vs_job']:g}x): "
          f"{_verdict(None if r_api is None else r_api <= GOALS['apiserver_cpu_vs_job'])}")
    kub_k, kub_j = fk.get("cpu_ms|kubelets"), fj.get("cpu_ms|kubelets")
    r_kub = _ratio(kub_k, kub_j)
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


def _projection(result: Obj) -> None:
    fleet = Fleet(**result["fleet"])
    pk, pj = result["projection"][KUZK], result["projection"][JOB]
    fk = result["per_attempt"][KUZK]
    print(f"\nprojection to {fleet.gpus:,} GPUs x {fleet.lanes} lanes, {fleet.partition_s:g} s "
          f"partitions: {fleet.attempts_per_s:.0f} partition attempts/s (per-attempt counts "
          f"above x attempts/s)")
    print(f"  {'':<52} {'kuzk':>10} {'job':>10}  goal (issue 28)")
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
    _row("kube-apiserver cores", pk["apiserver_cores"], pj["apiserver_cores"],
         f"<= 2x the Job run's: {_verdict(pk['apiserver_cores'] <= 2 * pj['apiserver_cores'])}")
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


def _standin_summary(before: Obj, after: Obj) -> Obj:
    counts = Counter(after["counts"])
    counts.subtract(before["counts"])
    latency = {op: sorted(v[len(before["latency"].get(op, [])):])
               for op, v in after["latency"].items()}

    def p50_p99(op: str) -> str:
        values = latency.get(op, [])
        return (f"{_fmt(_quantile(values, .5), '.3f')}/"
                f"{_fmt(_quantile(values, .99), '.3f')} s")

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
            "claim_p99_s": _quantile(latency.get("claim", []), .99),
            "acquire_p99_s": _quantile(latency.get("acquire", []), .99),
            "release_p99_s": _quantile(latency.get("release", []), .99), "gave_up": gave_up,
            "lane_s": statistics.fmean(lanes) if lanes else 0.0}


# --- main --------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64, help="GPU nodes (default 64)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--lanes", type=int, default=1,
                        help="partition pods per GPU: its time-slicing replicas (default 1)")
    parser.add_argument("--jobs", type=int, default=200, help="jobs per system (default 200)")
    parser.add_argument("--work", type=float, nargs=2, default=(0.5, 2.0), metavar=("MIN", "MAX"),
                        help="seconds a stand-in partition works (default 0.5 2.0)")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds each phase may take (default 1800)")
    parser.add_argument("--job-first", action="store_true",
                        help="run the Jobs before the ProofJobs (default: ProofJobs first)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of both systems, each round's order the reverse of the one "
                             "before; figures are the medians of the rounds' (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep the operator's and stand-in's logs here")
    return parser


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that every finally below stops what it started


def _admin_context(plane: ControlPlane) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
    context.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
    return context


@dataclass
class Gauges:
    """The counters read around a phase: etcd's, kube-apiserver's, the operator's."""

    etcd: dict[str, Counter[str]]
    apiserver: dict[str, Counter[str]]
    operator: dict[str, Counter[str]] | None  # its /metrics (None: no operator running)
    kopf: Obj | None  # bench/counted_operator.py's counts


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (min(args.nodes, args.gpus, args.lanes, args.jobs, args.rounds) < 1
            or not 0 < args.work[0] <= args.work[1]):
        parser.error("--nodes, --gpus, --lanes, --jobs and --rounds must be at least 1; "
                     "--work needs 0 < MIN <= MAX")
    signal.signal(signal.SIGTERM, _sigterm)
    started = time.monotonic()
    names = [f"fleet-{i:03d}" for i in range(args.jobs)]
    manifests = [proofjob(n, KINDS[i % len(KINDS)], deadline_s=DEADLINE_S)
                 for i, n in enumerate(names)]
    partitions = {n: api.PROOF_KINDS[m["spec"]["proofKind"]].partitions
                  for n, m in zip(names, manifests, strict=True)}
    print(f"fleet scale: {args.nodes} nodes x {args.gpus} GPUs x {args.lanes} lanes "
          f"(time-slicing replicas), {args.jobs} jobs per system "
          f"({sum(partitions.values())} partitions), kinds {', '.join(KINDS)} in turn; "
          f"kuzk from {Path(kuzk.__file__).parent}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs", flush=True)
    print(f"stand-in prover: NOT a real proof. One process serves every partition pod: a "
          f"ProofJob's through kuzk_prover.reporter (join, stages, the GPU phase, leave: "
          f"writes only when its lane moves; at most 8 of its "
          f"WorkerStatus writes in flight), a Job's with work only (its GPU part in its GPU's "
          f"turn); each partition works "
          f"{args.work[0]:g}-{args.work[1]:g} s.", flush=True)

    with tempfile.TemporaryDirectory(prefix="kuzk-fleet-") as tmp, contextlib.ExitStack() as stack:
        logs = args.log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        # Every identity must be known before kube-apiserver starts (audit policy).
        operator_sa = f"{RELEASE}-kuzk-operator"
        users = {service_account(SYSTEM_NS, operator_sa): OPERATOR,
                 service_account(SYSTEM_NS, PROVER_SA): PROVERS,
                 service_account(SYSTEM_NS, KUBELET_SA): KUBELET}
        plane = ControlPlane(audit_policy=audit_policy(
            [u for u, who in users.items() if who in (OPERATOR, PROVERS)]))
        plane.start()
        stack.callback(plane.stop)
        admin = str(plane.admin_kubeconfig()["users"][0]["name"])  # type: ignore[index]
        cluster = Cluster(plane)
        install_kuzk(cluster)
        rbac, bound_sa = operator_rbac(cluster)
        if bound_sa != operator_sa:
            msg = f"the chart binds the operator role to {bound_sa}, not {operator_sa}"
            raise RuntimeError(msg)
        namespace(cluster, SYSTEM_NS, operator_sa, PROVER_SA, KUBELET_SA)
        namespace(cluster, KUZK_NS, PROVER_SA)
        namespace(cluster, JOB_NS, PROVER_SA)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
        bind_prover_role(cluster)
        bind_kubelet(cluster)
        operator_kc = token_kubeconfig(cluster, SYSTEM_NS, operator_sa, Path(tmp) / "op.kc")
        prover_kc = token_kubeconfig(cluster, SYSTEM_NS, PROVER_SA, Path(tmp) / "prover.kc")
        kubelet_kc = token_kubeconfig(cluster, SYSTEM_NS, KUBELET_SA, Path(tmp) / "kubelet.kc")
        etcd_metrics = plane.component("etcd").health_url.rsplit("/", 1)[0] + "/metrics"
        context = _admin_context(plane)

        nodes = set(node_names(args.nodes))
        # The kubelets run in a process of their own, so that their threads (one per pod)
        # don't starve this process's watches; see bench/fleet_kubelets.py.
        kubelets = stack.enter_context(process(
            [sys.executable, str(ROOT / "bench" / "fleet_kubelets.py"), "--kubeconfig",
             str(kubelet_kc), "--server", plane.server, "--ca-cert",
             str(plane.pki.ca_cert), "--workdir", str(Path(tmp) / "kubelets"), "--nodes",
             str(args.nodes), "--gpus", str(args.gpus), "--replicas", str(args.lanes)],
            cluster.env(), logs / "kubelets.log", grace=60))
        wait_for(lambda: nodes <= ready_nodes(cluster), 180, "nodes Ready", 1)

        standin = stack.enter_context(process(
            [sys.executable, str(ROOT / "bench" / "fleet_standin.py"), "--kubeconfig",
             str(prover_kc), "--work",
             *map(str, args.work), "--bare-namespace", JOB_NS],
            cluster.env(), logs / "standin.log", stdout=subprocess.PIPE))
        assert standin.stdout is not None
        first = standin.stdout.readline().decode().split()
        if first[:1] != ["PORT"]:
            msg = f"the stand-in did not start; see {logs / 'standin.log'}"
            raise RuntimeError(msg)
        port = int(first[1])
        command = pod_command(port)

        counts_file = Path(tmp) / "counts"
        metrics_port = free_port()
        op_env = {**cluster.env(), "KUBECONFIG": str(operator_kc),
                  "KUZK_BENCH_COUNTS": str(counts_file)}
        custom = client.CustomObjectsApi(cluster.api)
        starts = 0

        def start_operator() -> tuple[subprocess.Popen[bytes], Path]:
            """The operator, once it watches everything it reconciles from (its first lists
            fall before the phase it serves, as the Job controller's did)."""
            nonlocal starts
            starts += 1
            log = logs / f"operator-{starts}.log"
            audit_from = plane.audit_log.stat().st_size
            op = stack.enter_context(process(
                [sys.executable, str(ROOT / "bench" / "counted_operator.py"), "operator",
                 "--standalone", "--namespace", KUZK_NS, "--prover-command",
                 json.dumps(command), "--prover-image", IMAGE, "--metrics-port",
                 str(metrics_port), "--metrics-address", "127.0.0.1"],
                op_env, log))

            def watching() -> bool:
                calls = Calls.read(plane.audit_log, audit_from, plane.audit_log.stat().st_size,
                                   users, admin).of(OPERATOR)
                return op.poll() is not None or all(
                    calls[f"watch {r}"] for r in ("proofjobs", "pods", WORKERSTATUS))

            wait_for(watching, 120, "the operator's watches", 0.5)
            wait_for(lambda: read_counts(counts_file) is not None or op.poll() is not None, 10,
                     "the operator's counts", 0.2)
            if op.poll() is not None:
                msg = f"the operator exited {op.returncode}; see {log}"
                raise RuntimeError(msg)
            return op, log

        def gauges(running: bool) -> Gauges:
            own = None
            if running:
                own = scrape(f"http://127.0.0.1:{metrics_port}/metrics")
            return Gauges(scrape(etcd_metrics), scrape(f"{plane.server}/metrics", context),
                          own, read_counts(counts_file) if running else None)
        operator: subprocess.Popen[bytes] | None
        operator, operator_log = start_operator()
        # What each WorkerStatus write moved, seen by a watch of them all run long.
        moves = Moves()
        ws_follow = Follow("workerstatuses", partial(custom.list_cluster_custom_object,
                                                     api.GROUP, api.VERSION, WORKERSTATUS),
                           moves.on_event)
        start_all([ws_follow])
        stack.callback(ws_follow.close)
        print(f"control plane, {args.nodes} nodes, stand-in and operator up in "
              f"{time.monotonic() - started:.0f}s", flush=True)

        settings = PodSettings(image=IMAGE, command=tuple(command))
        twins = [indexed_job(m, JOB_NS, settings) for m in manifests]
        load: dict[str, float] = {}
        not_ready = 0
        order = (JOB, KUZK) if args.job_first else (KUZK, JOB)
        # Where the machine's CPU went in each phase: the control plane, the kubelets and the
        # stand-in serve both systems; the operator is kuzk's, the job controller's share is
        # inside kube-controller-manager.
        pids = {c.name: c.proc.pid for c in plane.components if c.proc is not None}
        pids |= {"kubelets": kubelets.pid, "stand-in": standin.pid}
        phase_cpu: dict[str, defaultdict[str, float]] = {KUZK: defaultdict(float),
                                                         JOB: defaultdict(float)}
        seconds: dict[str, list[float]] = {KUZK: [], JOB: []}
        rounds: dict[str, list[Figures]] = {KUZK: [], JOB: []}
        last: dict[str, Phase] = {}  # each system's last phase
        standin_stats: dict[str, Obj] = {}
        stale: dict[str, int] = {KUZK: 0, JOB: 0}  # stale writes refused, by phase
        op_calls, attempts, syncs, rss, gave_up = Calls(), 0, 0, 0.0, 0
        event_sources: dict[str, str] = {}
        # Rounds alternate which system goes first, so neither always meets a fresh or a used
        # control plane.
        sequence = [system for r in range(args.rounds)
                    for system in (order if r % 2 == 0 else order[::-1])]
        for system in sequence:
            if system == JOB and operator is not None:
                # The Jobs run without the operator: the comparison is with the job
                # controller alone, and the operator's sweep has no business with their pods.
                stop_group(operator, grace=20)
                operator = None
            if system == KUZK and operator is None:
                operator, operator_log = start_operator()
            ns, jobs, what = ((KUZK_NS, manifests, "ProofJobs") if system == KUZK
                              else (JOB_NS, twins, "Jobs"))
            cpu_before, standin_before = cpu_by_process(pids), stats_of(port)
            stale_before = stale_writes(custom)
            audit_start = plane.audit_log.stat().st_size
            operator_cpu_start = cpu_seconds(operator.pid) if operator is not None else 0.0
            before = gauges(operator is not None)
            load[f"{system}_before"] = os.getloadavg()[0]
            try:
                phase = run_phase(cluster, system, ns, jobs, partitions, args.timeout)
            except BaseException:
                if operator is not None:
                    state = ("running" if operator.poll() is None
                             else f"exited {operator.returncode}")
                    print(f"\nfailed; operator {state}; its log: {operator_log}",
                          file=sys.stderr)
                raise
            if operator is not None:  # its counts of the whole phase: the file's next write
                wait_for(partial(rewritten, counts_file, counts_file.stat().st_mtime_ns), 10,
                         "the operator's counts after the phase", 0.1)
            after = gauges(operator is not None)
            cpu_after = cpu_by_process(pids)
            calls = Calls.read(plane.audit_log, audit_start, plane.audit_log.stat().st_size,
                               users, admin)
            not_ready += check_nodes(cluster, nodes, what)
            # The watch sees a write's change a moment after the audit log has it; a write
            # that changed nothing never shows (nor does one a relist missed): UNSEEN.
            shown = partial(lambda ws: all(moves.of(w) for w in ws), updates(calls.written))
            with contextlib.suppress(TimeoutError):
                wait_for(shown, 10, "the WorkerStatus watch to show the phase's writes", 0.1)
            if ws_follow.error is not None:
                msg = f"the WorkerStatus watch failed: {ws_follow.error}"
                raise RuntimeError(msg)
            load[f"{system}_after"] = os.getloadavg()[0]
            last[system] = phase
            seconds[system].append(phase.t_end - phase.t0)
            standin_stats[system] = _standin_summary(standin_before, stats_of(port))
            gave_up += standin_stats[system]["gave_up"]
            stale[system] += stale_writes(custom) - stale_before
            cpu = {name: cpu_after[name] - cpu_before[name] for name in pids}
            events: dict[str, float] | None = None
            if operator is not None:
                cpu[OPERATOR] = cpu_seconds(operator.pid) - operator_cpu_start
                rss = max(rss, peak_rss_mb(operator.pid))
                op_calls.add(calls, OPERATOR)
                attempts += len(phase.attempts)
                kopf = Counter((after.kopf or {}).get("watch_events", {}))
                kopf.subtract((before.kopf or {}).get("watch_events", {}))
                own = (delta(before.operator or {}, after.operator or {}, OPERATOR_WATCH_EVENTS)
                       if OPERATOR_WATCH_EVENTS in (after.operator or {}) else None)
                events, sources = operator_events(kopf, own)
                event_sources |= sources
                syncs += int((after.kopf or {}).get("syncs", 0)) - int(
                    (before.kopf or {}).get("syncs", 0))
            for name, used in cpu.items():
                phase_cpu[system][name] += used
            summary = phase.summary()
            rounds[system].append(Cost(
                system=system, attempts=len(phase.attempts), calls=calls, cpu_s=cpu,
                etcd_wal_bytes=sum(delta(before.etcd, after.etcd,
                                         "etcd_disk_wal_write_bytes_total").values()),
                etcd_puts=sum(delta(before.etcd, after.etcd, "etcd_mvcc_put_total").values()),
                apiserver_events=delta(before.apiserver, after.apiserver,
                                       "apiserver_watch_events_total"),
                apiserver_event_bytes=delta(before.apiserver, after.apiserver,
                                            "apiserver_watch_events_sizes_sum"),
                operator_events=events,
                ws_kinds=write_kinds(calls.written, moves.of),
                lane_s=float(standin_stats[system]["lane_s"]),
                lag_p50_s=summary["lag_p50_s"], lag_p99_s=summary["lag_p99_s"]).figures())
            print(f"{what} done in {phase.t_end - phase.t0:.1f}s; deleting them", flush=True)
            clear(cluster, system, ns)

        attempts = max(attempts, 1)
        by_verb: Counter[str] = Counter()
        for call, n in op_calls.of(OPERATOR).items():
            by_verb[call.split(" ", 1)[0]] += n
        lists = by_verb.get("list", 0)
        ratios = [k / j for k, j in zip(seconds[KUZK], seconds[JOB], strict=True)]
        per_attempt = {KUZK: medians(rounds[KUZK]), JOB: medians(rounds[JOB])}
        result = {
            "kuzk_module": str(Path(kuzk.__file__).parent),
            "nodes": args.nodes, "gpus": args.gpus, "lanes": args.lanes, "jobs": args.jobs,
            "work_s": list(args.work),
            "load_average": load, "nodes_not_ready": not_ready,
            "kuzk": last[KUZK].summary(), "job": last[JOB].summary(),
            "operator": {
                "user": service_account(SYSTEM_NS, operator_sa), "attempts": attempts,
                "by_verb": dict(by_verb), "by_call": dict(op_calls.of(OPERATOR)),
                "conflicts": sum(op_calls.conflicts.values()),
                "requests_per_attempt": sum(by_verb.values()) / attempts,
                "per_attempt_by_verb": {v: n / attempts for v, n in by_verb.items()},
                "syncs": syncs, "get_proofjobs": op_calls.of(OPERATOR).get("get proofjobs", 0),
                "lists_per_sync": lists / syncs if syncs else None,
                "cpu_s": phase_cpu[KUZK][OPERATOR], "peak_rss_mb": rss,
            },
            "order": list(order), "rounds": args.rounds, "cpu_s": phase_cpu,
            "seconds": seconds, "round_ratios": ratios,
            "per_attempt": per_attempt, "per_attempt_rounds": rounds,
            "event_sources": event_sources, "gave_up": gave_up,
            "ws_watch_relists": ws_follow.relists,
            "fleet": {"gpus": FLEET.gpus, "lanes": FLEET.lanes,
                      "partition_s": FLEET.partition_s},
            "projection": {s: projection(per_attempt[s], s, FLEET) for s in (KUZK, JOB)},
            "standin": standin_stats[KUZK],
            "standin_job": standin_stats[JOB],
            "stale_writes_refused": stale,
        }
        result["completion_ratio"] = statistics.median(ratios)
        report(result)
        print(f"load average during: ProofJobs {load['kuzk_before']:.1f} -> "
              f"{load['kuzk_after']:.1f}, Jobs {load['job_before']:.1f} -> "
              f"{load['job_after']:.1f}; total {time.monotonic() - started:.0f}s", flush=True)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2, sort_keys=True))
    failed = {s: result[s]["failed_jobs"] for s in (KUZK, JOB) if result[s]["failed_jobs"]}
    if failed:
        print(f"jobs failed, the figures are not a fleet's: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
