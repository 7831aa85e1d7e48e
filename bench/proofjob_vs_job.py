"""kuzk's ProofJob operator against the batch/v1 Job controller, on one control plane.

Why: a ProofJob's partition pods could have been an Indexed batch/v1 Job, so the kuzk operator
must be no slower than the Job controller at what both do: turn one object into P pods and
follow them to completion (issue 3, "Speed"; goal: kuzk/job <= 1.0 for creating all pods).

How: one run starts the tests' real control plane (etcd, kube-apiserver, kube-controller-manager
with its job controller, kube-scheduler) and process kubelet with 4 nodes x 16 GPUs, so up to
64 pods run at once, and one ``kuzk operator`` process. Both systems run identical pods: the
operator tests' stand-in prover (``tests/integration/operator/standin.py``, same plan folder)
as the command, one ``nvidia.com/gpu``, the ``kuzk-prover`` ServiceAccount and the
``kuzk-normal`` PriorityClass. The Job is ``completionMode: Indexed`` with ``completions`` and
``parallelism`` P; its pod template comes from kuzk's own pod builder (``bench/twins.py``), so
the env is the partition pods' own, with ``KUZK_PARTITION`` from the completion index and
``KUZK_JOB_UID`` from the Job's ``controller-uid`` label.

For each P and each system the object is created in a fresh namespace. From the create call,
watches opened before it measure the time until all P pods exist (distinct pod names with the
job's label) and until completion (ProofJob ``status.phase`` Succeeded; Job condition
Complete). ProofJob and Job alternate, the first of each pair swapping every repetition, after
one untimed warm-up of each. The table gives medians and the kuzk/job ratios.

    .venv/bin/python bench/proofjob_vs_job.py [--partitions 16 64] [--repeat 5]

Needs the control-plane binaries (``bash testenv/build``). About 3.5 minutes on 2 cores;
the figures are wall-clock and move with the machine's load, which is printed with them. At
P=16 all pods exist within a tenth of a second and single runs range over a factor of three,
so the default takes the median of five runs per system.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kuzk.contract import api
from kuzk.operator.decide.pods import PodSettings

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from follow import Follow, start_all  # noqa: E402
from twins import JOB_NAME_LABEL, indexed_job, proofjob  # noqa: E402

from testenv.cluster import Cluster, install_kuzk  # noqa: E402
from testenv.controlplane import ControlPlane, stop_group  # noqa: E402
from testenv.nodes import NodeSpec  # noqa: E402

STANDIN = ROOT / "tests" / "integration" / "operator" / "standin.py"
IMAGE = "kuzk-standin:bench"
SERVICE_ACCOUNT = "kuzk-prover"  # the operator's default for partition pods
NODES, GPUS_PER_NODE = 4, 16
KUZK, JOB = "kuzk", "job"
ALL_PODS_TIMEOUT = 30.0  # after completion: the pod watch may lag the job watch a little
COMPLETE_TIMEOUT = 150.0
Obj = dict[str, Any]


# --- watching ------------------------------------------------------------------------------
def wait_for_object(api_client: client.ApiClient, list_fn: Callable[..., Any],
                    done: Callable[[Obj | None], bool], timeout: float, what: str,
                    **kwargs: Any) -> None:
    """List, then watch from the listed resourceVersion until ``done`` holds for an object
    (``None`` stands for "deleted"); raise TimeoutError naming ``what``."""
    listing = list_fn(**kwargs)
    items = [api_client.sanitize_for_serialization(i) for i in listing.items]
    if any(done(i) for i in items) or (not items and done(None)):
        return
    deadline = time.monotonic() + timeout
    rv = listing.metadata.resource_version
    while (left := deadline - time.monotonic()) > 0:
        w = watch.Watch()
        for event in w.stream(list_fn, resource_version=rv, timeout_seconds=max(1, int(left)),
                              **kwargs):
            obj = event["raw_object"]
            rv = obj["metadata"]["resourceVersion"]
            if done(None if event["type"] == "DELETED" else obj):
                w.stop()
                return
    msg = f"timed out after {timeout:.0f}s waiting for {what}"
    raise TimeoutError(msg)


# --- one measurement -------------------------------------------------------------------------
@dataclass
class Progress:
    """What the watches saw of one run, in seconds since the create call."""

    partitions: int
    t0: float = 0.0
    first_seen: dict[str, float] = field(default_factory=dict)
    finished_at: float | None = None
    failure: str | None = None
    all_pods: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_pod(self, kind: str, pod: Obj, arrival: float) -> None:
        if kind not in ("ADDED", "MODIFIED"):
            return
        with self.lock:
            self.first_seen.setdefault(pod["metadata"]["name"], arrival)
            if len(self.first_seen) >= self.partitions:
                self.all_pods.set()

    def finish(self, arrival: float, failure: str | None = None) -> None:
        with self.lock:
            if self.finished_at is None:
                self.finished_at, self.failure = arrival, failure
                self.finished.set()

    def on_proofjob(self, kind: str, job: Obj, arrival: float) -> None:
        status = job.get("status") or {}
        if status.get("phase") == "Succeeded":
            self.finish(arrival)
        elif status.get("phase") == "Failed":
            self.finish(arrival, f"ProofJob Failed: {status.get('conditions')}")

    def on_job(self, kind: str, job: Obj, arrival: float) -> None:
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond["type"] == "Complete" and cond["status"] == "True":
                self.finish(arrival)
            elif cond["type"] == "Failed" and cond["status"] == "True":
                self.finish(arrival, f"Job Failed: {cond.get('reason')}: {cond.get('message')}")

    def times(self) -> tuple[float, float, float]:
        """(first pod, all pods, complete) in seconds since the create call."""
        seen = sorted(self.first_seen.values())
        assert self.finished_at is not None
        return seen[0] - self.t0, seen[self.partitions - 1] - self.t0, self.finished_at - self.t0


@dataclass
class Sample:
    system: str
    partitions: int
    namespace: str
    t_first_pod: float
    t_all_pods: float
    t_complete: float


class Bench:
    def __init__(self, cluster: Cluster, command: list[str]) -> None:
        self.cluster = cluster
        self.command = command
        # The settings the operator runs with (its flags below): the Job twins' pods are built
        # by the same pod builder from them.
        self.settings = PodSettings(image=IMAGE, command=tuple(command),
                                    service_account_name=SERVICE_ACCOUNT)
        self.operator: subprocess.Popen[bytes] | None = None
        self.core = cluster.core
        self.custom = client.CustomObjectsApi(cluster.api)
        self.batch = client.BatchV1Api(cluster.api)

    def create_namespace(self, name: str) -> None:
        self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        self.core.create_namespaced_service_account(
            name, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=SERVICE_ACCOUNT)))

    def measure(self, system: str, partitions: int, namespace: str) -> Sample:
        """Create one ProofJob or Job of ``partitions`` pods in ``namespace`` and time it."""
        name = f"bench-p{partitions}"
        progress = Progress(partitions)
        create: Callable[[], object]
        if system == KUZK:
            pod_selector = f"{api.LABEL_JOB}={api.job_label_value(name)}"
            list_jobs: Callable[..., Any] = partial(
                self.custom.list_namespaced_custom_object,
                api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL)
            on_job = progress.on_proofjob
            create = partial(self.custom.create_namespaced_custom_object, api.GROUP,
                             api.VERSION, namespace, api.PROOFJOB_PLURAL,
                             proofjob(name, "snap-update", partitions=partitions))
        else:
            pod_selector = f"{JOB_NAME_LABEL}={name}"
            list_jobs = partial(self.batch.list_namespaced_job, namespace)
            on_job = progress.on_job
            create = partial(self.batch.create_namespaced_job, namespace,
                             indexed_job(proofjob(name, "snap-update", partitions=partitions),
                                         namespace, self.settings))
        list_pods = partial(self.core.list_namespaced_pod, namespace)
        by_name = f"metadata.name={name}"
        streams = [
            Follow(f"pods in {namespace}", partial(list_pods, label_selector=pod_selector),
                   progress.on_pod),
            Follow(f"{system} {namespace}/{name}", partial(list_jobs, field_selector=by_name),
                   on_job),
        ]
        try:
            start_all(streams)
            progress.t0 = time.monotonic()
            create()
            try:
                self._wait(progress.finished, COMPLETE_TIMEOUT,
                           f"{system} {namespace} to finish", streams)
                if progress.failure:
                    raise RuntimeError(f"{namespace}: {progress.failure}")
                self._wait(progress.all_pods, ALL_PODS_TIMEOUT, f"all pods of {namespace}",
                           streams)
            except (RuntimeError, TimeoutError) as e:
                seen = len(progress.first_seen)
                msg = f"{e}\n  {seen} pods seen; {self.describe(system, namespace, name)}"
                raise type(e)(msg) from e
            first, everything, complete = progress.times()
        finally:
            for stream in streams:
                stream.close()
        return Sample(system, partitions, namespace, first, everything, complete)

    def describe(self, system: str, namespace: str, name: str) -> str:
        """Where a run stands, for the message of a run that failed or timed out."""
        pods = self._dicts(self.core.list_namespaced_pod(namespace).items)
        phases = Counter(p["status"].get("phase") for p in pods)
        unbound = [p for p in pods if not p["spec"].get("nodeName")]
        why = next((c.get("message") for p in unbound for c in p["status"].get("conditions", [])
                    if c["type"] == "PodScheduled" and c.get("message")), "")
        job: Any
        keys: tuple[str, ...]
        if system == KUZK:
            job = self.custom.get_namespaced_custom_object(
                api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, name)
            keys = ("phase", "active", "succeeded", "failed", "retries", "completedPartitions")
        else:
            job = self.cluster.api.sanitize_for_serialization(
                self.batch.read_namespaced_job_status(name, namespace))
            keys = ("active", "succeeded", "failed", "conditions")
        status = job.get("status") or {}
        state = {k: status.get(k) for k in keys}
        return (f"pod phases {dict(phases)}, {len(unbound)} not bound to a node {why!r}; "
                f"{system} status {state}")

    def _dicts(self, items: list[Any]) -> list[Obj]:
        return [self.cluster.api.sanitize_for_serialization(i) for i in items]

    def _wait(self, event: threading.Event, timeout: float, what: str,
              streams: list[Follow]) -> None:
        """Wait for ``event``; fail early if a watch breaks or the operator exits."""
        deadline = time.monotonic() + timeout
        while not event.wait(min(1.0, max(0.0, deadline - time.monotonic()))):
            for s in streams:
                if s.error:
                    raise RuntimeError(f"watch {s.what} broke: {s.error}") from s.error
            if self.operator is not None and self.operator.poll() is not None:
                msg = f"the kuzk operator exited {self.operator.returncode} while waiting"
                raise RuntimeError(msg)
            if time.monotonic() >= deadline:
                msg = f"timed out after {timeout:.0f}s waiting for {what}"
                raise TimeoutError(msg)

    def cleanup(self, namespace: str) -> None:
        """Delete the namespace and wait until it is gone, so no garbage collection of one run
        competes with the next. Finalizers are dropped first, as the test fixtures do."""
        for pod in self._dicts(self.core.list_namespaced_pod(namespace).items):
            if pod["metadata"].get("finalizers"):
                with contextlib.suppress(ApiException):
                    self.core.patch_namespaced_pod(
                        pod["metadata"]["name"], namespace, {"metadata": {"finalizers": None}})
        self.core.delete_namespace(namespace)
        try:
            wait_for_object(self.cluster.api, self.core.list_namespace, lambda o: o is None,
                            120, f"namespace {namespace} deleted",
                            field_selector=f"metadata.name={namespace}")
        except TimeoutError as e:
            print(f"  note: {e}; going on", flush=True)


# --- processes -----------------------------------------------------------------------------
@contextlib.contextmanager
def operator_process(cluster: Cluster, namespaces: list[str], command: list[str],
                     log: Path) -> Iterator[subprocess.Popen[bytes]]:
    argv = [sys.executable, "-m", "kuzk.cli", "operator", "--standalone",
            "--prover-command", json.dumps(command), "--prover-image", IMAGE]
    for ns in namespaces:
        argv += ["--namespace", ns]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=cluster.env(), cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        stop_group(proc, grace=20)


def node_ready(node: Obj | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def tail(path: Path, lines: int = 30) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


# --- report --------------------------------------------------------------------------------
def report(samples: list[Sample], partitions: list[int]) -> None:
    print("\nmedians (seconds from the create call)")
    print(f"{'P':>3}  {'system':<6} {'n':>2} {'t_first_pod_s':>13} {'t_all_pods_s':>12} "
          f"{'t_complete_s':>12}")
    ratios: list[tuple[int, float, float]] = []
    for p in partitions:
        med: dict[str, tuple[float, float, float]] = {}
        for system in (KUZK, JOB):
            mine = [s for s in samples if s.partitions == p and s.system == system]
            if not mine:
                continue
            med[system] = (statistics.median(s.t_first_pod for s in mine),
                           statistics.median(s.t_all_pods for s in mine),
                           statistics.median(s.t_complete for s in mine))
            first, everything, complete = med[system]
            print(f"{p:>3}  {system:<6} {len(mine):>2} {first:13.2f} {everything:12.2f} "
                  f"{complete:12.2f}")
        if KUZK in med and JOB in med:
            ratios.append((p, med[KUZK][1] / med[JOB][1], med[KUZK][2] / med[JOB][2]))
    print("\nratios kuzk/job (<= 1.0: kuzk is no slower)")
    print(f"{'P':>3}  {'all_pods':>8} {'complete':>8}  goal all_pods <= 1.0")
    for p, all_pods, complete in ratios:
        verdict = "met" if all_pods <= 1.0 else "MISSED"
        print(f"{p:>3}  {all_pods:8.2f} {complete:8.2f}  {verdict}")


# --- timeline ------------------------------------------------------------------------------
def timeline_policy(namespaces: list[str]) -> Obj:
    """Every request in the ProofJobs' namespaces but watches, at Metadata level."""
    return {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            "omitStages": ["RequestReceived", "ResponseStarted"],
            "rules": [{"level": "None", "verbs": ["watch"]},
                      {"level": "Metadata", "namespaces": namespaces}, {"level": "None"}]}


def timeline(audit_log: Path, namespace: str) -> str:
    """The requests in ``namespace`` from the ProofJob's create to the last pod create, in ms
    after the create reached kube-apiserver; runs of one call by one client are one line."""
    events = []
    with audit_log.open() as f:
        for line in f:
            event = json.loads(line)
            ref = event.get("objectRef") or {}
            if ref.get("namespace") != namespace:
                continue
            resource = ref.get("resource", "?") + (
                f"/{ref['subresource']}" if ref.get("subresource") else "")
            agent = (event.get("userAgent") or "?").split("/")[0]
            at = datetime.fromisoformat(event["requestReceivedTimestamp"])
            done = datetime.fromisoformat(event["stageTimestamp"])
            events.append((at, done, f"{event['verb']} {resource}", agent,
                           (event.get("responseStatus") or {}).get("code")))
    events.sort()
    start = next((e[0] for e in events if e[2] == f"create {api.PROOFJOB_PLURAL}"), None)
    last = max((e[0] for e in events if e[2] == "create pods"), default=None)
    if start is None or last is None:
        return f"  timeline of {namespace}: no ProofJob or pod create in the audit log"
    lines = [f"  timeline of {namespace} (ms after the ProofJob's create reached the API server;"
             " received-answered, count, client, status)"]
    runs: list[list[Any]] = []
    for at, done, call, agent, code in events:
        if not start <= at <= last:
            continue
        if runs and runs[-1][2] == call and runs[-1][3] == agent:
            runs[-1][1], runs[-1][4] = done, runs[-1][4] + 1
        else:
            runs.append([at, done, call, agent, 1, code])
    for at, done, call, agent, count, code in runs:
        first = (at - start).total_seconds() * 1000
        end = (done - start).total_seconds() * 1000
        lines.append(f"    {first:7.1f}-{end:7.1f}  {call:<28} x{count:<3} {agent} {code}")
    return "\n".join(lines)


# --- main ----------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[16, 64],
                        help="partition counts P to measure, 1..64 (default 16 64)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs of each system per P (default 5)")
    parser.add_argument("--work-seconds", type=float, default=None,
                        help="seconds each stand-in pod works (default: the stand-in's 0.3)")
    parser.add_argument("--log-dir", type=Path, default=None,
                        help="keep the operator's log here (default: a temporary folder)")
    parser.add_argument("--timeline", action="store_true",
                        help="after each ProofJob run, print the API requests in its namespace "
                        "from the create to the last pod (from kube-apiserver's audit log)")
    return parser


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # so that every finally below stops what it started


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not all(1 <= p <= NODES * GPUS_PER_NODE for p in args.partitions) or args.repeat < 1:
        print("error: partitions must be 1..64 and --repeat at least 1", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _sigterm)
    logging.basicConfig(level=logging.WARNING, format="  [%(name)s] %(message)s")
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # the kubelet's full connection pool
    runs: list[tuple[str, int, int]] = []
    for p in args.partitions:
        for rep in range(args.repeat):
            order = (KUZK, JOB) if rep % 2 == 0 else (JOB, KUZK)
            runs += [(system, p, rep) for system in order]
    namespaces = {run: f"bench-{run[0]}-p{run[1]}-r{run[2]}" for run in runs}
    warmups = {KUZK: "bench-kuzk-warmup", JOB: "bench-job-warmup"}
    started = time.monotonic()
    print(f"kuzk operator vs batch/v1 Job controller: P={args.partitions}, "
          f"{args.repeat} run(s) each, {NODES} nodes x {GPUS_PER_NODE} GPUs, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)

    with tempfile.TemporaryDirectory(prefix="kuzk-bench-") as tmp, contextlib.ExitStack() as stack:
        plan = Path(tmp) / "plan"
        plan.mkdir()
        if args.work_seconds is not None:
            (plan / "plan.json").write_text(json.dumps({"*": {"seconds": args.work_seconds}}))
        command = [sys.executable, str(STANDIN), str(plan)]
        log_dir = args.log_dir or Path(tmp)
        log_dir.mkdir(parents=True, exist_ok=True)
        operator_log = log_dir / "operator.log"
        kuzk_namespaces = [warmups[KUZK]] + [ns for run, ns in namespaces.items()
                                             if run[0] == KUZK]
        plane = ControlPlane(audit_policy=timeline_policy(kuzk_namespaces)
                             if args.timeline else None)
        plane.start()
        stack.callback(plane.stop)
        cluster = Cluster(plane)
        install_kuzk(cluster)
        specs = [NodeSpec(f"bench-n{i}", gpus=GPUS_PER_NODE) for i in range(NODES)]
        stack.enter_context(cluster.kubelet(specs))
        for spec in specs:
            wait_for_object(cluster.api, cluster.core.list_node, node_ready, 30,
                            f"node {spec.name} Ready", field_selector=f"metadata.name={spec.name}")
        bench = Bench(cluster, command)
        for ns in [*warmups.values(), *namespaces.values()]:
            bench.create_namespace(ns)
        operator = stack.enter_context(operator_process(
            cluster, [warmups[KUZK]] + [ns for run, ns in namespaces.items() if run[0] == KUZK],
            command, operator_log))
        bench.operator = operator
        print(f"control plane, {NODES} nodes and operator up in "
              f"{time.monotonic() - started:.0f}s", flush=True)

        samples: list[Sample] = []
        try:
            for system in (KUZK, JOB):
                w = bench.measure(system, 2, warmups[system])
                print(f"warm-up {system:<4} P=2: all pods {w.t_all_pods:.2f}s, "
                      f"complete {w.t_complete:.2f}s (not counted)", flush=True)
                bench.cleanup(warmups[system])
            print(f"\n{'P':>3}  {'system':<6} {'rep':>3} {'t_first_pod_s':>13} "
                  f"{'t_all_pods_s':>12} {'t_complete_s':>12}  namespace", flush=True)
            for run in runs:
                system, p, rep = run
                s = bench.measure(system, p, namespaces[run])
                samples.append(s)
                print(f"{p:>3}  {system:<6} {rep:>3} {s.t_first_pod:13.2f} {s.t_all_pods:12.2f} "
                      f"{s.t_complete:12.2f}  {s.namespace}", flush=True)
                if args.timeline and system == KUZK:
                    print(timeline(plane.audit_log, s.namespace), flush=True)
                bench.cleanup(namespaces[run])
        except BaseException:
            code = operator.poll()
            state = "running" if code is None else f"exited {code}"
            print(f"\nfailed; operator {state}; last lines of its log:\n{tail(operator_log)}",
                  file=sys.stderr, flush=True)
            raise
        report(samples, args.partitions)
        print(f"load average {os.getloadavg()[0]:.1f}; total {time.monotonic() - started:.0f}s",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
