"""The kuzk operator at fleet scale, against the Indexed Job controller, on one control plane.

Why: the operator's cost must not grow with every event of a fleet (issue 12). This run
counts what it spends per partition, from the API server's own audit log, and races it
against the batch/v1 Job controller running the same pods in the same run.

How: one test control plane (etcd, kube-apiserver with an audit policy at Metadata level for
the operator's ServiceAccount only, kube-controller-manager with its job controller,
kube-scheduler) and a process kubelet with ``--nodes`` x ``--gpus`` GPU nodes. The operator
runs as a process under its own ServiceAccount, bound to the chart's operator ClusterRole.
Partition pods run a stand-in prover (``bench/fleet_standin.py``): one process serves every
pod through kuzk's real WorkerStatus protocol (claim, stage writes, heartbeats, release) and
each partition works 0.5-2 s instead of proving. ``--jobs`` ProofJobs of the four kinds in
turn (winning-post, snap-update, window-post, porep-c2; partitions by kind) are created at
once; when all have finished, they are deleted, the operator is stopped, and the
same number of Indexed Jobs (twins from ``bench/twins.py``: pods from kuzk's own pod builder)
run the same way. ``--job-first`` runs the Jobs first, then starts the operator again (a
fresh process) for the ProofJobs. ``--rounds N`` runs both N times, each round in the reverse
order of the one before, and takes the median of the rounds' ratios: on two cores one round's
times move by a fifth from run to run.

Reported per system: partitions/s from the first create to the last job finished, and the
ratio; the p50/p99 lag from a partition pod's Succeeded (as a watch sees it) to its job's
status showing the partition done (ProofJob status.partitions; Job completedIndexes). For
the operator: API requests per partition attempt by verb and resource, LISTs per sync (a
sync is one pass of ``reconcile``, counted by ``bench/counted_operator.py``, the wrapper the
operator runs under), its CPU seconds and peak RSS. Goals from issue 12 are printed beside each.

    .venv/bin/python bench/fleet_scale.py [--nodes 64] [--gpus 8] [--jobs 200] [--rounds 1]
        [--job-first] [--json out]

Needs the control-plane binaries (``bash tests/testenv/build``). Wall-clock figures move with
the machine's load, printed with them; the counts per partition are the point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from kubernetes import client

import kuzk
from kuzk import api
from kuzk.pods import PodSettings
from kuzk.ranges import expand

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from fleet_kubelets import node_names  # noqa: E402
from fleet_standin import pod_command, stats_of  # noqa: E402
from follow import Follow, start_all  # noqa: E402
from twins import COMPLETION_INDEX, JOB_NAME_LABEL, indexed_job, proofjob  # noqa: E402

from tests.testenv.cluster import Cluster, chart_objects, install_kuzk  # noqa: E402
from tests.testenv.controlplane import ControlPlane, stop_group  # noqa: E402
from tests.testenv.waiting import wait_for  # noqa: E402

KINDS = ("winning-post", "snap-update", "window-post", "porep-c2")
SYSTEM_NS, KUZK_NS, JOB_NS = "kuzk-bench", "fleet-kuzk", "fleet-job"
RELEASE = "bench"  # the chart's objects are named <release>-kuzk-...
PROVER_SA = "kuzk-prover"
IMAGE = "kuzk-standin:bench"
DEADLINE_S = 3600  # every job gets it, so no kind's default deadline (25 s) ends a queued job
CREATORS = 8
KUZK, JOB = "kuzk", "job"
GOALS = {"requests_per_attempt": 8.0, "lists_per_sync": 0.0, "lag_p99_s": 2.0,
         "completion_ratio": 1.0, "rss_mb": 400.0}
Obj = dict[str, Any]


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
        if self.system == KUZK:
            shown = [p["index"] for p in status.get("partitions") or [] if p.get("state") == "done"]
            phase = status.get("phase")
            end = None if phase not in ("Succeeded", "Failed") else phase == "Succeeded"
        else:
            shown = expand(status.get("completedIndexes") or "")
            true = {c["type"] for c in status.get("conditions") or [] if c["status"] == "True"}
            end = True if "Complete" in true else False if "Failed" in true else None
        with self.lock:
            for index in shown:
                self.shown_at.setdefault((name, index), arrival)
            if end is not None and name not in self.finished:
                self.finished[name] = (arrival, end)
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
        return {"system": self.system, "jobs": len(self.partitions), "partitions": total,
                "attempts": len(self.attempts), "failed_jobs": failed,
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


# --- the operator's side: identity, process, CPU, memory, audit ------------------------------
def audit_policy(user: str) -> Obj:
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata", "users": [user]}, {"level": "None"}]}


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
    user = f"system:serviceaccount:{namespace}:{sa}"
    path.write_text(yaml.safe_dump(cluster.plane.kubeconfig_for(user,
                                                                {"token": token.status.token})))
    path.chmod(0o600)
    return path


def read_syncs(path: Path) -> int | None:
    """The operator's sync count so far (bench/counted_operator.py), None before its first
    report."""
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return None


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


@dataclass
class Requests:
    """The operator's API requests in one window of the audit log."""

    by_verb: Counter[str] = field(default_factory=Counter)
    by_call: Counter[str] = field(default_factory=Counter)
    conflicts: int = 0

    def add(self, other: Requests) -> None:
        self.by_verb.update(other.by_verb)
        self.by_call.update(other.by_call)
        self.conflicts += other.conflicts

    @classmethod
    def read(cls, log: Path, start: int, end: int) -> Requests:
        out = cls()
        with log.open("rb") as f:
            f.seek(start)
            data = f.read(end - start)
        for line in data.splitlines():
            event = json.loads(line)
            verb = event["verb"]
            if event["stage"] != ("ResponseStarted" if verb == "watch" else "ResponseComplete"):
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "?") + (
                f"/{ref['subresource']}" if ref.get("subresource") else "")
            out.by_verb[verb] += 1
            out.by_call[f"{verb} {resource}"] += 1
            out.conflicts += (event.get("responseStatus") or {}).get("code") == 409
        return out


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
    return phase


# --- report ----------------------------------------------------------------------------------
def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


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
        if s["failed_jobs"]:
            print(f"       failed: {', '.join(s['failed_jobs'][:10])}")
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
          f"{'met' if ratio <= GOALS['completion_ratio'] else 'MISSED'}; "
          f"partitions/s ratio kuzk/job {1 / ratio:.2f}")
    lag = k["lag_p99_s"]
    print(f"ProofJob status lag p99 {_fmt(lag)} s (goal < {GOALS['lag_p99_s']}): "
          f"{'met' if lag is not None and lag < GOALS['lag_p99_s'] else 'MISSED'}")
    attempts = op["attempts"]
    print(f"\noperator API requests during the ProofJob phases (audit log, user {op['user']}),"
          f" per partition attempt ({attempts} attempts)")
    for verb, n in sorted(op["by_verb"].items(), key=lambda kv: -kv[1]):
        print(f"  {verb:<8} {n:>7} {n / attempts:>8.2f}")
    print("  by call:")
    for call, n in sorted(op["by_call"].items(), key=lambda kv: -kv[1]):
        print(f"    {call:<40} {n:>7} {n / attempts:>8.2f}")
    total = op["requests_per_attempt"]
    print(f"  total {sum(op['by_verb'].values())} = {total:.2f} per attempt "
          f"(goal <= {GOALS['requests_per_attempt']:.0f}): "
          f"{'met' if total <= GOALS['requests_per_attempt'] else 'MISSED'}; "
          f"409 answers {op['conflicts']}")
    lps = op["lists_per_sync"]
    print(f"  LISTs {op['by_verb'].get('list', 0)}, syncs {op['syncs']} (reconcile passes): "
          f"LISTs per sync {_fmt(lps)} (goal 0): "
          f"{'met' if lps == 0 else 'MISSED' if lps is not None else 'unknown'}")
    print(f"operator CPU {op['cpu_s']:.1f} s during the ProofJob phases; peak RSS "
          f"{op['peak_rss_mb']:.0f} MB (goal < {GOALS['rss_mb']:.0f}): "
          f"{'met' if op['peak_rss_mb'] < GOALS['rss_mb'] else 'MISSED'}")
    cpu = result["cpu_s"]
    names = sorted({n for phase in cpu.values() for n in phase})
    print("\nCPU seconds by process during each phase (2 cores: what one system spends, the "
          "other's pods wait for)")
    print(f"{'process':<24} {'kuzk':>8} {'job':>8}")
    for name in names:
        print(f"{name:<24} {cpu[KUZK].get(name, 0.0):>8.1f} {cpu[JOB].get(name, 0.0):>8.1f}")
    print(f"{'total':<24} {sum(cpu[KUZK].values()):>8.1f} {sum(cpu[JOB].values()):>8.1f}")
    sw = result["standin"]
    print(f"\nstand-in prover (one process, kuzk_prover.reporter's ProverReporter)\n"
          f"  ProofJobs: {sw['summary']}\n  Jobs:      {result['standin_job']['summary']}")
    stale = result["stale_writes_refused"]
    print(f"stale writes refused (the WorkerStatuses' staleWritesRejected, every writer): "
          f"{stale[KUZK]} in the ProofJob phases, {stale[JOB]} in the Job phases")


def _standin_summary(before: Obj, after: Obj) -> Obj:
    counts = Counter(after["counts"])
    counts.subtract(before["counts"])
    latency = {op: sorted(v[len(before["latency"][op]):]) for op, v in after["latency"].items()}
    puts = counts.get("put", 0)
    gave_up = sum(n for key, n in counts.items() if key.endswith("_gave_up"))
    line = (f"{counts.get('pods', 0)} pods, {counts.get('claim', 0)} claims, "
            f"{counts.get('stage', 0)} stage writes, {counts.get('heartbeat', 0)} heartbeats, "
            f"{counts.get('release', 0)} releases; {puts} PUTs, "
            f"{counts.get('put_409', 0) / puts if puts else 0:.1%} answered 409; "
            f"claim p50/p99 {_fmt(_quantile(latency['claim'], .5), '.3f')}/"
            f"{_fmt(_quantile(latency['claim'], .99), '.3f')} s, release p50/p99 "
            f"{_fmt(_quantile(latency['release'], .5), '.3f')}/"
            f"{_fmt(_quantile(latency['release'], .99), '.3f')} s; "
            f"writes that gave up (WorkerWriteConflict): {gave_up}")
    return {"counts": {k: v for k, v in counts.items() if v}, "summary": line,
            "claim_p99_s": _quantile(latency["claim"], .99),
            "release_p99_s": _quantile(latency["release"], .99), "gave_up": gave_up}


# --- main --------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=64, help="GPU nodes (default 64)")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--jobs", type=int, default=200, help="jobs per system (default 200)")
    parser.add_argument("--work", type=float, nargs=2, default=(0.5, 2.0), metavar=("MIN", "MAX"),
                        help="seconds a stand-in partition works (default 0.5 2.0)")
    parser.add_argument("--heartbeat", type=float, default=1.0,
                        help="stand-in heartbeat interval in seconds (default 1)")
    parser.add_argument("--timeout", type=float, default=1800,
                        help="seconds each phase may take (default 1800)")
    parser.add_argument("--job-first", action="store_true",
                        help="run the Jobs before the ProofJobs (default: ProofJobs first)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of both systems, each round's order the reverse of the one "
                             "before; the ratio is the median of the rounds' (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep the operator's and stand-in's logs here")
    return parser


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that every finally below stops what it started


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (min(args.nodes, args.gpus, args.jobs, args.rounds) < 1
            or not 0 < args.work[0] <= args.work[1]):
        parser.error("--nodes, --gpus, --jobs and --rounds must be at least 1; --work needs "
                     "0 < MIN <= MAX")
    signal.signal(signal.SIGTERM, _sigterm)
    started = time.monotonic()
    names = [f"fleet-{i:03d}" for i in range(args.jobs)]
    manifests = [proofjob(n, KINDS[i % len(KINDS)], deadline_s=DEADLINE_S)
                 for i, n in enumerate(names)]
    partitions = {n: api.PROOF_KINDS[m["spec"]["proofKind"]].partitions
                  for n, m in zip(names, manifests, strict=True)}
    print(f"fleet scale: {args.nodes} nodes x {args.gpus} GPUs, {args.jobs} jobs per system "
          f"({sum(partitions.values())} partitions), kinds {', '.join(KINDS)} in turn; "
          f"kuzk from {Path(kuzk.__file__).parent}; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs", flush=True)
    print(f"stand-in prover: NOT a real proof. One process serves every partition pod through "
          f"kuzk_prover.reporter (claim, stages, heartbeats every {args.heartbeat:g} s, "
          f"release; at most 8 of its WorkerStatus writes in flight) and each partition works "
          f"{args.work[0]:g}-{args.work[1]:g} s.", flush=True)

    with tempfile.TemporaryDirectory(prefix="kuzk-fleet-") as tmp, contextlib.ExitStack() as stack:
        logs = args.log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        # The operator's identity must be known before kube-apiserver starts (audit policy).
        operator_sa = f"{RELEASE}-kuzk-operator"
        user = f"system:serviceaccount:{SYSTEM_NS}:{operator_sa}"
        plane = ControlPlane(audit_policy=audit_policy(user))
        plane.start()
        stack.callback(plane.stop)
        cluster = Cluster(plane)
        install_kuzk(cluster)
        rbac, bound_sa = operator_rbac(cluster)
        if bound_sa != operator_sa:
            msg = f"the chart binds the operator role to {bound_sa}, not {operator_sa}"
            raise RuntimeError(msg)
        namespace(cluster, SYSTEM_NS, operator_sa, PROVER_SA)
        namespace(cluster, KUZK_NS, PROVER_SA)
        namespace(cluster, JOB_NS, PROVER_SA)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
        bind_prover_role(cluster)
        operator_kc = token_kubeconfig(cluster, SYSTEM_NS, operator_sa, Path(tmp) / "op.kc")
        prover_kc = token_kubeconfig(cluster, SYSTEM_NS, PROVER_SA, Path(tmp) / "prover.kc")

        nodes = set(node_names(args.nodes))
        # The kubelets run in a process of their own, so that their threads (one per pod)
        # don't starve this process's watches; see bench/fleet_kubelets.py.
        kubelets = stack.enter_context(process(
            [sys.executable, str(ROOT / "bench" / "fleet_kubelets.py"), "--kubeconfig",
             str(plane.kubeconfig), "--server", plane.server, "--ca-cert",
             str(plane.pki.ca_cert), "--workdir", str(Path(tmp) / "kubelets"), "--nodes",
             str(args.nodes), "--gpus", str(args.gpus)],
            cluster.env(), logs / "kubelets.log", grace=60))
        wait_for(lambda: nodes <= ready_nodes(cluster), 180, "nodes Ready", 1)

        standin = stack.enter_context(process(
            [sys.executable, str(ROOT / "bench" / "fleet_standin.py"), "--kubeconfig",
             str(prover_kc), "--heartbeat", str(args.heartbeat), "--work",
             *map(str, args.work)],
            cluster.env(), logs / "standin.log", stdout=subprocess.PIPE))
        assert standin.stdout is not None
        first = standin.stdout.readline().decode().split()
        if first[:1] != ["PORT"]:
            msg = f"the stand-in did not start; see {logs / 'standin.log'}"
            raise RuntimeError(msg)
        port = int(first[1])
        command = pod_command(port)

        syncs_file = Path(tmp) / "syncs"
        op_env = {**cluster.env(), "KUBECONFIG": str(operator_kc),
                  "KUZK_BENCH_SYNCS": str(syncs_file)}
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
                 json.dumps(command), "--prover-image", IMAGE],
                op_env, log))

            def watching() -> bool:
                calls = Requests.read(plane.audit_log, audit_from,
                                      plane.audit_log.stat().st_size).by_call
                return op.poll() is not None or all(
                    calls[f"watch {r}"] for r in ("proofjobs", "pods", "workerstatuses"))

            wait_for(watching, 120, "the operator's watches", 0.5)
            if op.poll() is not None:
                msg = f"the operator exited {op.returncode}; see {log}"
                raise RuntimeError(msg)
            return op, log

        operator: subprocess.Popen[bytes] | None
        operator, operator_log = start_operator()
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
        last: dict[str, Phase] = {}  # each system's last phase
        standin_stats: dict[str, Obj] = {}
        stale: dict[str, int] = {KUZK: 0, JOB: 0}  # stale writes refused, by phase
        requests, attempts, syncs, rss = Requests(), 0, 0, 0.0
        # Rounds alternate which system goes first, so neither always meets a fresh or a used
        # control plane.
        sequence = [system for r in range(args.rounds)
                    for system in (order if r % 2 == 0 else order[::-1])]
        for system in sequence:
            if system == JOB and operator is not None:
                # The Jobs run without the operator: its worker sweep would release the workers
                # of pods it does not know (the Jobs'), and every stage write of those pods
                # after it would be refused, sparing the stand-in a third of its writes.
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
            syncs_start = read_syncs(syncs_file)
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
            not_ready += check_nodes(cluster, nodes, what)
            load[f"{system}_after"] = os.getloadavg()[0]
            last[system] = phase
            seconds[system].append(phase.t_end - phase.t0)
            standin_stats[system] = _standin_summary(standin_before, stats_of(port))
            stale[system] += stale_writes(custom) - stale_before
            for name, used in cpu_by_process(pids).items():
                phase_cpu[system][name] += used - cpu_before[name]
            if operator is not None:
                phase_cpu[KUZK]["operator"] += cpu_seconds(operator.pid) - operator_cpu_start
                rss = max(rss, peak_rss_mb(operator.pid))
                requests.add(Requests.read(plane.audit_log, audit_start,
                                           plane.audit_log.stat().st_size))
                attempts += len(phase.attempts)
                wait_for(lambda: read_syncs(syncs_file) is not None, 10, "the sync count", 0.2)
                syncs += (read_syncs(syncs_file) or 0) - (syncs_start or 0)
            print(f"{what} done in {phase.t_end - phase.t0:.1f}s; deleting them", flush=True)
            clear(cluster, system, ns)

        attempts = max(attempts, 1)
        lists = requests.by_verb.get("list", 0)
        ratios = [k / j for k, j in zip(seconds[KUZK], seconds[JOB], strict=True)]
        result = {
            "kuzk_module": str(Path(kuzk.__file__).parent),
            "nodes": args.nodes, "gpus": args.gpus, "jobs": args.jobs,
            "work_s": list(args.work), "heartbeat_s": args.heartbeat,
            "load_average": load, "nodes_not_ready": not_ready,
            "kuzk": last[KUZK].summary(), "job": last[JOB].summary(),
            "operator": {
                "user": user, "attempts": attempts, "by_verb": dict(requests.by_verb),
                "by_call": dict(requests.by_call), "conflicts": requests.conflicts,
                "requests_per_attempt": sum(requests.by_verb.values()) / attempts,
                "per_attempt_by_verb": {v: n / attempts for v, n in requests.by_verb.items()},
                "syncs": syncs, "get_proofjobs": requests.by_call.get("get proofjobs", 0),
                "lists_per_sync": lists / syncs if syncs else None,
                "cpu_s": phase_cpu[KUZK]["operator"], "peak_rss_mb": rss,
            },
            "order": list(order), "rounds": args.rounds, "cpu_s": phase_cpu,
            "seconds": seconds, "round_ratios": ratios,
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
