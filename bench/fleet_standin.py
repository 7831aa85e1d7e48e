"""A stand-in prover that serves many partition pods from one process (bench/fleet_scale.py).

Why: at 64 nodes x 8 GPUs a benchmark runs hundreds of partition pods at once; a Python
prover process per pod (interpreter, kubernetes client, TLS) would spend the two cores the
benchmark has on start-up, not on what it measures. So each pod's command is a few lines of
bash (``POD_SCRIPT``) that hands the pod's identity to this server over a loopback TCP socket
and waits for the exit code, and this server plays the prover for it: through kuzk's own
``ProverReporter`` (kuzk_prover.reporter: join, stage writes, the GPU phase, leave, every
write a resourceVersion-checked replace of the node's WorkerStatus) it joins the pod's
GPU's lanes synthesizing, as kuzk's prover does (its acquire writes synth_done when it
waits), holds the GPU phase for the rest, works 0.5-2 s in all (no real proof: a wait, its
length a hash of job name and partition, so both systems of a benchmark get the same work),
leaves its lane and writes a result to the pod's termination message. A pod that is killed
closes its socket: the server then leaves the lane as failed and stops.

Pods of a ``--bare-namespace`` (the Indexed Jobs' of the benchmark) only work: a Job's pod
as the batch controller runs it reports to no WorkerStatus, so what the control plane spends
on it is the baseline that kuzk's pods, with their lanes, are measured against. Their work has
the same two parts, and the GPU part takes its GPU's turns with the other bare pods on that
GPU (``GpuTurns``): two pods given replicas of one time-sliced GPU share it, the GPU does one
context's work at a time, so their GPU parts take at least the time of both. Without the
turns, a Job's pods would be given a GPU per replica, twice the GPUs kuzk's lanes share at
two lanes, and finish sooner for that alone.

Every call into kuzk's lane protocol is made by ``Server.lane`` (join, stages, the GPU phase,
leave) through ``Reporter``, kuzk's ``ProverReporter``, which writes only when the lane moves:
a change of that protocol's signatures is met there and nowhere else.

    python bench/fleet_standin.py --kubeconfig K [--work 0.5 2.0] [--in-flight N]
        [--bare-namespace NS]

It prints ``PORT <n>`` when it listens; a connection that sends ``STATS`` gets its counters
as JSON (pods served, bare pods, writes by kind, PUTs and 409s, claim, acquire and release
latencies and lanes' lives, writes that gave up with WorkerWriteConflict).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import queue
import selectors
import socket
import socketserver
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from kuzk.contract import api
from kuzk.contract.gpu import Gpu
from kuzk.contract.pod import ALIVE_PORT
from kuzk.contract.workerstatus import decisions, writes
from kuzk.contract.workerstatus.decisions import Assignment
from kuzk.contract.workerstatus.lane_model import LaneStage
from kuzk_prover.reporter import ProverReporter

# The pod's side. No $(...) in it: the kubelet expands $(VAR) in a command.
POD_SCRIPT = (
    'exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1\n'
    'printf "%s\\n" "$NODE_NAME $POD_NAMESPACE $POD_NAME $POD_UID $KUZK_JOB $KUZK_JOB_UID'
    ' $KUZK_PROOF_KIND $KUZK_PARTITION $KUZK_ATTEMPT ${NVIDIA_VISIBLE_DEVICES:-none}'
    ' $TERMINATION_MESSAGE_PATH ${POD_IP:-none}" >&3\n'
    "read -r code <&3\n"
    'exit "${code:-1}"\n'
)
FIELDS = 12
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nalive\n"
T = TypeVar("T")
SYNTH_SHARE = 0.4  # of a partition's work; the rest is the "gpu" stage
MAX_CONNECTIONS = 2048  # kept open to the API server without --in-flight (one per lane)


def pod_command(port: int) -> list[str]:
    """The partition pods' command for a server listening on ``port``."""
    return ["bash", "-c", POD_SCRIPT, "kuzk-standin", str(port)]


def work_seconds(job: str, partition: int, low: float, high: float) -> float:
    """A partition's work, the same for a ProofJob and its Job twin (same name)."""
    digest = hashlib.sha256(f"{job}:{partition}".encode()).digest()
    return low + (high - low) * int.from_bytes(digest[:4], "big") / 2**32


class Stats:
    """Counters and latencies, shared by the server's threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.latency: dict[str, list[float]] = {"claim": [], "acquire": [], "release": [],
                                              "lane": []}

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def timed(self, op: str, call: Callable[[], Any]) -> Any:
        started = time.monotonic()
        try:
            return call()
        finally:
            with self.lock:
                self.latency[op].append(time.monotonic() - started)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {"counts": dict(self.counts),
                    "latency": {k: list(v) for k, v in self.latency.items()}}


class CountingClient(client.ApiClient):
    """The real client, counting PUTs and the 409 Conflicts among them."""

    stats: Stats
    in_flight: threading.BoundedSemaphore | None  # None: every pod its own writer

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        response = super().call_api(method, url, *args, **kwargs)  # raises on reading
        if method == "PUT":
            self.stats.add("put")
            if response.status == 409:
                self.stats.add("put_409")
        return response


class Reporter(ProverReporter):
    """kuzk's ProverReporter, counting its stage writes and timing claim and release (what
    a write gave up on, WorkerWriteConflict, is counted too)."""

    stats: Stats

    def _persist(self, what: str, write: Callable[[], T], **kwargs: Any) -> T:
        """Without ``--in-flight`` every pod writes when it moves, as the provers of a real
        fleet do, each on its own connection. With it, at most that many writes at a time,
        each holding its slot from its GET to its last PUT (a limit per request would queue
        a write's PUT behind other writes after its GET, and the node's other provers would
        overwrite what it read); the lanes then wait in the stand-in's queue, not kuzk's. The
        acquire of the GPU phase takes no slot: it waits on a watch while another lane holds
        the GPU, and waiting lanes holding every slot would keep the holders from their
        release."""
        slots = self.api.in_flight
        if what == "acquire" or slots is None:
            return super()._persist(what, write, **kwargs)

        def held() -> T:
            with slots:
                return write()
        return super()._persist(what, held, **kwargs)

    def _write(self, what: str, write: Callable[[], bool]) -> None:
        def counted() -> bool:
            self.stats.add(what)
            try:
                return write()
            except writes.WorkerWriteConflict:
                self.stats.add(f"{what}_gave_up")
                raise

        super()._write(what, counted)

    def join(self, device: Gpu | None = None, *, wait_s: float = 30.0,
             stage: LaneStage = LaneStage.STARTING) -> str:
        self.stats.add("claim")
        try:
            return str(self.stats.timed("claim", lambda: super(Reporter, self).join(
                device, wait_s=wait_s, stage=stage)))
        except writes.WorkerWriteConflict:
            self.stats.add("claim_gave_up")
            raise

    def acquire(self, device_bytes: int = 0) -> decisions.Acquired | None:
        self.stats.add("acquire")
        result: decisions.Acquired | None = self.stats.timed(
            "acquire", lambda: super(Reporter, self).acquire(device_bytes))
        if result is None:
            self.stats.add("acquire_failed")
        elif result is not decisions.Acquired.GRANTED:
            self.stats.add(f"acquire_{result.value}")
        return result


class GpuTurns:
    """A lock per physical GPU (its UUID, as NVIDIA_VISIBLE_DEVICES names it): the GPU
    parts of the bare pods given replicas of one GPU run one at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gpus: dict[str, threading.Lock] = {}

    @contextlib.contextmanager
    def turn(self, devices: str) -> Iterator[None]:
        with self.lock:
            gpu = self.gpus.setdefault(devices, threading.Lock())
        with gpu:
            yield


class ReleaseGaveUp(logging.Handler):
    """ProverReporter.release logs, never raises, a write that failed: count those that gave
    up on conflicts (WorkerWriteConflict)."""

    def __init__(self, stats: Stats) -> None:
        super().__init__(logging.WARNING)
        self.stats = stats

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("release of") and "still conflicting" in message:
            self.stats.add("release_gave_up")


class Handler(socketserver.StreamRequestHandler):
    server: Server

    def handle(self) -> None:
        line = self.rfile.readline().decode().strip()
        if line == "STATS":
            self.wfile.write(json.dumps(self.server.stats.snapshot()).encode())
            return
        fields = line.split(" ")
        if len(fields) != FIELDS:
            self.server.stats.add("bad_request")
            self.wfile.write(b"2\n")
            return
        code = self.server.prove(fields, self.connection)
        try:
            self.wfile.write(f"{code}\n".encode())
        except OSError:
            self.server.stats.add("pod_gone_before_answer")


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(self, api: CountingClient, work: tuple[float, float],
                 bare: frozenset[str] = frozenset()) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.api, self.work, self.bare = api, work, bare
        self.stats = api.stats
        self.answers = Answers(self.stats)
        self.answers.start()
        self.turns = GpuTurns()

    def prove(self, fields: list[str], conn: socket.socket) -> int:
        job, partition, ip = fields[4], int(fields[7]), fields[11]
        seconds = work_seconds(job, partition, *self.work)
        with self.answers.serving(None if ip == "none" else ip):
            return self._prove(fields, conn, seconds)

    def _prove(self, fields: list[str], conn: socket.socket, seconds: float) -> int:
        (node, namespace, pod, pod_uid, job, job_uid, kind, partition, attempt, gpus,
         message_path, _) = fields
        if namespace in self.bare:
            self.stats.add("bare")
            if not self._work_bare(gpus, conn, seconds):
                self.stats.add("killed")
                return 143
        else:
            self.stats.add("pods")
            assignment = Assignment(namespace, job, job_uid, kind, int(partition), int(attempt),
                                    pod, pod_uid)
            devices = "" if gpus == "none" else gpus
            if not self.stats.timed("lane", lambda: self.lane(node, assignment, devices, conn,
                                                              seconds)):
                self.stats.add("killed")
                return 143
        digest = hashlib.sha256(f"{job_uid}:{partition}".encode()).hexdigest()
        result = {"commitment": digest, "synth_ms": round(seconds * SYNTH_SHARE * 1000),
                  "gpu_ms": round(seconds * (1 - SYNTH_SHARE) * 1000), "backend": "standin"}
        Path(message_path).write_text(json.dumps(result))
        return 0

    def _work_bare(self, gpus: str, conn: socket.socket, seconds: float) -> bool:
        """A Job's pod's work: its CPU part, then its GPU part in its GPU's turn. False when
        the pod was killed meanwhile."""
        if not _alive_for(conn, seconds * SYNTH_SHARE):
            return False
        if gpus == "none":
            return _alive_for(conn, seconds * (1 - SYNTH_SHARE))
        with self.turns.turn(gpus):
            return _alive_for(conn, seconds * (1 - SYNTH_SHARE))

    def lane(self, node: str, assignment: Assignment, visible_devices: str,
             conn: socket.socket, seconds: float) -> bool:
        """One partition pod's lane through kuzk's protocol, as the prover runs it: join the
        GPU's lanes synthesizing, synth_done (written by the acquire when it waits), the GPU
        phase (acquire, waiting while another lane holds it; release), leave. False when the
        pod was killed meanwhile (the lane leaves as failed)."""
        reporter = Reporter(self.api, node, assignment, visible_devices=visible_devices)
        reporter.stats = self.stats
        try:
            # as kuzk's prover does: it synthesizes at once, so it joins synthesizing
            reporter.join(stage=LaneStage.SYNTHESIZING)
        except (writes.WorkerStatusMissing, writes.WorkerWriteConflict, ApiException,
                HTTPError, OSError) as e:
            self.stats.add(f"claim_failed_{type(e).__name__}")
        outcome: api.WorkerOutcome = "failed"
        try:
            reporter.on_stage("synthesizing")
            if not _alive_for(conn, seconds * SYNTH_SHARE):
                return False
            reporter.on_stage("synth_done")
            with reporter.gpu_phase():
                if not _alive_for(conn, seconds * (1 - SYNTH_SHARE)):
                    return False
            outcome = "succeeded"
        finally:
            self.stats.timed("release", lambda: reporter.release(outcome))
            self.stats.add("release")
        return True


class Answers(threading.Thread):
    """Answers the probes of every pod served (``kuzk_prover.probes``' protocol: an HTTP GET
    on the pod's address at ``ALIVE_PORT``) from one thread, as each pod's prover would: 200
    while the pod is served, whatever the query. A pod's address listens from the start of
    its serving to its end (before it, the kubelet's startup probe is refused, as a prover
    that is starting refuses it). Only this thread touches its selector: the pods' threads
    hand it their listeners and wake it."""

    def __init__(self, stats: Stats) -> None:
        super().__init__(name="standin-answers", daemon=True)
        self.stats = stats
        self.selector = selectors.DefaultSelector()
        self.changes: queue.SimpleQueue[tuple[bool, socket.socket]] = queue.SimpleQueue()
        self.wake, self.woken = socket.socketpair()
        self.woken.setblocking(False)
        self.selector.register(self.woken, selectors.EVENT_READ, "wake")

    @contextlib.contextmanager
    def serving(self, ip: str | None) -> Iterator[None]:
        listener = None
        if ip is not None:
            try:
                listener = socket.create_server((ip, ALIVE_PORT), backlog=16)
            except OSError:
                self.stats.add("probe_listen_failed")
            else:
                listener.setblocking(False)
                self._change(True, listener)
        try:
            yield
        finally:
            if listener is not None:
                self._change(False, listener)

    def _change(self, add: bool, listener: socket.socket) -> None:
        self.changes.put((add, listener))
        self.wake.send(b"x")

    def run(self) -> None:
        while True:
            for key, _ in self.selector.select():
                with contextlib.suppress(OSError):
                    self._on_ready(key)

    def _on_ready(self, key: selectors.SelectorKey) -> None:
        sock = cast(socket.socket, key.fileobj)
        if key.data == "wake":
            sock.recv(4096)
            while not self.changes.empty():
                add, listener = self.changes.get()
                if add:
                    self.selector.register(listener, selectors.EVENT_READ, "listen")
                else:
                    self.selector.unregister(listener)
                    listener.close()
        elif key.data == "listen":  # a probe connects
            connection, _ = sock.accept()
            connection.setblocking(False)
            self.selector.register(connection, selectors.EVENT_READ, b"")
        else:  # a probe's request, read until its headers end
            request = key.data + sock.recv(4096)
            if request and b"\r\n\r\n" not in request:
                self.selector.modify(sock, selectors.EVENT_READ, request)
                return
            self.selector.unregister(sock)
            with contextlib.closing(sock):
                if request:
                    sock.sendall(ANSWER)
                    self.stats.add("probes_answered")


def _alive_for(conn: socket.socket, seconds: float) -> bool:
    """Wait ``seconds``; False as soon as the pod's end of the socket closes (it was killed)."""
    conn.settimeout(seconds)
    try:
        return conn.recv(1) != b""  # the pod sends nothing more: data or EOF ends the wait
    except TimeoutError:
        return True
    finally:
        conn.settimeout(None)


def stats_of(port: int) -> dict[str, Any]:
    """The counters of the server listening on ``port``."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"STATS\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return dict(json.loads(b"".join(chunks)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True, help="the provers' credentials")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="WorkerStatus writes in flight at most (default: no limit, every "
                             "pod writes when its lane moves)")
    parser.add_argument("--work", type=float, nargs=2, default=(0.5, 2.0),
                        metavar=("MIN", "MAX"), help="seconds a partition works (0.5 2.0)")
    parser.add_argument("--bare-namespace", action="append", default=[], metavar="NS",
                        help="pods of this namespace only work, with no lane (repeatable)")
    args = parser.parse_args(argv)
    if not 0 < args.work[0] <= args.work[1] or (args.in_flight is not None
                                                 and args.in_flight < 1):
        parser.error("--work needs 0 < MIN <= MAX, --in-flight positive")
    configuration = client.Configuration()
    config.load_kube_config(args.kubeconfig, client_configuration=configuration)
    # A connection kept per write in flight (and the acquires waiting on their watches), as
    # each prover of a real fleet has its own.
    configuration.connection_pool_maxsize = max(64, args.in_flight or MAX_CONNECTIONS)
    api = CountingClient(configuration)
    api.stats = Stats()
    api.in_flight = (None if args.in_flight is None
                     else threading.BoundedSemaphore(args.in_flight))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("kuzk_prover.reporter").addHandler(ReleaseGaveUp(api.stats))
    with Server(api, tuple(args.work), frozenset(args.bare_namespace)) as server:
        print(f"PORT {server.server_address[1]}", flush=True)
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
