"""The in-memory view: the current objects, what the watches have seen, and the answers.

The watches call ``listed`` after each full list and ``event`` for each watch event; requests
only call ``answer``. Every change that shows on the screen bumps ``revision``. The answers
(``answers``) come from moments of the view (``fragments``), each made from what ``prepare``
hands over: the fields besides ``pipelines``, and the jobs whose line changed since the last
(``refresh`` and ``max_stale`` say when a moment is made again and how old one may be served
while it is).
"""

from __future__ import annotations

import gc
import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kuzk.contract import api, ledger
from kuzk.contract.api import PENDING, PHASE_SUSPENDED, SCHEDULED
from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE
from kuzk.contract.gputime import GPU_TIME_MODES
from kuzk.contract.ledger import GpuKey, Ledger, Tally
from kuzk.status import fragments, objects
from kuzk.status.aggregate import LaneKey, PodKey, Snapshot, Sync, lane_index, pod_key
from kuzk.status.answers import Answer, Answers, Preparation
from kuzk.status.fragments import Inputs, Stale, Template
from kuzk.status.history import Bound, History, Queue
from kuzk.status.objects import Job, Node, Pod, WorkerNode
from kuzk.status.query import Query

PROOFJOBS, WORKERSTATUSES, PODS, NODES = "proofjobs", "workerstatuses", "pods", "nodes"
LEDGER = "ledger"
RESOURCES = (PROOFJOBS, WORKERSTATUSES, PODS, NODES, LEDGER)
MAX_STALE_S = 1.0
REFRESH_S = 15.0
# How far behind now a GPU's open mode is counted. A write closes a mode at its writer's
# moment and the watch brings it a moment later; a GPU counted up to now would then have
# shown more than its object ever stores, and a restarted server (which cannot know what this
# one showed) would show less: a counter reset to Prometheus. Writes land well within this.
OPEN_MODE_LAG_S = 5.0
log = logging.getLogger("kuzk.status.view")


@dataclass
class WatchState:
    """One list+watch loop: whether its first list is in, whether it is connected now."""

    resource: str
    listed: bool = False
    connected: bool = False
    lost_at: float | None = None
    restarts: int = 0


@dataclass
class StatusView:
    keep_finished: float
    clock: Callable[[], float] = time.time
    max_stale: float = MAX_STALE_S
    refresh: float = REFRESH_S
    started: float = field(default=0.0)
    revision: int = 0
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    open_mode_lag: float = OPEN_MODE_LAG_S
    # Whether to set the first lists' objects aside from the garbage collector (``listed``):
    # the server's, not a test's (it is for the whole process).
    freeze_first_lists: bool = False

    def __post_init__(self) -> None:
        self.started = self.started or self.clock()
        self.history = History(self.started)
        self.jobs: dict[str, Job] = {}
        self.worker_nodes: dict[str, WorkerNode] = {}
        self.nodes: dict[str, Node] = {}
        self.pods: dict[str, Pod] = {}
        self.pods_by_key: dict[PodKey, Pod] = {}
        self.ledgers: dict[str, Ledger] = {}
        self.tallies: dict[str, Tally] = {}  # job key -> what the job counts
        self.watches: dict[str, WatchState] = {}
        self._listing: dict[str, set[str]] = {}  # the keys of a list read so far, by watch
        self.instance = secrets.token_hex(4)
        self.answers = Answers(self)
        # What could run on a GPU without lanes, kept per job so an event costs one job.
        self._waiting: dict[str, tuple[bool, frozenset[tuple[str, Bound]]]] = {}
        self._pending_jobs = 0
        self._scheduled: dict[str, set[Bound]] = {}
        self._counts: tuple[int, Tally] = (-1, Tally())
        # GPU time shown, and the GPUs' model names, by (node, worker, UUID)
        self._gpu_shown: dict[tuple[str, str, str], dict[str, float]] = {}
        self._gpu_names: dict[tuple[str, str, str], str] = {}

    # --- what the watches call -----------------------------------------------------------
    def add_watch(self, name: str, resource: str) -> WatchState:
        if resource not in RESOURCES:
            msg = f"unknown resource {resource!r}; expected one of {RESOURCES}"
            raise ValueError(msg)
        state = self.watches[name] = WatchState(resource)
        return state

    def page(self, name: str, items: Iterable[Mapping[str, Any]]) -> None:
        """A page of a list that goes on (``listed`` brings its last page): its objects are
        taken now, one page at a time; what the whole list lacks goes when it ends."""
        resource, now = self.watches[name].resource, self.clock()
        seen = self._listing.setdefault(name, set())
        for item in items:
            k = objects.key(item)
            seen.add(k)
            self._put(resource, k, item, now)

    def listed(self, name: str, items: Iterable[Mapping[str, Any]],
               namespace: str | None = None) -> None:
        """A full list arrived, or the last page of one (``page``): it replaces every object
        of the watch's scope."""
        self.page(name, items)
        state, was_ready = self.watches[name], self.ready
        seen = self._listing.pop(name)
        for stale in [k for k in self._store(state.resource)
                      if k not in seen and (namespace is None or k.startswith(namespace + "/"))]:
            self._delete(state.resource, stale)
        state.listed = state.connected = True
        state.lost_at = None
        self._bump()
        if self.freeze_first_lists and self.ready and not was_ready:
            # Ten thousand jobs are hundreds of thousands of objects the collector tracks
            # (every partition is one), and a full collection walking them all stops the
            # event loop for a third of a second. They live until their job changes; set
            # aside, a collection walks only what came since.
            gc.collect()
            gc.freeze()

    def event(self, name: str, kind: str, item: Mapping[str, Any]) -> None:
        """A watch event: ADDED, MODIFIED or DELETED."""
        resource = self.watches[name].resource
        k = objects.key(item)
        if kind == "DELETED":
            self._delete(resource, k)
        else:
            self._put(resource, k, item, self.clock())

    def connected(self, name: str) -> None:
        state = self.watches[name]
        if not state.connected:
            state.connected, state.lost_at = True, None
            self._bump()

    def lost(self, name: str) -> None:
        """The watch failed; it will resume (or list again, from the first page). Counted as
        one restart."""
        self._listing.pop(name, None)
        state = self.watches[name]
        state.restarts += 1
        if state.connected or state.lost_at is None:
            state.lost_at = self.clock()
        state.connected = False
        self._bump()

    # --- what requests call --------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return bool(self.watches) and all(w.listed for w in self.watches.values())

    def restarts(self) -> dict[str, int]:
        out = dict.fromkeys(RESOURCES, 0)
        for state in self.watches.values():
            out[state.resource] += state.restarts
        return out

    def age(self, now: float) -> float:
        """How far behind the API server the view may be: 0 while every watch is connected."""
        if not self.ready:
            return now - self.started
        lost = [w.lost_at for w in self.watches.values() if w.lost_at is not None]
        return now - min(lost) if lost else 0.0

    def sync(self, now: float) -> Sync:
        synced = self.ready and all(w.connected for w in self.watches.values())
        return Sync(synced, self.age(now), sum(self.restarts().values()))

    @property
    def queue(self) -> Queue:
        return Queue(self._pending_jobs > 0, self._scheduled)

    def counts(self) -> Tally:
        """What finished (``contract.ledger``): the ledger's tally, plus what every ProofJob and
        WorkerStatus it has not folded counts; never less than this server has shown."""
        revision, shown = self._counts
        if revision == self.revision:
            return shown
        book = next(iter(self.ledgers.values()), Ledger())
        total = Tally()
        total.add(book.tally)
        for k, tally in self.tallies.items():
            if self.jobs[k].uid not in book.folded:
                total.add(tally)
        total.stale_writes_rejected += sum(wn.stale_writes_rejected
                                           for wn in self.worker_nodes.values()
                                           if wn.uid not in book.folded)
        shown = total.at_least(shown)
        self._counts = (self.revision, shown)
        return shown

    def gpu_seconds(self, now: float) -> dict[GpuKey, dict[str, float]]:
        """Each GPU's seconds by mode (``gputime.GPU_TIME_MODES``): what its WorkerStatus
        accounted plus the mode it is in since, up to ``open_mode_lag`` before ``now``
        (``Worker.accounted``), or what the ledger kept of a deleted one; never less than this
        server has shown (a write that took longer than the lag to arrive)."""
        book = next(iter(self.ledgers.values()), Ledger())
        # A GPU is its node, worker and UUID; its model name (a label too) is the newest known,
        # so a name learnt later does not start a second series.
        totals: dict[tuple[str, str, str], Counter[str]] = {}
        for (node, worker, uuid, name), seconds in book.tally.gpu_seconds.items():
            totals.setdefault((node, worker, uuid), Counter()).update(seconds)
            self._gpu_names.setdefault((node, worker, uuid), name)
        moment = datetime.fromtimestamp(now - self.open_mode_lag, UTC)
        for wn in self.worker_nodes.values():
            if wn.uid in book.folded:
                continue
            for w in wn.workers:
                gpu = (wn.node, w.id, w.gpu.uuid)
                totals.setdefault(gpu, Counter()).update(dict(w.accounted(moment).seconds))
                self._gpu_names[gpu] = w.gpu.name
        self._gpu_shown = {gpu: {mode: max(totals.get(gpu, Counter())[mode],
                                           self._gpu_shown.get(gpu, {}).get(mode, 0.0))
                                 for mode in GPU_TIME_MODES}
                           for gpu in totals.keys() | self._gpu_shown.keys()}
        return {(*gpu, self._gpu_names.get(gpu, "")): seconds
                for gpu, seconds in self._gpu_shown.items()}

    def settle(self, now: float) -> None:
        """Bring every GPU's mode up to ``now`` (the reasons of GPUs without lanes follow the
        queue of the ProofJobs)."""
        self.history.classify(self.worker_nodes.values(), self.queue, now)

    def snapshot(self) -> Snapshot:
        """The view as it is now, for ``aggregate.render`` to read in another thread."""
        return self._snapshot(self.clock(), jobs=True)

    def _snapshot(self, now: float, *, jobs: bool) -> Snapshot:
        """The view as of ``now``; without ``jobs``, what the fields besides ``pipelines`` are
        made of."""
        self.settle(now)
        return Snapshot(list(self.jobs.values()) if jobs else (),
                        list(self.worker_nodes.values()), list(self.nodes.values()),
                        dict(self.pods_by_key), self.history.copy(partitions=jobs),
                        self.counts(), self.gpu_seconds(now))

    async def answer(self, q: Query) -> Answer:
        """The answer to ``q`` (``answers.Answers.answer``)."""
        return await self.answers.answer(q)

    def prepare(self, templates: Mapping[str, Template], revision: int) -> Preparation:
        """What a new moment is made of, as of now: the fields besides ``pipelines``, and each
        job's template where it still holds or what it is made again of (``templates``, of
        ``revision``: all of them hold while nothing changed since)."""
        now = self.clock()
        snap = self._snapshot(now, jobs=False)
        kept, stale = ((dict(templates), {}) if revision == self.revision
                       else self._changed_jobs(snap, templates))
        return Preparation(self.revision, now, snap, self.sync(now), kept, stale)

    def _changed_jobs(self, snap: Snapshot, templates: Mapping[str, Template]
                      ) -> tuple[dict[str, Template], dict[str, Stale]]:
        """Each job's template where it still holds, and what the others' are made of."""
        lanes, pods = fragments.inputs_by_job(lane_index(snap.worker_nodes), snap.pods)
        kept: dict[str, Template] = {}
        stale: dict[str, Stale] = {}
        no_lanes: dict[LaneKey, fragments.LaneEntry] = {}
        no_pods: dict[PodKey, Pod] = {}
        for k, job in self.jobs.items():
            job_lanes = lanes.get((job.namespace, job.name), no_lanes)
            job_pods = pods.get((job.namespace, api.job_label_value(job.name)), no_pods) \
                if pods else no_pods
            made_of = fragments.signature(job_lanes, job_pods) if job_lanes or job_pods \
                else fragments.NOTHING
            held = templates.get(k)
            if held is not None and held.job is job and held.signature == made_of:
                kept[k] = held
            else:
                stale[k] = (job, Inputs(job_lanes, job_pods, self.history.since(job)), made_of)
        return kept, stale

    # --- the stores ----------------------------------------------------------------------
    def _store(self, resource: str) -> dict[str, Any]:
        stores: dict[str, dict[str, Any]] = {PROOFJOBS: self.jobs, WORKERSTATUSES:
                                             self.worker_nodes, NODES: self.nodes,
                                             PODS: self.pods, LEDGER: self.ledgers}
        return stores[resource]

    def _bump(self) -> None:
        self.revision += 1

    def _put(self, resource: str, k: str, item: Mapping[str, Any], now: float) -> None:
        store = self._store(resource)
        if resource == LEDGER:
            try:
                value: Any = ledger.parse(item)
            except ValueError as e:
                log.error("ConfigMap %s is not a ledger (%s): the counters keep what they"
                          " showed", k, e)
                return
        elif resource == PROOFJOBS:
            value = objects.job(item)
        elif resource == WORKERSTATUSES:
            value = objects.worker_node(item)
        elif resource == NODES:
            value = objects.node(item, self.gpu_resource)
        else:
            value = objects.pod(item)
            if value is None:
                self._delete(resource, k)
                return
        if store.get(k) == value:
            return
        old = store.get(k)
        store[k] = value
        if isinstance(value, Job):
            self.history.saw_job(value, now)
            self.tallies[k] = ledger.job_tally(value.namespace, value.proof_kind, (
                ledger.Finished(p.state, p.synth_ms, p.gpu_ms,
                                ledger.queue_wait(value.start_time, p.attempt, p.started_at))
                for p in value.partitions))
            self._track_queue(k, value, now)
        elif isinstance(value, WorkerNode):
            self.history.saw_workers(value, [wn for wn in self.worker_nodes.values()
                                             if wn.node == value.node], self.queue, now)
        elif isinstance(value, Pod):
            if isinstance(old, Pod):
                self.pods_by_key.pop(self._pod_key(old), None)
            self.pods_by_key[self._pod_key(value)] = value
        self._bump()

    def _delete(self, resource: str, k: str) -> None:
        old = self._store(resource).pop(k, None)
        if old is None:
            return
        if isinstance(old, Job):
            self.history.forgot_job(old)
            self.tallies.pop(k, None)
            self._track_queue(k, None, self.clock())
        elif isinstance(old, WorkerNode):
            self.history.forgot_workers(old)
        elif isinstance(old, Pod):
            self.pods_by_key.pop(self._pod_key(old), None)
        self._bump()

    def _track_queue(self, k: str, job: Job | None, now: float) -> None:
        """Keep what the job has waiting for a GPU; when the fleet's queue changes, the GPUs
        without lanes may change between ``scheduling`` and ``no_work``: all of them when
        partitions start or stop pending, those of the nodes whose bound partitions changed
        otherwise."""
        was_pending = self._pending_jobs > 0
        old_pending, old_bound = self._waiting.pop(k, (False, frozenset()))
        pending, bound = False, frozenset[tuple[str, Bound]]()
        if job is not None and job.phase != PHASE_SUSPENDED:
            pending = any(p.state == PENDING for p in job.partitions)
            bound = frozenset((p.node, (job.namespace, job.name, p.index, p.attempt))
                              for p in job.partitions if p.state == SCHEDULED and p.node)
            self._waiting[k] = (pending, bound)
        self._pending_jobs += pending - old_pending
        # A slot names its job, so no two jobs share one.
        for node, slot in old_bound - bound:
            self._scheduled[node].discard(slot)
            if not self._scheduled[node]:
                del self._scheduled[node]
        for node, slot in bound - old_bound:
            self._scheduled.setdefault(node, set()).add(slot)
        if (self._pending_jobs > 0) != was_pending:
            self.history.classify(self.worker_nodes.values(), self.queue, now)
        elif changed := {node for node, _ in old_bound ^ bound}:
            self.history.classify((wn for wn in self.worker_nodes.values() if wn.node in changed),
                                  self.queue, now)

    @staticmethod
    def _pod_key(p: Pod) -> PodKey:
        return pod_key(p.namespace, p.job_label, p.partition, p.attempt)
