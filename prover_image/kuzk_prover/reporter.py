"""The prover's side of the WorkerStatus protocol (``contract.workerstatus.decisions``, its
writes ``contract.workerstatus.writes``): ``ProverReporter``, the partition pod's lane on its GPU.
It reads the pod's env and credentials, joins its GPU's lanes, writes its stages (only when they
change: whether the prover is alive is its pod's probes' to say, ``kuzk_prover.alive``), holds the
GPU phase only around the GPU work (``gpu_phase``: acquire, waiting on a watch while another lane
holds it, then release_gpu), leaves when the prover ends, and tries every write again through API
outages (``outage``); a write that still fails never fails the proof. Every lane write carries what
the prover holds when it is made (``measure``: its resident host memory, and the device memory its
CuPy pool holds; the acquire adds what the phase allocates right after it), so the screen shows
memory without a write of its own."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import ConfigException
from urllib3.exceptions import HTTPError

from kuzk.contract.api import WorkerOutcome
from kuzk.contract.gpu import Gpu, visible_gpu
from kuzk.contract.kubeconfig import load_config
from kuzk.contract.workerstatus.decisions import Acquired, Assignment, Memory, describe
from kuzk.contract.workerstatus.lane_model import LaneStage
from kuzk.contract.workerstatus.lanes import ACQUIRE_STAGE, REPORTED_STAGES
from kuzk.contract.workerstatus.writes import (
    Seen,
    WorkerStatusMissing,
    WorkerWriteConflict,
    acquire,
    join,
    leave,
    release_gpu,
    stage,
)
from kuzk_prover.inputs import PodIdentity, identity_from_env
from kuzk_prover.outage import OUTAGE_BUDGET_S, WRITE_ERRORS, Quiet, persist
from kuzk_prover.termination import brief

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a new pod's join tries again while its Node cannot be found (the first lane of a GPU
# creates the GPU's WorkerStatus, owned by the Node).
JOIN_WAIT_S = 10.0
# How long a lane waits for its GPU's phase before it proves without it. A holder whose pod
# died or hung is freed by the operator's finalizer release once its pod has ended (a hung
# one's liveness probe has it killed); this bounds the wait when no operator runs at all.
GPU_WAIT_S = 600.0


def host_memory_bytes(pid: int | None = None) -> int:
    """The resident memory of process ``pid`` (this process by default), from
    ``/proc/PID/statm``; 0 where there is none (the process is gone, or no /proc)."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def cupy_pool_bytes() -> int:
    """The device memory CuPy's default pool holds (0 when CuPy is not in use: the NumPy
    backend never imports it)."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return 0
    return int(cupy.get_default_memory_pool().total_bytes())


def _api_from_env(env: Mapping[str, str]) -> client.ApiClient:
    configuration = client.Configuration()
    # ProverReporter tries again itself, with backoff and a budget; urllib3's instant
    # retries would only add noise to the log.
    configuration.retries = 0
    load_config(configuration, env.get("KUBECONFIG"))
    return client.ApiClient(configuration)


class ProverReporter:
    """A partition pod's lane: ``join`` at start, ``on_stage`` as the prover moves (the
    ``prove(on_stage=...)`` hook), ``gpu_phase`` around the GPU work (the
    ``prove(gpu_phase=...)`` hook), ``release`` (leave) at the end: it writes when the lane
    moves, never to say that it is alive. Used as a context
    manager, leaving the block releases what is still held: "failed" on an exception, else
    "succeeded".

    Every write tries again with backoff through transient errors for ``outage_budget``
    seconds. A stage write that still fails makes the reporter quiet: it says so
    once and writes nothing more but the release; the proof goes on."""

    def __init__(
        self,
        api: client.ApiClient,
        node: str,
        assignment: Assignment,
        *,
        visible_devices: str = "",
        outage_budget: float = OUTAGE_BUDGET_S,
        gpu_wait: float = GPU_WAIT_S,
        host_memory: Callable[[], int] = host_memory_bytes,
        device_memory: Callable[[], int] = cupy_pool_bytes,
    ) -> None:
        self.api, self.node, self.assignment = api, node, assignment
        self.host_memory, self.device_memory = host_memory, device_memory
        self.gpu_wait = gpu_wait
        self.visible_devices = visible_devices
        self.outage_budget = outage_budget
        self.worker_status: str | None = None  # the WorkerStatus (the GPU) it joined
        self._lock = threading.Lock()
        self._released = False
        self._gone = False  # a write found the lane removed: nothing is left to leave
        self._quiet = threading.Event()  # set: no more stage writes
        self._joined_in: LaneStage | None = None  # the stage its join wrote
        self.seen = Seen()  # its last read or written version: its later reads are the cache's

    @classmethod
    def for_pod(
        cls,
        pod: PodIdentity,
        api: client.ApiClient | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        outage_budget: float = OUTAGE_BUDGET_S,
    ) -> ProverReporter:
        """For the partition pod ``pod`` (``inputs.identity_from_env``), with its
        ServiceAccount's credentials (``contract.kubeconfig.load_config``: the in-cluster token,
        else the kubeconfig that ``KUBECONFIG`` in ``environ`` names) unless ``api`` is
        given. Raises ValueError when the env did not say which pod and node it is."""
        missing = pod.missing()
        if missing:
            msg = f"the prover's env lacks {', '.join(missing)}"
            raise ValueError(msg)
        assignment = Assignment(
            job_namespace=pod.namespace,
            job_name=pod.job,
            job_uid=pod.job_uid,
            proof_kind=pod.proof_kind,
            partition=pod.partition,
            attempt=pod.attempt,
            pod_name=pod.pod_name,
            pod_uid=pod.pod_uid,
            priority_class=pod.priority_class,
        )
        return cls(
            api or _api_from_env(os.environ if environ is None else environ),
            pod.node,
            assignment,
            visible_devices=pod.visible_devices,
            outage_budget=outage_budget,
        )

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        api: client.ApiClient | None = None,
        *,
        outage_budget: float = OUTAGE_BUDGET_S,
    ) -> ProverReporter:
        """``for_pod`` the pod the env describes (the process's own env by default)."""
        env = os.environ if environ is None else environ
        return cls.for_pod(identity_from_env(env), api, environ=env,
                           outage_budget=outage_budget)

    def gpu(self, device: Gpu | None = None) -> Gpu:
        """The GPU this pod drives: the device's own (from CuPy) if given, else the first of
        NVIDIA_VISIBLE_DEVICES, else the node's CPU (``contract.gpu.visible_gpu``)."""
        if device is not None:
            return device
        return visible_gpu(self.visible_devices, self.node)

    def _name(self) -> str:
        """The WorkerStatus the lane's writes after ``join`` go to."""
        assert self.worker_status is not None
        return self.worker_status

    def measure(self, allocating: int = 0) -> Memory:
        """What the prover holds now, and the device memory it allocates right after
        (``allocating``), for the write it is about to make."""
        return Memory(self.host_memory(), self.device_memory() + allocating)

    def join(self, device: Gpu | None = None, *, wait_s: float = 30.0,
             stage: LaneStage = LaneStage.STARTING) -> str:
        """Join this pod's GPU's lanes in ``stage`` (``lanes.JOIN_STAGES``: a prover that
        synthesizes at once joins synthesizing, and its report of that stage writes nothing),
        creating the GPU's WorkerStatus if this is its first lane, waiting up to ``wait_s``
        while its node is not there yet and up to ``outage_budget`` through transient errors.
        Returns the WorkerStatus's name; raises what the last try raised."""
        gpu = self.gpu(device)
        self.worker_status = self._persist(
            "join", lambda: join(self.api, self.node, gpu, self.assignment, memory=self.measure,
                                 stage=stage, seen=self.seen),
            missing_s=wait_s,
        )
        self._joined_in = stage
        return self.worker_status

    def join_or_go_on(self, device: Gpu | None = None,
                      stage: LaneStage = LaneStage.STARTING) -> None:
        """``join``, best effort: a proof is worth more than its status line, and the
        operator's finalizer release and sweep repair a lane the prover could not write."""
        try:
            worker = self.join(device, wait_s=JOIN_WAIT_S, stage=stage)
        except (WorkerStatusMissing, WorkerWriteConflict, ApiException, HTTPError,
                OSError) as exc:
            log.warning("could not join the GPU's lanes on %s (%s): proving on without worker"
                        " status", self.node, brief(exc))
            return
        log.info("joined the lanes of WorkerStatus %s on %s", worker, self.node)

    def on_stage(self, stage_name: str) -> None:
        """Report a stage of the lane: synthesizing is written; synth_done by the acquire
        that follows it, when the lane has to wait (``lanes.ACQUIRE_STAGE``); gpu and
        committing by ``gpu_phase``'s acquire and release."""
        if (stage_name not in REPORTED_STAGES or stage_name == ACQUIRE_STAGE
                or stage_name == self._joined_in):
            return
        self._write("stage", lambda: stage(self.api, self._name(), self.assignment, stage_name,
                                           memory=self.measure(), seen=self.seen))

    @contextlib.contextmanager
    def gpu_phase(self, device_bytes: int = 0) -> Iterator[None]:
        """Hold the GPU's phase for the block, which allocates ``device_bytes`` of device
        memory: acquire it (waiting on a watch of the WorkerStatus while another lane holds
        it), then give it up. Best effort like every write: without a lane, or when the API
        stays unreachable, the block runs anyway."""
        held = self.acquire(device_bytes) is Acquired.GRANTED
        try:
            yield
        finally:
            if held:
                self.release_gpu()

    def acquire(self, device_bytes: int = 0) -> Acquired | None:
        """Hold the GPU's phase, waiting on a watch while another lane holds it (up to
        ``gpu_wait``): GRANTED, WAITING (still held by another when the wait ran out), GONE
        (the lane was removed), or None when there is no lane to write (never joined, or
        quiet) or the writes kept failing. The write that takes the phase carries the
        ``device_bytes`` the phase allocates right after it: the holder's device memory."""
        if self._quiet.is_set() or self.worker_status is None:
            return None
        started = time.monotonic()
        result = self._best_effort(
            "acquire",
            lambda: acquire(self.api, self._name(), self.assignment, wait_s=self.gpu_wait,
                            memory=lambda: self.measure(device_bytes), seen=self.seen),
            "acquiring the GPU phase",
            "proving on without it",
        )
        if result is None:
            return None
        waited = time.monotonic() - started
        if result is Acquired.GRANTED:
            log.info("holds the GPU phase of WorkerStatus %s (waited %.2f s)",
                     self.worker_status, waited)
        elif result is Acquired.GONE:
            self._lost_lane()
        else:
            log.warning(
                "the GPU phase of WorkerStatus %s stayed held for %.0f s: proving without it",
                self.worker_status,
                waited,
            )
        return result

    def release_gpu(self) -> None:
        """Give up the GPU's phase this lane holds (best effort, like every write)."""
        given = self._best_effort(
            "GPU release",
            lambda: release_gpu(self.api, self._name(), self.assignment, memory=self.measure(),
                                seen=self.seen),
            "giving up the GPU phase",
            "the operator's finalizer release will",
        )
        if given is None:
            return
        if not given:
            log.warning(
                "%s no longer held the GPU phase on %s", describe(self.assignment), self.node
            )

    def release(self, outcome: WorkerOutcome) -> bool:
        """Stop the stage writes and leave the lane; True if this call removed it. Without a
        join, or a second time, it writes nothing. A failure is logged, never raised: the
        operator's finalizer release repairs it."""
        with self._lock:
            if self._released or self._gone or self.worker_status is None:
                return False
            self._released = True
        self._quiet.set()
        left = self._best_effort(
            "leave",
            lambda: leave(self.api, self._name(), self.assignment, outcome, seen=self.seen),
            "release",
            "the operator's finalizer release will do it",
        )
        return bool(left)

    def _best_effort(
        self, what: str, write: Callable[[], T], doing: str, instead: str
    ) -> T | None:
        """``write()`` through ``_persist``; a failure is logged with what happens instead, and
        None returned: a status write never fails the proof."""
        try:
            return self._persist(what, write)
        except WRITE_ERRORS as error:
            log.warning(
                "%s of %s failed (%s); %s", doing, describe(self.assignment), brief(error), instead
            )
            return None

    def __enter__(self) -> ProverReporter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.release("succeeded" if exc_type is None else "failed")

    def _persist(
        self,
        what: str,
        write: Callable[[], T],
        *,
        missing_s: float = 0.0,
        quiet: threading.Event | None = None,
    ) -> T:
        """``outage.persist`` on this lane's node, with its outage budget: every write of the
        lane goes through it."""
        return persist(what, write, node=self.node, budget=self.outage_budget,
                       missing_s=missing_s, quiet=quiet)

    def _write(self, what: str, write: Callable[[], bool]) -> None:
        if self._quiet.is_set() or self.worker_status is None:
            return
        try:
            held = self._persist(what, write, quiet=self._quiet)
        except Quiet:
            return
        except WRITE_ERRORS as error:
            with self._lock:
                first = not self._quiet.is_set()
                self._quiet.set()
            if not first:
                return
            log.warning(
                "%s of %s failed (%s): proving on without worker status; the operator's"
                " finalizer release repairs WorkerStatus %s on %s",
                what,
                describe(self.assignment),
                brief(error),
                self.worker_status,
                self.node,
            )
            return
        if not held:
            self._lost_lane()

    def _lost_lane(self) -> None:
        """The lane was removed under us (the sweep, or the finalizer): stop writing about a
        lane that is gone, its leave included (a second refused write would count twice)."""
        log.warning("%s has no lane on %s any more", describe(self.assignment), self.node)
        with self._lock:
            self._gone = True
        self._quiet.set()


def for_partition_pod(pod: PodIdentity, env: Mapping[str, str],
                      outage_budget: float = OUTAGE_BUDGET_S) -> ProverReporter | None:
    """The lane of the partition pod ``pod``; None outside one (no pod UID or node: a
    prover run by hand), or when its credentials cannot be loaded, which is said once."""
    if not pod.pod_uid or not pod.node:
        return None
    try:
        return ProverReporter.for_pod(pod, environ=env, outage_budget=outage_budget)
    except (ValueError, ConfigException, OSError) as exc:
        log.warning("not reporting the GPU worker's status: %s", brief(exc))
        return None
