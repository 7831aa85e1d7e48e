"""The demo: the whole system on a laptop, or the examples on a cluster you name.

``./scripts/demo`` (or ``python -m testenv.demo``) starts the test control plane with two
GPU nodes of two GPUs, each GPU with two lanes (time-slicing replicas, the process kubelet;
``--lanes N`` for N), installs kuzk with its Helm chart (CRDs,
operator, status server), submits the winning-post and snap-update examples sized for a CPU
and, beside them, a real WindowPoSt over eight sealed 2 KiB sectors (``kuzk-fil-prover``, which
``scripts/setup`` builds with its parameters), prints the dashboard URL and follows the jobs in
the terminal (a progress bar per job, the GPU workers' states). When all are done it keeps
serving the dashboard until Ctrl-C, then stops everything it started.

``--kubeconfig PATH`` uses that cluster instead, explicitly (a ``KUBECONFIG`` set in the shell
is never used): it installs nothing, says which cluster and namespace it uses, submits the
examples there and follows them to the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from kuzk.contract import api, workerstatus
from kuzk.contract.workerstatus.lanes import LaneKey, lane_states
from testenv import filecoin
from testenv.binaries import MissingBinaryError
from testenv.cluster import Cluster
from testenv.controlplane import ControlPlane, StartError
from testenv.nodes import NodeSpec
from testenv.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
# The winning-post first: its 25 s deadline runs from its submission, and behind the
# snap-update's 16 partitions it would have to preempt one for a GPU first (seconds on a
# laptop, past the deadline on a loaded machine). The real WindowPoSt, submitted last,
# still preempts snap-update partitions.
EXAMPLES = [ROOT / "examples" / "winning-post.yaml", ROOT / "examples" / "snap-update.yaml"]
REAL_EXAMPLE = ROOT / "examples" / "filecoin" / "window-post.yaml"
REAL_SECTORS = 8
CHART = ROOT / "charts" / "kuzk"
# Lanes per GPU (the default of --lanes): while one partition holds a GPU's GPU phase, the
# next synthesizes beside it.
LANES = 2
BIN = Path(sys.executable).parent
RELEASE, NAMESPACE = "kuzk", "kuzk-demo"
DONE_LINE = "every job done"
FINISHED = ("Succeeded", "Failed")
SYMBOL = {"pending": ".", "scheduled": "s", "synthesizing": "y", "synth_done": "Y", "gpu": "G",
          "committing": "c", "done": "#", "failed": "X"}
LEGEND = ("partitions: . pending  s scheduled  y synthesizing  Y synth_done  G gpu"
          "  c committing  # done  X failed")


class DemoError(Exception):
    """Something the user must fix; printed as one line."""


def _examples(circuit_log2: int | None) -> list[dict[str, Any]]:
    jobs = []
    for path in EXAMPLES:
        job = yaml.safe_load(path.read_text())
        if circuit_log2 is not None:
            job["spec"]["circuitLog2"] = circuit_log2
        jobs.append(job)
    return jobs


def submit(custom: client.CustomObjectsApi, namespace: str, jobs: list[dict[str, Any]]) -> None:
    """Create the jobs; a job of the same name left by an earlier run is replaced."""
    for job in jobs:
        name = job["metadata"]["name"]
        with contextlib.suppress(ApiException):
            custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                                   api.PROOFJOB_PLURAL, name)
            print(f"replacing ProofJob {namespace}/{name} from an earlier run", flush=True)
            wait_for(lambda n=name: _get(custom, namespace, n) is None, 120,
                     f"ProofJob {namespace}/{name} deleted", interval=0.5)
        try:
            custom.create_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                                   api.PROOFJOB_PLURAL, job)
        except ApiException as e:
            msg = f"cannot create ProofJob {namespace}/{name}: {e.status} {e.reason}: {e.body}"
            raise DemoError(msg) from e


def _get(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(custom.get_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                                        api.PROOFJOB_PLURAL, name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def job_line(job: dict[str, Any], lanes: Mapping[LaneKey, str] | None = None,
             width: int = 16) -> str:
    """``snap-update-5678  snap-update   [####GGyy........]  4/16 Running``: each partition
    in the state of its attempt's lane where ``lanes`` (``lane_states``) has one, as the
    status server shows it, else as the job's status says."""
    st, meta = job.get("status") or {}, job["metadata"]
    parts = sorted(st.get("partitions") or [], key=lambda p: p["index"])
    grid = "".join(SYMBOL.get(_shown(meta, p, lanes or {}), "?") for p in parts)
    total = st.get("partitionCount") or len(parts) or "?"
    return (f"{meta['name']:<20} {job['spec']['proofKind']:<13} "
            f"[{grid:<{width}}] {st.get('succeeded', 0):>2}/{total:<2} "
            f"{st.get('phase', 'Pending')}")


def _shown(meta: Mapping[str, Any], part: Mapping[str, Any],
           lanes: Mapping[LaneKey, str]) -> str:
    state = str(part.get("state", api.PENDING))
    if state in api.TERMINAL_STATES:
        return state
    key = (meta.get("namespace", ""), meta["name"], part["index"], part.get("attempt", 1))
    return lanes.get(key, state)


def worker_lines(worker_statuses: list[dict[str, Any]]) -> list[str]:
    """One line per GPU: who holds its GPU phase, and what its other lanes are doing."""
    out = []
    for ws in sorted(worker_statuses, key=lambda w: w["metadata"]["name"]):
        for w in workerstatus.parse(ws.get("status")).workers:
            lanes = " ".join(
                f"{lane.job.name} P{lane.partition} {lane.stage}" for lane in w.lanes
            )
            doing = f"{w.state}: {lanes}" if lanes else str(w.state)
            out.append(f"  {ws['spec']['nodeName']}/{w.id}: {doing:<60} "
                       f"completed {w.completed}")
    return out


class Screen:
    """Redraws a block in place on a terminal; elsewhere prints the lines that changed."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.shown: list[str] = []

    def show(self, lines: list[str]) -> None:
        if self.tty:
            if self.shown:
                sys.stdout.write(f"\x1b[{len(self.shown)}F\x1b[J")
            sys.stdout.write("\n".join(lines) + "\n")
        else:
            for line in lines:
                if line not in self.shown:
                    sys.stdout.write(line + "\n")
        sys.stdout.flush()
        self.shown = lines


def follow(custom: client.CustomObjectsApi, namespace: str, names: list[str],
           stop: threading.Event, timeout: float) -> dict[str, dict[str, Any]]:
    """Show the jobs and the GPU workers until every job is finished (or stop/timeout)."""
    screen = Screen()
    print(LEGEND, flush=True)
    start = time.monotonic()
    jobs: dict[str, dict[str, Any]] = {}
    while not stop.is_set():
        try:
            got = {n: _get(custom, namespace, n) for n in names}
            gpus = custom.list_cluster_custom_object(api.GROUP, api.VERSION,
                                                     api.WORKERSTATUS_PLURAL)["items"]
        except (ApiException, HTTPError) as e:
            screen.show([*screen.shown[:-1], f"(API unreachable: {e}; retrying)"])
            stop.wait(1)
            continue
        jobs = {n: j for n, j in got.items() if j is not None}
        lanes = lane_states(gpus)
        lines = [job_line(j, lanes) for j in jobs.values()]
        screen.show([*lines, "GPU workers:", *worker_lines(gpus)])
        phases = [(j.get("status") or {}).get("phase") for j in jobs.values()]
        if len(jobs) == len(names) and all(p in FINISHED for p in phases):
            elapsed = time.monotonic() - start
            summary = ", ".join(f"{n} {_ended(j)}" for n, j in jobs.items())
            print(f"{DONE_LINE} in {elapsed:.1f} s: {summary}", flush=True)
            break
        if time.monotonic() - start > timeout:
            print(f"gave up after {timeout:.0f} s", flush=True)
            break
        stop.wait(0.5)  # the display's refresh period
    return jobs


def _ended(job: dict[str, Any]) -> str:
    """A finished job's phase, and for one that did not succeed, why (its Failed condition)."""
    status = job.get("status") or {}
    phase = str(status.get("phase"))
    failed = next((c for c in status.get("conditions") or []
                   if c.get("type") == "Failed" and c.get("status") == "True"), None)
    if phase == "Succeeded" or failed is None:
        return phase
    return f"{phase} ({failed.get('reason')}: {failed.get('message')})"


def _outcome(jobs: dict[str, dict[str, Any]], names: list[str]) -> int:
    ok = len(jobs) == len(names) and all(
        (j.get("status") or {}).get("phase") == "Succeeded" for j in jobs.values())
    for name, job in jobs.items():
        proof = (job.get("status") or {}).get("proof") or {}
        if proof.get("bytes"):
            print(f"{name}: a real proof of {len(proof['bytes']) // 2 - 1} bytes; read it with"
                  f" `kuzk proof {name} -n {NAMESPACE} -o FILE`", flush=True)
        elif proof:
            print(f"{name}: proof {proof.get('commitment')}", flush=True)
    return 0 if ok else 1


# --- a local control plane ------------------------------------------------------------------
def install(cluster: Cluster, tools: filecoin.Tools | None) -> str:
    """Install the chart as a user would, with the local CLIs as the pods' commands (the
    process kubelet runs commands, not images), and the real prover's where it is built;
    return the dashboard URL."""
    real: list[str] = []
    if tools is not None:
        command = tools.command(str(BIN / "kuzk-lane"))
        real = ["--set-json", f"prover.filecoin.command={json.dumps(command)}",
                "--set", f"prover.filecoin.parametersHostPath={tools.params}"]
    cluster.helm(
        "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "--wait",
        "--timeout", "180s",
        "--set", "image.repository=kuzk", "--set", "image.tag=local",
        "--set-json", f"command={json.dumps([str(BIN / 'kuzk')])}",
        "--set-json", f"prover.command={json.dumps([str(BIN / 'kuzk-prover')])}",
        "--set-json", f"operator.watchNamespaces={json.dumps([NAMESPACE])}",
        "--set", "operator.replicas=1", "--set", "statusServer.replicas=1",
        "--set", "statusServer.listenAddress=$(POD_IP)", *real,
    )
    pods = cluster.core.list_namespaced_pod(
        NAMESPACE, label_selector="app.kubernetes.io/name=kuzk-status-server").items
    ip = next(p.status.pod_ip for p in pods if p.status.pod_ip)
    return f"http://{ip}:9821/"


def real_prover() -> filecoin.Tools | None:
    """The real prover and its parameters, where ``scripts/setup`` built them; None, having
    said why in one line, where it did not."""
    tools = filecoin.build(only_print=True)
    if tools.prover.exists() and any(tools.params.glob("*.vk")):
        return tools
    print("no real WindowPoSt in this demo: kuzk-fil-prover and its 2 KiB parameters are not"
          " built yet (testenv/build_filecoin builds them; scripts/setup runs it)", flush=True)
    return None


def real_window_post(cluster: Cluster, tools: filecoin.Tools) -> dict[str, Any]:
    """The real WindowPoSt example over sectors sealed here, their claim bound to a volume on
    the directory they were sealed in."""
    job: dict[str, Any] = yaml.safe_load(REAL_EXAMPLE.read_text())
    real = job["spec"]["filecoin"]
    assert cluster.plane.workdir is not None
    directory = cluster.plane.workdir / "sectors"
    print(f"sealing {REAL_SECTORS} 2 KiB sectors into {directory} ...", flush=True)
    real["sectors"] = filecoin.seal(tools, directory, miner=job["spec"]["sector"]["miner"],
                                    first=1, count=REAL_SECTORS)
    filecoin.create_volume(cluster.core, NAMESPACE, real["volume"]["claimName"], directory)
    return job


@contextlib.contextmanager
def local_cluster(lanes: int = LANES) -> Iterator[Cluster]:
    """A control plane with two GPU nodes of two GPUs, each GPU advertised as ``lanes``
    time-slicing replicas."""
    plane = ControlPlane()
    try:
        plane.start()
    except (StartError, MissingBinaryError) as e:
        plane.stop()
        raise DemoError(str(e)) from e
    try:
        cluster = Cluster(plane)
        nodes = [NodeSpec(f"gpu-node-{i}", gpus=2, replicas=lanes) for i in (1, 2)]
        with cluster.kubelet(nodes):
            for spec in nodes:
                cluster.kubectl("wait", "--for=condition=Ready", f"node/{spec.name}",
                                "--timeout=60s")
            yield cluster
    finally:
        plane.stop()


def run_local(args: argparse.Namespace, stop: threading.Event) -> int:
    t0 = time.monotonic()
    print(f"starting a control plane with 2 GPU nodes of 2 GPUs, {args.lanes} lanes each ...",
          flush=True)
    with local_cluster(args.lanes) as cluster:
        print(f"control plane up; kubeconfig {cluster.kubeconfig}", flush=True)
        print(f"installing kuzk (chart {CHART.relative_to(ROOT)}) in {NAMESPACE} ...",
              flush=True)
        tools = real_prover()
        url = install(cluster, tools)
        print(f"dashboard: {url}   (JSON: {url}status, metrics: {url}metrics)", flush=True)
        print(f"kubectl: export KUBECONFIG={cluster.kubeconfig}; kubectl get pj,ws -A",
              flush=True)
        custom = client.CustomObjectsApi(cluster.api)
        jobs = _examples(args.circuit_log2)
        if tools is not None:
            jobs.append(real_window_post(cluster, tools))
        submit(custom, NAMESPACE, jobs)
        names = [j["metadata"]["name"] for j in jobs]
        got = follow(custom, NAMESPACE, names, stop, args.timeout)
        code = _outcome(got, names)
        print(f"demo ready after {time.monotonic() - t0:.1f} s", flush=True)
        if not stop.is_set():
            print(f"serving the dashboard at {url} until Ctrl-C", flush=True)
            stop.wait()
        print("stopping ...", flush=True)
    print("stopped", flush=True)
    return code


# --- a cluster the user names ---------------------------------------------------------------
def run_on(args: argparse.Namespace, stop: threading.Event) -> int:
    path = Path(args.kubeconfig).expanduser()
    try:
        _, current = config.list_kube_config_contexts(config_file=str(path))
        api_client = config.new_client_from_config(config_file=str(path))
    except (config.ConfigException, OSError, yaml.YAMLError) as e:
        msg = f"cannot use kubeconfig {path}: {e}"
        raise DemoError(msg) from e
    namespace = args.namespace or current["context"].get("namespace") or "default"
    server = api_client.configuration.host
    print(f"using the cluster {server} (context {current['name']}), namespace {namespace}; "
          "installing nothing", flush=True)
    custom = client.CustomObjectsApi(api_client)
    try:
        custom.list_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                             api.PROOFJOB_PLURAL, limit=1)
    except ApiException as e:
        if e.status == 404:
            msg = ("kuzk is not installed in this cluster (no ProofJob API): "
                   "helm install kuzk charts/kuzk first")
            raise DemoError(msg) from e
        msg = f"cannot list ProofJobs in {namespace}: {e.status} {e.reason}"
        raise DemoError(msg) from e
    except HTTPError as e:
        msg = f"cannot reach {server}: {e}"
        raise DemoError(msg) from e
    print("no real WindowPoSt on a cluster of your own: its sectors are yours to name"
          f" ({REAL_EXAMPLE.relative_to(ROOT)} shows how)", flush=True)
    jobs = _examples(args.circuit_log2)
    submit(custom, namespace, jobs)
    names = [j["metadata"]["name"] for j in jobs]
    return _outcome(follow(custom, namespace, names, stop, args.timeout), names)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", metavar="PATH",
                        help="use this cluster (install nothing) instead of a local one")
    parser.add_argument("--namespace", help="namespace on --kubeconfig's cluster "
                        "(default: the context's, else default)")
    parser.add_argument("--circuit-log2", type=int, default=None, metavar="N",
                        help="constraints per partition = 2^N (default: 20 locally, sized "
                        "for about a minute on a laptop CPU; the examples' sizes on a cluster)")
    parser.add_argument("--timeout", type=float, default=900,
                        help="give up following the jobs after this many seconds")
    parser.add_argument("--lanes", type=int, default=None, metavar="N",
                        help=f"lanes per GPU of the local nodes: time-slicing replicas, partition "
                        f"pods sharing one GPU (default {LANES})")
    args = parser.parse_args(argv)
    if args.namespace and not args.kubeconfig:
        parser.error("--namespace needs --kubeconfig (the local demo uses its own)")
    if args.lanes is not None and args.kubeconfig:
        parser.error("--lanes sets the local nodes; on --kubeconfig's cluster the NVIDIA device "
                     "plugin's time-slicing sets them")
    if args.lanes is None:
        args.lanes = LANES
    if args.lanes < 1:
        parser.error("--lanes must be at least 1")
    if args.circuit_log2 is None and not args.kubeconfig:
        args.circuit_log2 = 20
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        return run_on(args, stop) if args.kubeconfig else run_local(args, stop)
    except (DemoError, AssertionError, TimeoutError) as e:  # AssertionError: a failed kubectl/helm
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
