"""The status server under load, beside a naive handler that LISTs on every request, in one run.

    .venv/bin/python bench/status_load.py [--jobs 1000] [--partitions 16] [--nodes 64]
        [--gpus 8] [--clients 200] [--seconds 30] [--burst 1000] [--page 100] [--json PATH]

Starts its own control plane (etcd and kube-apiserver from testenv; no kubelet, no
scheduler: no pod runs) and creates synthetic objects in it: ``--nodes`` Nodes with ``--gpus``
nvidia.com/gpu each and their WorkerStatuses (every other GPU with two lanes, one of them in
its GPU phase), and ``--jobs`` snap-update ProofJobs of ``--partitions`` partitions in mixed
states, one in ten of them in a second namespace, every status written through the status
subresource as the operator and the provers write it. Then:

* ``kuzk status-server`` (its own process) lists and watches them;
* ``--clients`` concurrent clients poll it for ``--seconds`` each round, paced at the
  dashboard's 1.5 s: the whole document (without and with ``If-None-Match``), a page of
  ``--page`` jobs (each client one of the first ten pages, as ``metadata.continue`` leads
  there), the summary (``?fields=`` all but ``pipelines``) and a filtered query (the second
  namespace's jobs); then back to back (saturating), the whole document without and with
  ``If-None-Match``, and pages;
* the reference, in the same run: a naive handler (its own process) that LISTs the four
  resources from the API server and renders the same document on every request, saturated by
  8 clients back to back (as many as it answers at once, so it cannot exhaust memory), each
  waiting up to 10 minutes for its answer;
* the status server's resident memory, and the view's lag behind a burst of ``--burst``
  status updates (from the last write's answer until ``/metrics`` counts every change).

It prints latency (p50, p99) and requests/s per round, the throughput ratios against the naive
handler, RSS and lag, beside the goals (paced p99 under 50 ms for a page and the summary and
under 200 ms for the whole document, at least 20x the naive throughput, RSS under 300 MB, lag
under 2 s). Clients, server and API server share this machine's CPUs; each round also prints
the machine's load average, since other work on it skews the times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # testenv lives in the repository, not in the package
    sys.path.insert(0, str(ROOT))

from kuzk.contract import api, workerstatus  # noqa: E402
from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE  # noqa: E402
from kuzk.contract.listwatch import KubeClient  # noqa: E402
from kuzk.contract.workerstatus import lane_model  # noqa: E402
from kuzk.status.query import Query  # noqa: E402
from kuzk.status.view import StatusView  # noqa: E402
from kuzk.status.watches import targets  # noqa: E402
from testenv.cluster import Cluster, install_kuzk  # noqa: E402
from testenv.controlplane import ControlPlane, free_port, stop_group, tail  # noqa: E402
from testenv.waiting import wait_for  # noqa: E402

NAMESPACE = "bench-status"
OTHER_NAMESPACE = "bench-status-b"  # one job in ten: the filtered query's
PACE_S = 1.5
NAIVE_IN_FLIGHT = 8
CLIENT_TIMEOUT_S = 60
# The naive handler's answers at 10,000 jobs take most of a minute each: as many clients as
# it answers at once, each waiting for its answer (what came in the round, over the time to
# its last answer, is its throughput).
NAIVE_TIMEOUT_S = 600
CYCLE = ("done", "done", "gpu", "synthesizing", "synth_done", "scheduled", "pending", "done")
GOALS = {"p99_ms": 50.0, "p99_full_ms": 200.0, "ratio": 20.0, "rss_mb": 300.0, "lag_s": 2.0}
PAGES = 10
SUMMARY = "fields=view,fleet,gpu_workers,nodes,counters"


def namespace_of(job: int) -> str:
    return OTHER_NAMESPACE if job % 10 == 9 else NAMESPACE


# --- synthetic objects ----------------------------------------------------------------------
def partitions(job: int, count: int, last: str) -> list[dict[str, Any]]:
    out = []
    for p in range(count):
        state = last if p == count - 1 else CYCLE[(job + p) % len(CYCLE)]
        entry: dict[str, Any] = {"index": p, "state": state, "attempt": 1 + (job + p) % 2}
        if state not in ("pending", "scheduled"):
            entry |= {"node": f"gpu-{(job + p) % 64}", "worker": f"W{p % 8}"}
        if state == "done":
            entry |= {"synthMs": 800 + p, "gpuMs": 90 + job % 10}
        out.append(entry)
    return out


def job_status(job: int, count: int, last: str) -> dict[str, Any]:
    parts = partitions(job, count, last)
    return {"phase": "Running", "partitionCount": count,
            "startTime": api.format_time(datetime.now(UTC)),
            "succeeded": sum(p["state"] == "done" for p in parts), "partitions": parts}


def worker_status(node: int, gpus: int, jobs: int) -> list[tuple[str, dict[str, Any]]]:
    """A node's GPUs' WorkerStatuses in the one model's stored form, by GPU UUID: every other
    GPU with two lanes, one holding its GPU phase and one synthesizing; the rest idle."""
    now = datetime.now(UTC)
    workers = []
    for k in range(gpus):
        gpu_uuid = f"GPU-{uuid.uuid4()}"
        worker = workerstatus.Worker(
            id=workerstatus.gpu_id(gpu_uuid),
            gpu=workerstatus.Gpu(gpu_uuid, "NVIDIA H100 80GB HBM3"),
            completed=node + k, since=now)
        if k % 2 == 0 and jobs:
            lanes = []
            for slot, stage in enumerate((lane_model.LaneStage.GPU,
                                          lane_model.LaneStage.SYNTHESIZING)):
                name = f"snap-{(node * gpus + k + slot) % jobs:04d}"
                lanes.append(lane_model.Lane(
                    pod=lane_model.PodRef(f"{name}-p{k}-a1", str(uuid.uuid4())),
                    job=lane_model.JobRef(namespace_of((node * gpus + k + slot) % jobs), name,
                                          str(uuid.uuid4()), "snap-update"),
                    partition=k, attempt=1, priority=0, stage=stage, since=now))
            worker = replace(worker, lanes=tuple(lanes),
                             holder=workerstatus.Holder(lanes[0].pod, now))
        workers.append(worker)
    # One WorkerStatus per GPU; the node's stale writes on its first.
    return [(w.gpu.uuid, workerstatus.WorkerStatusModel(
                (w,), stale_writes_rejected=node % 3 if k == 0 else 0).as_status(now))
            for k, w in enumerate(workers)]


def populate(cluster: Cluster, args: argparse.Namespace) -> None:
    custom = client.CustomObjectsApi(cluster.api)
    core = cluster.core
    for namespace in (NAMESPACE, OTHER_NAMESPACE):
        core.create_namespace({"metadata": {"name": namespace}})
    ws = (api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL)

    def make_node(i: int) -> None:
        name = f"gpu-{i}"
        core.create_node({"metadata": {"name": name}})
        amounts = {DEFAULT_GPU_RESOURCE: str(args.gpus), "cpu": "64", "memory": "512Gi",
                   "pods": "110"}
        core.patch_node_status(name, {"status": {"capacity": amounts, "allocatable": amounts}})
        for gpu, status in worker_status(i, args.gpus, args.jobs):
            gpu_ws = workerstatus.worker_status_name(name, gpu)
            custom.create_cluster_custom_object(*ws, {
                "apiVersion": api.API_VERSION, "kind": api.WORKERSTATUS_KIND,
                "metadata": {"name": gpu_ws}, "spec": {"nodeName": name, "gpu": {"uuid": gpu}}})
            custom.patch_cluster_custom_object_status(*ws, gpu_ws, {"status": status})

    def make_job(i: int) -> None:
        name = f"snap-{i:04d}"
        pj = (api.GROUP, api.VERSION, namespace_of(i), api.PROOFJOB_PLURAL)
        custom.create_namespaced_custom_object(*pj, {
            "apiVersion": api.API_VERSION, "kind": api.PROOFJOB_KIND,
            "metadata": {"name": name},
            "spec": {"proofKind": "snap-update", "partitions": args.partitions,
                     "sector": {"miner": 1000, "number": i}}})
        custom.patch_namespaced_custom_object_status(
            *pj, name, {"status": job_status(i, args.partitions, "pending")})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(make_node, range(args.nodes)))
        list(pool.map(make_job, range(args.jobs)))


def burst(cluster: Cluster, args: argparse.Namespace) -> float:
    """Turn every job's last partition ``done``; return when the last write was answered."""
    custom = client.CustomObjectsApi(cluster.api)

    def finish(i: int) -> None:
        custom.patch_namespaced_custom_object_status(
            api.GROUP, api.VERSION, namespace_of(i), api.PROOFJOB_PLURAL, f"snap-{i:04d}",
            {"status": job_status(i, args.partitions, "done")})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(finish, range(min(args.burst, args.jobs))))
    return time.monotonic()


# --- servers ---------------------------------------------------------------------------------
def start_server(argv: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{argv[2:4]} exited {proc.returncode}:\n{tail(log)}")
        try:
            return bool(urlopen_status(f"http://127.0.0.1:{port}/readyz") == 200)
        except OSError:
            return False

    wait_for(ready, 300, f"{' '.join(argv[1:3])} ready", interval=0.05)
    return proc


def urlopen_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def serve_naive(port: int, kubeconfig: str) -> None:
    """The reference: LIST everything and render on every request."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    chosen = targets([])
    gate = asyncio.Semaphore(NAIVE_IN_FLIGHT)
    kube: dict[str, KubeClient] = {}

    async def status(request: web.Request) -> web.Response:
        async with gate:
            view = StatusView(keep_finished=600)
            for target in chosen:
                view.add_watch(target.name, target.resource)
            listings = await asyncio.gather(*(
                kube["client"].list(t.path, {"labelSelector": t.selector} if t.selector else {})
                for t in chosen))
            for target, listing in zip(chosen, listings, strict=True):
                view.listed(target.name, listing.get("items") or [])
            body = (await view.answer(Query())).body
        return web.Response(body=body, content_type="application/json")

    async def readyz(request: web.Request) -> web.Response:
        return web.json_response({"ready": True})

    async def session(app: web.Application) -> Any:
        kube["client"] = KubeClient(configuration)
        yield
        await kube["client"].close()

    app = web.Application()
    app.router.add_get("/status", status)
    app.router.add_get("/readyz", readyz)
    app.cleanup_ctx.append(session)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# --- load ------------------------------------------------------------------------------------
async def load(urls: list[str], clients: int, seconds: float, *, conditional: bool,
               pace: float | None, timeout_s: float = CLIENT_TIMEOUT_S) -> dict[str, Any]:
    """``clients`` pollers, the n-th asking ``urls[n % len(urls)]``."""
    latencies: list[float] = []
    received = 0
    codes: Counter[str] = Counter()
    started = time.monotonic()
    deadline = started + seconds
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                     timeout=timeout) as session:

        async def poller(url: str) -> None:
            nonlocal received
            etag: str | None = None
            due = time.monotonic() + (random.random() * pace if pace else 0.0)
            while True:
                if pace:
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                    due += pace
                if time.monotonic() >= deadline:
                    return
                headers = {"Accept-Encoding": "gzip"}
                if conditional and etag:
                    headers["If-None-Match"] = etag
                t = time.perf_counter()
                try:
                    async with session.get(url, headers=headers) as response:
                        body = await response.read()
                        received += len(body)
                        codes[str(response.status)] += 1
                        etag = response.headers.get("ETag", etag)
                except (aiohttp.ClientError, TimeoutError) as error:
                    codes[type(error).__name__] += 1
                    continue
                latencies.append(time.perf_counter() - t)

        await asyncio.gather(*(poller(urls[n % len(urls)]) for n in range(clients)))
    elapsed = time.monotonic() - started
    latencies.sort()

    def pct(q: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))] \
            if latencies else float("nan")

    return {"requests": len(latencies), "rps": len(latencies) / elapsed, "p50_ms": pct(0.50),
            "p99_ms": pct(0.99), "codes": dict(codes),
            "mean_kb": received / 1024 / max(1, len(latencies))}


def pages(url: str, limit: int) -> list[str]:
    """The URLs of the first PAGES pages of ``limit`` jobs, following metadata.continue."""
    out = [f"{url}?limit={limit}"]
    while len(out) < PAGES:
        with urllib.request.urlopen(out[-1], timeout=60) as response:
            token = json.loads(response.read())["metadata"]["continue"]
        if token is None:
            break
        out.append(f"{url}?limit={limit}&continue={token}")
    return out


def rss_mb(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text()
                  .splitlines() if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def done_partitions(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "kuzk_partitions" and s.labels.get("state") == "done")


# --- the run ---------------------------------------------------------------------------------
def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"size": {k: getattr(args, k) for k in (
        "jobs", "partitions", "nodes", "gpus", "clients", "seconds", "burst", "page")}}
    with ControlPlane(with_scheduler=False, with_controller_manager=False) as plane:
        cluster = Cluster(plane)
        install_kuzk(cluster)
        t = time.monotonic()
        populate(cluster, args)
        results["populate_s"] = time.monotonic() - t
        port, naive_port = free_port(), free_port()
        t = time.monotonic()
        server = start_server(
            [sys.executable, "-m", "kuzk.cli", "status-server", "--host", "127.0.0.1",
             "--port", str(port), "--kubeconfig", str(plane.kubeconfig)],
            port, workdir / "status-server.log")
        results["ready_s"] = time.monotonic() - t
        naive = start_server(
            [sys.executable, str(Path(__file__).resolve()), "--serve-naive", str(naive_port),
             "--kubeconfig", str(plane.kubeconfig)],
            naive_port, workdir / "naive.log")
        try:
            url = f"http://127.0.0.1:{port}/status"
            urlopen_status(url)  # a running server has rendered long before its first poller
            full, paged = [url], pages(url, args.page)
            summary, filtered = [f"{url}?{SUMMARY}"], [f"{url}?namespace={OTHER_NAMESPACE}"]
            rounds = [("paced", full, False, PACE_S), ("paced_etag", full, True, PACE_S),
                      ("paced_page", paged, False, PACE_S),
                      ("paced_summary", summary, False, PACE_S),
                      ("paced_filtered", filtered, False, PACE_S),
                      ("saturating", full, False, None), ("saturating_etag", full, True, None),
                      ("saturating_page", paged, False, None),
                      ("naive_saturating", [f"http://127.0.0.1:{naive_port}/status"], False,
                       None)]
            for name, targets, conditional, pace in rounds:
                reference = name.startswith("naive")
                results[name] = asyncio.run(load(
                    targets, min(args.clients, NAIVE_IN_FLIGHT) if reference else args.clients,
                    args.seconds, conditional=conditional, pace=pace,
                    timeout_s=NAIVE_TIMEOUT_S if reference else CLIENT_TIMEOUT_S))
                results[name]["loadavg_1m"] = os.getloadavg()[0]
                report_round(name, results[name])
            stop_group(naive)  # it would go on working through abandoned requests
            results["rss_mb"], results["peak_rss_mb"] = rss_mb(server.pid)
            expected = done_partitions(port) + min(args.burst, args.jobs)
            first = time.monotonic()
            last = burst(cluster, args)
            wait_for(lambda: done_partitions(port) >= expected, 120,
                     "the view counting every burst update", interval=0.1)
            seen = time.monotonic()
            results["burst_writes_s"] = last - first
            results["lag_s"] = seen - last
            results["peak_rss_after_burst_mb"] = rss_mb(server.pid)[1]
        finally:
            stop_group(server)
            stop_group(naive)
    naive_rps = results["naive_saturating"]["rps"] or float("nan")
    results["ratio_etag"] = results["saturating_etag"]["rps"] / naive_rps
    results["ratio_200"] = results["saturating"]["rps"] / naive_rps
    results["ratio_page"] = results["saturating_page"]["rps"] / naive_rps
    return results


def report_round(name: str, r: dict[str, Any]) -> None:
    print(f"  {name:<18} {r['rps']:9.1f} req/s   p50 {r['p50_ms']:8.1f} ms   "
          f"p99 {r['p99_ms']:8.1f} ms   {r['requests']:6d} answers {r['codes']}, "
          f"{r['mean_kb']:.1f} kB each   (load average {r['loadavg_1m']:.1f})", flush=True)


def report(r: dict[str, Any]) -> None:
    size = r["size"]
    print(f"\nview: {size['jobs']} ProofJobs x {size['partitions']} partitions, "
          f"{size['nodes']} nodes x {size['gpus']} GPUs; {size['clients']} clients, "
          f"{size['seconds']} s per round")
    print(f"objects written in {r['populate_s']:.1f} s; status server ready (first lists) "
          f"in {r['ready_s']:.2f} s")
    print(f"throughput ratio, status server / naive LIST-per-request (saturating): "
          f"{r['ratio_etag']:.1f}x with If-None-Match, {r['ratio_200']:.1f}x with full 200s, "
          f"{r['ratio_page']:.1f}x for pages "
          f"(goal >= {GOALS['ratio']:.0f}x)")
    print(f"paced p99: a page {r['paced_page']['p99_ms']:.1f} ms, the summary "
          f"{r['paced_summary']['p99_ms']:.1f} ms, filtered {r['paced_filtered']['p99_ms']:.1f}"
          f" ms (goal < {GOALS['p99_ms']:.0f} ms); the whole document "
          f"{r['paced']['p99_ms']:.1f} ms / {r['paced_etag']['p99_ms']:.1f} ms (200 / "
          f"If-None-Match; goal < {GOALS['p99_full_ms']:.0f} ms)")
    print(f"saturating p99: the whole document {r['saturating']['p99_ms']:.1f} ms / "
          f"{r['saturating_etag']['p99_ms']:.1f} ms, a page "
          f"{r['saturating_page']['p99_ms']:.1f} ms")
    print(f"status server RSS {r['rss_mb']:.0f} MB, peak {r['peak_rss_after_burst_mb']:.0f} MB "
          f"(goal < {GOALS['rss_mb']:.0f} MB)")
    print(f"view lag after a burst of {min(size['burst'], size['jobs'])} status updates "
          f"(written in {r['burst_writes_s']:.2f} s): {r['lag_s']:.2f} s "
          f"(goal < {GOALS['lag_s']:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--page", type=int, default=100, help="jobs per page (?limit=)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--serve-naive", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_naive is not None:
        serve_naive(args.serve_naive, args.kubeconfig)
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="status-load-"))
    print(f"rounds (logs in {workdir}):", flush=True)
    results = run(args, workdir)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
