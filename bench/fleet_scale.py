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
        [--rounds 1] [--job-first] [--in-flight N] [--shards 1] [--json out] [--pprof DIR]

Needs the control-plane binaries (``bash testenv/build``). Wall-clock figures move with
the machine's load, printed with them; the counts per attempt are the point.

This file runs the benchmark; ``fleet_measure.py`` holds what it measures and how counts
become figures per attempt, ``fleet_projection.py`` the projection, ``fleet_report.py`` what it
prints, and ``fleet_kubelets.py``, ``fleet_standin.py`` the nodes and the prover.
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
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import yaml
from kubernetes import client

import kuzk
from kuzk.contract import api
from kuzk.operator.decide.pods import PodSettings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from fleet_kubelets import node_names  # noqa: E402
from fleet_measure import (  # noqa: E402
    JOB,
    KUBELET,
    KUZK,
    OPERATOR,
    OPERATOR_WATCH_EVENTS,
    PROVERS,
    WORKERSTATUS,
    Calls,
    Cost,
    Figures,
    Moves,
    Obj,
    Phase,
    Writers,
    audit_policy,
    cpu_by_process,
    cpu_seconds,
    delta,
    medians,
    operator_events,
    peak_rss_mb,
    read_counts,
    rewritten,
    scrape,
    service_account,
    updates,
    write_kinds,
)
from fleet_projection import FLEET, PEAK, projection  # noqa: E402
from fleet_report import report, standin_summary  # noqa: E402
from fleet_standin import pod_command, stats_of  # noqa: E402
from follow import Follow, start_all  # noqa: E402
from twins import indexed_job, proofjob  # noqa: E402

from testenv.cluster import CHART, Cluster, chart_objects, install_kuzk  # noqa: E402
from testenv.controlplane import ControlPlane, free_port, stop_group  # noqa: E402
from testenv.waiting import wait_for  # noqa: E402

KINDS = ("winning-post", "snap-update", "window-post", "porep-c2")
SYSTEM_NS, KUZK_NS, JOB_NS = "kuzk-bench", "fleet-kuzk", "fleet-job"
RELEASE = "bench"  # the chart's objects are named <release>-kuzk-...
PROVER_SA, KUBELET_SA = "kuzk-prover", "bench-kubelet"
IMAGE = "kuzk-standin:bench"
DEADLINE_S = 3600  # every job gets it, so no kind's default deadline (25 s) ends a queued job
CREATORS = 8
KUBELET_PROCESSES = 8  # at most; each runs every 8th node


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
    its name is what the audit log tells their writes by. The API server's priority and
    fairness classifies their requests as a real kubelet's (the built-in FlowSchema
    system-nodes gives the group system:nodes the priority level system), not as any
    ServiceAccount's (workload-low): there their node leases queued behind the provers'
    lane writes, were refused (429) and let nodes go NotReady in the ProofJob phase only."""
    subject = {"kind": "ServiceAccount", "name": KUBELET_SA, "namespace": SYSTEM_NS}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "bench-kubelet"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "cluster-admin"},
               "subjects": [subject]}
    flows = {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
             "metadata": {"name": "bench-kubelet"},
             "spec": {"priorityLevelConfiguration": {"name": "system"},
                      "matchingPrecedence": 500,  # system-nodes' own
                      "distinguisherMethod": {"type": "ByUser"},
                      "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                          "name": KUBELET_SA, "namespace": SYSTEM_NS}}],
                          "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                             "resources": ["*"], "clusterScope": True,
                                             "namespaces": ["*"]}],
                          "nonResourceRules": [{"verbs": ["*"],
                                                "nonResourceURLs": ["*"]}]}]}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([binding, flows]))


def operator_rbac(cluster: Cluster, spaces: list[str]) -> tuple[list[Obj], list[str]]:
    """The chart's operator RBAC for release RELEASE in SYSTEM_NS, and the ServiceAccounts its
    ClusterRoleBinding names: with one namespace the default values' (one operator over every
    namespace), with several the chart's operator.shards, one shard per namespace."""
    if len(spaces) == 1:
        objects = chart_objects(cluster, "operator-rbac.yaml", RELEASE, SYSTEM_NS)
    else:
        shards = [{"name": f"s{i}", "namespaces": [ns]} for i, ns in enumerate(spaces)]
        version = client.VersionApi(cluster.api).get_code().git_version
        rendered = cluster.helm(
            "template", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "--kube-version",
            version, "--show-only", "templates/operator-rbac.yaml",
            "--set-json", f"operator.shards={json.dumps(shards)}").stdout
        objects = [d for d in yaml.safe_load_all(rendered) if d]
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    return objects, [str(subject["name"]) for subject in binding["subjects"]]


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
def run_phase(cluster: Cluster, system: str, jobs: list[tuple[str, Obj]],
              partitions: dict[str, int], timeout: float) -> Phase:
    """Create the jobs (each in its namespace, in the order given) and follow them until all
    have finished."""
    custom, batch, core = (client.CustomObjectsApi(cluster.api), client.BatchV1Api(cluster.api),
                           cluster.core)
    phase = Phase(system, partitions)
    streams: list[Follow] = []
    creates: dict[str, Callable[[Obj], Any]] = {}
    for ns in dict.fromkeys(ns for ns, _ in jobs):
        if system == KUZK:
            list_jobs: Callable[..., Any] = partial(
                custom.list_namespaced_custom_object, api.GROUP, api.VERSION, ns,
                api.PROOFJOB_PLURAL)
            creates[ns] = partial(custom.create_namespaced_custom_object, api.GROUP,
                                  api.VERSION, ns, api.PROOFJOB_PLURAL)
        else:
            list_jobs = partial(batch.list_namespaced_job, ns)
            creates[ns] = partial(batch.create_namespaced_job, ns)
        streams += [Follow(f"pods in {ns}", partial(core.list_namespaced_pod, ns), phase.on_pod),
                    Follow(f"{system} jobs in {ns}", list_jobs, phase.on_job)]
    try:
        start_all(streams)
        phase.t0 = time.monotonic()
        with ThreadPoolExecutor(CREATORS) as pool:
            list(pool.map(lambda job: creates[job[0]](job[1]), jobs))
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
    phase.probe_kills = sum(probe_kills(core, ns, phase.attempts) for ns in creates)
    return phase


def probe_kills(core: client.CoreV1Api, ns: str, pods: set[str]) -> int:
    """Containers of ``pods`` that a kubelet killed on a failed probe: its ``Killing`` Events
    (the stand-in answers every probe while it serves a pod, so each is of a live prover)."""
    events = core.list_namespaced_event(ns, field_selector="reason=Killing").items
    return sum(1 for e in events if e.involved_object.uid in pods)


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
    parser.add_argument("--in-flight", type=int, default=None,
                        help="the stand-in's WorkerStatus writes in flight at most, for every "
                             "pod it serves (default: no limit, each pod its own writer)")
    parser.add_argument("--shards", type=int, default=1,
                        help="operator processes, each scoped to a namespace of its own (the "
                             "chart's operator.shards), the ProofJobs spread across them in "
                             "turn (default 1: one operator, as before)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep the operator's and stand-in's logs here")
    parser.add_argument("--pprof", type=Path, default=None, metavar="DIR",
                        help="write kube-apiserver's CPU profile of each phase here "
                             "(SYSTEM-ROUND-N.pb.gz; read with `go tool pprof -top "
                             "DIR/kuzk-*`)")
    return parser


class ApiserverProfile:
    """kube-apiserver's CPU profile through one phase, from Go's pprof handler
    (``/debug/pprof/profile``, on by default): back-to-back samples of ``PROFILE_S`` seconds,
    each written as ``DIR/PREFIX-N.pb.gz``, until ``stop`` (which waits for the last sample:
    at most ``PROFILE_S``); ``go tool pprof`` merges them. A sample that fails is said once and
    ends the sampling, never the run."""

    PROFILE_S = 2

    def __init__(self, plane: ControlPlane, context: ssl.SSLContext, out: Path,
                 prefix: str) -> None:
        self.url = f"{plane.server}/debug/pprof/profile?seconds={self.PROFILE_S}"
        self.context, self.out, self.prefix = context, out, prefix
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._sample, name=f"pprof {prefix}", daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        n = 0
        while not self.stopped.is_set():
            try:
                with urllib.request.urlopen(self.url, context=self.context,
                                            timeout=self.PROFILE_S + 30) as answer:
                    (self.out / f"{self.prefix}-{n}.pb.gz").write_bytes(answer.read())
            except OSError as error:
                print(f"kube-apiserver's profile {self.prefix}-{n}: {error}; no more samples",
                      file=sys.stderr, flush=True)
                return
            n += 1

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(self.PROFILE_S + 30)


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that every finally below stops what it started


def _admin_context(plane: ControlPlane) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(plane.pki.ca_cert))
    context.load_cert_chain(str(plane.pki.admin_cert), str(plane.pki.admin_key))
    return context


@dataclass
class Shard:
    """One operator process of the ProofJob phases: the namespace it handles, its identity
    (a ServiceAccount of its own, as the chart's shards have), its /metrics and counts."""

    name: str
    namespace: str
    sa: str
    metrics_port: int
    counts_file: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    cpu_s: float = 0.0  # during the ProofJob phases, all rounds
    attempts: int = 0  # of its namespace's jobs, all rounds


def summed(parts: list[dict[str, Counter[str]]]) -> dict[str, Counter[str]]:
    """Metrics scraped from several processes, added up by name and labels."""
    out: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for part in parts:
        for name, values in part.items():
            out[name].update(values)
    return dict(out)


def summed_counts(parts: list[Obj | None]) -> Obj | None:
    """bench/counted_operator.py's counts of several operators, added up."""
    if any(p is None for p in parts):
        return None
    events: Counter[str] = Counter()
    for p in parts:
        events.update((p or {}).get("watch_events", {}))
    return {"syncs": sum(int((p or {}).get("syncs", 0)) for p in parts),
            "watch_events": dict(events)}


@dataclass
class Gauges:
    """The counters read around a phase: etcd's, kube-apiserver's, the operator's."""

    etcd: dict[str, Counter[str]]
    apiserver: dict[str, Counter[str]]
    operator: dict[str, Counter[str]] | None  # its /metrics, every shard's (None: not running)
    kopf: Obj | None  # bench/counted_operator.py's counts, every shard's


class Bench:
    """One benchmark's test bed and what it measured: the control plane with its audit log,
    the kubelets, the stand-in and, while kuzk's phases run, the operator. ``phase`` runs one
    system's jobs and adds what they cost; ``result`` is every figure, as ``--json`` writes
    it and ``fleet_report.report`` prints it."""

    def __init__(self, args: argparse.Namespace, stack: contextlib.ExitStack, tmp: Path,
                 logs: Path) -> None:
        self.args, self.stack, self.tmp, self.logs = args, stack, tmp, logs
        names = [f"fleet-{i:03d}" for i in range(args.jobs)]
        self.manifests = [proofjob(n, KINDS[i % len(KINDS)], deadline_s=DEADLINE_S)
                          for i, n in enumerate(names)]
        self.partitions = {n: api.PROOF_KINDS[m["spec"]["proofKind"]].partitions
                           for n, m in zip(names, self.manifests, strict=True)}
        # The ProofJobs' namespaces: one, or one per shard, each job in turn to the one with
        # the fewest partitions so far (the kinds' partitions differ: 1, 16, 1, 10).
        self.spaces = ([KUZK_NS] if args.shards == 1
                       else [f"{KUZK_NS}-{i}" for i in range(args.shards)])
        load = dict.fromkeys(self.spaces, 0)
        self.placed = []
        for name, manifest in zip(names, self.manifests, strict=True):
            ns = min(self.spaces, key=lambda n: load[n])
            load[ns] += self.partitions[name]
            self.placed.append((ns, manifest))
        self._start_control_plane()
        self._start_fleet()
        self.running = False  # whether the shards' operators run
        self.starts = 0
        self.start_operators()
        # What each WorkerStatus write moved, seen by a watch of them all run long.
        self.moves = Moves()
        self.ws_follow = Follow("workerstatuses", partial(
            self.custom.list_cluster_custom_object, api.GROUP, api.VERSION, WORKERSTATUS),
            self.moves.on_event)
        start_all([self.ws_follow])
        stack.callback(self.ws_follow.close)
        settings = PodSettings(image=IMAGE, command=tuple(self.command))
        self.twins = [indexed_job(m, JOB_NS, settings) for m in self.manifests]
        # Where the machine's CPU went in each phase: the control plane, the kubelets and the
        # stand-in serve both systems; the operator is kuzk's, the job controller's share is
        # inside kube-controller-manager.
        self.pids = {c.name: (c.proc.pid,) for c in self.plane.components
                     if c.proc is not None}
        self.pids |= {"kubelets": tuple(k.pid for k in self.kubelets),
                      "stand-in": (self.standin.pid,)}
        self.load: dict[str, float] = {}
        self.not_ready = 0
        self.phase_cpu: dict[str, defaultdict[str, float]] = {KUZK: defaultdict(float),
                                                              JOB: defaultdict(float)}
        self.seconds: dict[str, list[float]] = {KUZK: [], JOB: []}
        self.rounds: dict[str, list[Figures]] = {KUZK: [], JOB: []}
        self.last: dict[str, Phase] = {}  # each system's last phase
        self.standin_stats: dict[str, Obj] = {}
        self.stale: dict[str, int] = {KUZK: 0, JOB: 0}  # stale writes refused, by phase
        self.op_calls, self.attempts, self.syncs, self.rss, self.gave_up = (
            Calls(), 0, 0, 0.0, 0)
        self.crossed: list[str] = []  # ProofJobs written by another than their own shard
        self.jobs_written = 0  # ProofJobs the shards wrote, all rounds
        self.created_twice = 0  # partition attempts run by more than one pod, all rounds
        self.event_sources: dict[str, str] = {}

    def _start_control_plane(self) -> None:
        """The control plane, its audit log telling each identity's requests, kuzk's CRDs and
        chart RBAC, and a kubeconfig per identity."""
        # Every identity must be known before kube-apiserver starts (audit policy): the
        # operator's, or each shard's (the chart's names), all of them the operator's figures.
        one = len(self.spaces) == 1
        self.shards = [Shard("" if one else f"s{i}", ns,
                             f"{RELEASE}-kuzk-operator" + ("" if one else f"-s{i}"),
                             free_port(), self.tmp / f"counts-{i}")
                       for i, ns in enumerate(self.spaces)]
        self.users = {service_account(SYSTEM_NS, shard.sa): OPERATOR for shard in self.shards}
        self.users |= {service_account(SYSTEM_NS, PROVER_SA): PROVERS,
                       service_account(SYSTEM_NS, KUBELET_SA): KUBELET}
        self.plane = plane = ControlPlane(audit_policy=audit_policy(
            [u for u, who in self.users.items() if who in (OPERATOR, PROVERS)]), fairness=True)
        plane.start()
        self.stack.callback(plane.stop)
        self.admin = str(plane.admin_kubeconfig()["users"][0]["name"])  # type: ignore[index]
        self.cluster = cluster = Cluster(plane)
        install_kuzk(cluster)
        rbac, bound = operator_rbac(cluster, self.spaces)
        if bound != [shard.sa for shard in self.shards]:
            msg = (f"the chart binds the operator role to {bound}, not "
                   f"{[shard.sa for shard in self.shards]}")
            raise RuntimeError(msg)
        namespace(cluster, SYSTEM_NS, *(shard.sa for shard in self.shards), PROVER_SA,
                  KUBELET_SA)
        for ns in (*self.spaces, JOB_NS):
            namespace(cluster, ns, PROVER_SA)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
        bind_prover_role(cluster)
        bind_kubelet(cluster)
        self.kubeconfigs = {sa: token_kubeconfig(cluster, SYSTEM_NS, sa, self.tmp / f"{sa}.kc")
                            for sa in (*(s.sa for s in self.shards), PROVER_SA, KUBELET_SA)}
        self.etcd_metrics = plane.component("etcd").health_url.rsplit("/", 1)[0] + "/metrics"
        self.context = _admin_context(plane)
        self.custom = client.CustomObjectsApi(cluster.api)

    def _start_fleet(self) -> None:
        """The nodes' kubelets and the stand-in prover that their pods hand their work to."""
        args, cluster, plane = self.args, self.cluster, self.plane
        self.nodes = set(node_names(args.nodes))
        # The kubelets run in processes of their own, so that their threads (a few per pod)
        # don't starve this process's watches, nor queue by the thousand for one
        # interpreter's lock; see bench/fleet_kubelets.py.
        shards = min(args.nodes, KUBELET_PROCESSES)
        self.kubelets = [self.stack.enter_context(process(
            [sys.executable, str(ROOT / "bench" / "fleet_kubelets.py"), "--kubeconfig",
             str(self.kubeconfigs[KUBELET_SA]), "--server", plane.server, "--ca-cert",
             str(plane.pki.ca_cert), "--workdir", str(self.tmp / "kubelets"), "--nodes",
             str(args.nodes), "--gpus", str(args.gpus), "--replicas", str(args.lanes),
             "--shard", str(shard), "--shards", str(shards)],
            cluster.env(), self.logs / f"kubelets-{shard}.log", grace=60))
            for shard in range(shards)]
        wait_for(lambda: self.nodes <= ready_nodes(cluster), 180, "nodes Ready", 1)
        self.standin = self.stack.enter_context(process(
            [sys.executable, str(ROOT / "bench" / "fleet_standin.py"), "--kubeconfig",
             str(self.kubeconfigs[PROVER_SA]), "--work",
             *map(str, args.work), "--bare-namespace", JOB_NS,
             *([] if args.in_flight is None else ["--in-flight", str(args.in_flight)])],
            cluster.env(), self.logs / "standin.log", stdout=subprocess.PIPE))
        assert self.standin.stdout is not None
        first = self.standin.stdout.readline().decode().split()
        if first[:1] != ["PORT"]:
            msg = f"the stand-in did not start; see {self.logs / 'standin.log'}"
            raise RuntimeError(msg)
        self.port = int(first[1])
        self.command = pod_command(self.port)

    def start_operators(self) -> None:
        """The operator of each shard, once it watches everything it reconciles from (its
        first lists fall before the phase it serves, as the Job controller's did)."""
        self.starts += 1
        plane = self.plane
        audit_from = plane.audit_log.stat().st_size
        for shard in self.shards:
            suffix = f"-{shard.name}" if shard.name else ""
            shard.log = self.logs / f"operator{suffix}-{self.starts}.log"
            env = {**self.cluster.env(), "KUBECONFIG": str(self.kubeconfigs[shard.sa]),
                   "KUZK_BENCH_COUNTS": str(shard.counts_file)}
            shard.proc = self.stack.enter_context(process(
                [sys.executable, str(ROOT / "bench" / "counted_operator.py"), "operator",
                 "--standalone", "--namespace", shard.namespace, "--prover-command",
                 json.dumps(self.command), "--prover-image", IMAGE, "--metrics-port",
                 str(shard.metrics_port), "--metrics-address", "127.0.0.1"],
                env, shard.log))
        self.running = True
        for shard in self.shards:
            op, user = shard.proc, {service_account(SYSTEM_NS, shard.sa): OPERATOR}
            assert op is not None

            def watching(op: subprocess.Popen[bytes] = op, user: dict[str, str] = user) -> bool:
                calls = Calls.read(plane.audit_log, audit_from, plane.audit_log.stat().st_size,
                                   user, self.admin).of(OPERATOR)
                return op.poll() is not None or all(
                    calls[f"watch {r}"] for r in ("proofjobs", "pods", WORKERSTATUS))

            wait_for(watching, 120, f"the operator's watches ({shard.namespace})", 0.5)
            wait_for(lambda s=shard, o=op: read_counts(s.counts_file) is not None
                     or o.poll() is not None, 10, "the operator's counts", 0.2)
            if op.poll() is not None:
                msg = f"the operator exited {op.returncode}; see {shard.log}"
                raise RuntimeError(msg)

    def stop_operators(self) -> None:
        for shard in self.shards:
            if shard.proc is not None:
                stop_group(shard.proc, grace=20)
                shard.proc = None
        self.running = False

    def gauges(self) -> Gauges:
        running = self.running
        own = (summed([scrape(f"http://127.0.0.1:{s.metrics_port}/metrics")
                       for s in self.shards]) if running else None)
        return Gauges(scrape(self.etcd_metrics), scrape(f"{self.plane.server}/metrics",
                                                        self.context),
                      own, summed_counts([read_counts(s.counts_file) for s in self.shards])
                      if running else None)

    def phase(self, system: str) -> None:
        """Run one system's jobs, from the create calls to the last finish, and add what
        they cost; the Jobs run without the operator (the comparison is with the job
        controller alone, and the operator's sweep has no business with their pods)."""
        if system == JOB and self.running:
            self.stop_operators()
        if system == KUZK and not self.running:
            self.start_operators()
        jobs, what = ((self.placed, "ProofJobs") if system == KUZK
                      else ([(JOB_NS, twin) for twin in self.twins], "Jobs"))
        plane, running = self.plane, self.running
        shards = self.shards if running else []
        cpu_before, standin_before = cpu_by_process(self.pids), stats_of(self.port)
        stale_before = stale_writes(self.custom)
        audit_start = plane.audit_log.stat().st_size
        shard_cpu_start = [cpu_seconds(s.proc.pid) for s in shards if s.proc is not None]
        before = self.gauges()
        self.load[f"{system}_before"] = os.getloadavg()[0]
        profile = (ApiserverProfile(plane, self.context, self.args.pprof,
                                    f"{system}-{len(self.rounds[system])}")
                   if self.args.pprof else None)
        try:
            phase = run_phase(self.cluster, system, jobs, self.partitions, self.args.timeout)
        except BaseException:
            for s in shards:
                assert s.proc is not None
                state = "running" if s.proc.poll() is None else f"exited {s.proc.returncode}"
                print(f"\nfailed; operator {s.name or ''} {state}; its log: {s.log}",
                      file=sys.stderr)
            raise
        finally:
            if profile is not None:
                profile.stop()
        for s in shards:  # its counts of the whole phase: the file's next write
            wait_for(partial(rewritten, s.counts_file, s.counts_file.stat().st_mtime_ns),
                     10, "the operator's counts after the phase", 0.1)
        after = self.gauges()
        cpu_after = cpu_by_process(self.pids)
        calls = Calls.read(plane.audit_log, audit_start, plane.audit_log.stat().st_size,
                           self.users, self.admin)
        self.not_ready += check_nodes(self.cluster, self.nodes, what)
        # The watch sees a write's change a moment after the audit log has it; a write
        # that changed nothing never shows (nor does one a relist missed): UNSEEN.
        shown = partial(lambda ws: all(self.moves.of(w) for w in ws), updates(calls.written))
        with contextlib.suppress(TimeoutError):
            wait_for(shown, 10, "the WorkerStatus watch to show the phase's writes", 0.1)
        if self.ws_follow.error is not None:
            msg = f"the WorkerStatus watch failed: {self.ws_follow.error}"
            raise RuntimeError(msg)
        self.load[f"{system}_after"] = os.getloadavg()[0]
        self.last[system] = phase
        self.seconds[system].append(phase.t_end - phase.t0)
        self.standin_stats[system] = standin_summary(standin_before, stats_of(self.port))
        self.gave_up += self.standin_stats[system]["gave_up"]
        self.stale[system] += stale_writes(self.custom) - stale_before
        cpu = {name: cpu_after[name] - cpu_before[name] for name in self.pids}
        events = None
        if shards:
            by_shard = [cpu_seconds(s.proc.pid) - start
                        for s, start in zip(shards, shard_cpu_start, strict=True) if s.proc]
            cpu[OPERATOR] = sum(by_shard)
            for s, spent in zip(shards, by_shard, strict=True):
                s.cpu_s += spent
                s.attempts += phase.attempts_in(s.namespace)
            events = self._operator_phase(calls, phase, before, after)
            self._shard_writers(audit_start, plane.audit_log.stat().st_size, phase)
        for name, used in cpu.items():
            self.phase_cpu[system][name] += used
        summary = phase.summary()
        self.rounds[system].append(Cost(
            system=system, attempts=len(phase.attempts), calls=calls, cpu_s=cpu,
            etcd_wal_bytes=sum(delta(before.etcd, after.etcd,
                                     "etcd_disk_wal_write_bytes_total").values()),
            etcd_puts=sum(delta(before.etcd, after.etcd, "etcd_mvcc_put_total").values()),
            apiserver_events=delta(before.apiserver, after.apiserver,
                                   "apiserver_watch_events_total"),
            apiserver_event_bytes=delta(before.apiserver, after.apiserver,
                                        "apiserver_watch_events_sizes_sum"),
            operator_events=events,
            ws_kinds=write_kinds(calls.written, self.moves.of),
            lane_s=float(self.standin_stats[system]["lane_s"]),
            lag_p50_s=summary["lag_p50_s"], lag_p99_s=summary["lag_p99_s"]).figures())
        print(f"{what} done in {phase.t_end - phase.t0:.1f}s; deleting them", flush=True)
        for ns in dict.fromkeys(ns for ns, _ in jobs):
            clear(self.cluster, system, ns)

    def _shard_writers(self, start: int, end: int, phase: Phase) -> None:
        """Whose writes changed each ProofJob (the audit log, each shard its own identity),
        and the partition attempts that more than one pod ran."""
        users = {**self.users, **{service_account(SYSTEM_NS, s.sa): f"shard {s.name}"
                                  for s in self.shards}}
        writers = Writers.read(self.plane.audit_log, start, end, users, self.admin)
        self.crossed += writers.crossed({s.namespace: f"shard {s.name}" for s in self.shards})
        self.jobs_written += len(writers.jobs)
        self.created_twice += phase.created_twice()

    def _operator_phase(self, calls: Calls, phase: Phase, before: Gauges,
                        after: Gauges) -> dict[str, float]:
        """Add the operators' part of a kuzk phase; the watch events they were delivered."""
        self.rss = max([self.rss, *(peak_rss_mb(s.proc.pid) for s in self.shards if s.proc)])
        self.op_calls.add(calls, OPERATOR)
        self.attempts += len(phase.attempts)
        kopf = Counter((after.kopf or {}).get("watch_events", {}))
        kopf.subtract((before.kopf or {}).get("watch_events", {}))
        own = (delta(before.operator or {}, after.operator or {}, OPERATOR_WATCH_EVENTS)
               if OPERATOR_WATCH_EVENTS in (after.operator or {}) else None)
        events, sources = operator_events(kopf, own)
        self.event_sources |= sources
        self.syncs += int((after.kopf or {}).get("syncs", 0)) - int(
            (before.kopf or {}).get("syncs", 0))
        return events

    def result(self, order: tuple[str, str]) -> Obj:
        args = self.args
        attempts = max(self.attempts, 1)
        by_verb: Counter[str] = Counter()
        for call, n in self.op_calls.of(OPERATOR).items():
            by_verb[call.split(" ", 1)[0]] += n
        lists = by_verb.get("list", 0)
        ratios = [k / j for k, j in zip(self.seconds[KUZK], self.seconds[JOB], strict=True)]
        per_attempt = {KUZK: medians(self.rounds[KUZK]), JOB: medians(self.rounds[JOB])}
        return {
            "kuzk_module": str(Path(kuzk.__file__).parent),
            "nodes": args.nodes, "gpus": args.gpus, "lanes": args.lanes, "jobs": args.jobs,
            "work_s": list(args.work), "in_flight": args.in_flight,
            "load_average": self.load, "nodes_not_ready": self.not_ready,
            "kuzk": self.last[KUZK].summary(), "job": self.last[JOB].summary(),
            "operator": {
                "user": ", ".join(service_account(SYSTEM_NS, s.sa) for s in self.shards),
                "attempts": attempts,
                "by_verb": dict(by_verb), "by_call": dict(self.op_calls.of(OPERATOR)),
                "conflicts": sum(self.op_calls.conflicts.values()),
                "requests_per_attempt": sum(by_verb.values()) / attempts,
                "per_attempt_by_verb": {v: n / attempts for v, n in by_verb.items()},
                "syncs": self.syncs,
                "get_proofjobs": self.op_calls.of(OPERATOR).get("get proofjobs", 0),
                "lists_per_sync": lists / self.syncs if self.syncs else None,
                "cpu_s": self.phase_cpu[KUZK][OPERATOR], "peak_rss_mb": self.rss,
            },
            "order": list(order), "rounds": args.rounds, "cpu_s": self.phase_cpu,
            "seconds": self.seconds, "round_ratios": ratios,
            "completion_ratio": statistics.median(ratios),
            "per_attempt": per_attempt, "per_attempt_rounds": self.rounds,
            "event_sources": self.event_sources, "gave_up": self.gave_up,
            "ws_watch_relists": self.ws_follow.relists,
            "fleet": {"gpus": FLEET.gpus, "lanes": FLEET.lanes,
                      "partition_s": FLEET.partition_s},
            "projection": {s: projection(per_attempt[s], s, FLEET) for s in (KUZK, JOB)},
            "projection_peak": {s: projection(per_attempt[s], s, PEAK) for s in (KUZK, JOB)},
            "standin": self.standin_stats[KUZK],
            "standin_job": self.standin_stats[JOB],
            "stale_writes_refused": self.stale,
            "shards": [{"name": s.name, "namespace": s.namespace,
                        "user": service_account(SYSTEM_NS, s.sa), "cpu_s": s.cpu_s,
                        "attempts": s.attempts} for s in self.shards],
            "shard_writes": {"jobs_written": self.jobs_written, "crossed": self.crossed,
                             "created_twice": self.created_twice},
        }


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (min(args.nodes, args.gpus, args.lanes, args.jobs, args.rounds, args.shards) < 1
            or (args.in_flight is not None and args.in_flight < 1)
            or not 0 < args.work[0] <= args.work[1]):
        parser.error("--nodes, --gpus, --lanes, --jobs, --rounds, --shards and --in-flight "
                     "must be at least 1; --work needs 0 < MIN <= MAX")
    if args.shards > args.jobs:
        parser.error(f"--shards {args.shards} is more than --jobs {args.jobs}: a shard would "
                     "have no job")
    signal.signal(signal.SIGTERM, _sigterm)
    started = time.monotonic()
    partitions = sum(api.PROOF_KINDS[KINDS[i % len(KINDS)]].partitions
                     for i in range(args.jobs))
    print(f"fleet scale: {args.nodes} nodes x {args.gpus} GPUs x {args.lanes} lanes "
          f"(time-slicing replicas), {args.jobs} jobs per system ({partitions} partitions), "
          f"kinds {', '.join(KINDS)} in turn; "
          f"{'one operator' if args.shards == 1 else f'{args.shards} operator shards'}; "
          f"kuzk from {Path(kuzk.__file__).parent}; load "
          f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    writers = (f"at most {args.in_flight} of its WorkerStatus writes in flight"
               if args.in_flight is not None else "each pod its own writer")
    print(f"stand-in prover: NOT a real proof. One process serves every partition pod: a "
          f"ProofJob's through kuzk_prover.reporter (join, stages, the GPU phase, leave: "
          f"writes only when its lane moves; {writers}), a Job's with work only (its GPU "
          f"part in its GPU's turn); each partition works {args.work[0]:g}-{args.work[1]:g} s.",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="kuzk-fleet-") as tmp, contextlib.ExitStack() as stack:
        logs = args.log_dir or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        if args.pprof:
            args.pprof.mkdir(parents=True, exist_ok=True)
        bench = Bench(args, stack, Path(tmp), logs)
        print(f"control plane, {args.nodes} nodes, stand-in and operator up in "
              f"{time.monotonic() - started:.0f}s", flush=True)
        order = (JOB, KUZK) if args.job_first else (KUZK, JOB)
        # Rounds alternate which system goes first, so neither always meets a fresh or a used
        # control plane.
        for r in range(args.rounds):
            for system in order if r % 2 == 0 else order[::-1]:
                bench.phase(system)
        result = bench.result(order)
        report(result)
        load = bench.load
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
