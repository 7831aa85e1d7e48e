"""What the status server has seen happen, which no single API object says.

The objects say what is true now; a screen also needs what was true a moment ago: how long a
GPU spent in its GPU phase over the last ten minutes and why it was idle otherwise, how long a
partition has been in its state, how many partitions finished while the server ran.
``History`` is fed every object the watches deliver, with the time it arrived, and keeps
exactly that. Its counters only go up (Prometheus semantics: a restarted server starts them
again from what its first lists show).

A GPU's time is split into modes, one at a time, so that they add up to the wall time since
the server first saw it: ``busy`` while a lane holds its GPU phase (nothing else is busy), else
idle for a reason: ``cpu`` (lanes, none holding: starting, synthesizing, waiting or
committing), ``unknown`` (lanes whose heartbeats all stopped), ``scheduling`` (no lane, but a
partition that could run here is pending, or scheduled to this node and its pod has not joined
a lane yet), ``no_work`` (no lane and nothing that could run here). The reasons of the GPUs
without lanes follow the ProofJobs too: the view classifies again when its queue changes.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from kuzk import workerstatus
from kuzk.api import DONE, FAILED
from kuzk.status.objects import Job, WorkerNode

WINDOW_S = 600.0
STRIP_CELLS = 20
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
                    1800.0, math.inf)
DURATION_STAGES = (("synthesis", "synth_ms"), ("gpu", "gpu_ms"))


BUSY, CPU, UNKNOWN, SCHEDULING, NO_WORK = "busy", "cpu", "unknown", "scheduling", "no_work"
IDLE_REASONS = (NO_WORK, SCHEDULING, CPU, UNKNOWN)


# A partition attempt bound to a node: its job's namespace and name, its index and attempt.
Bound = tuple[str, str, int, int]


@dataclass(frozen=True)
class Queue:
    """What could run on a GPU with no lane: a partition pending (anywhere: its pod is not
    bound yet), or one scheduled to the GPU's node (``scheduled``: node -> the partition
    attempts bound there) whose pod has not joined a lane there yet."""

    pending: bool = False
    scheduled: Mapping[str, Collection[Bound]] = field(default_factory=dict)

    def scheduling(self, node: str, lanes: Iterable[workerstatus.Lane]) -> bool:
        """Whether the GPUs of ``node`` (whose lanes are ``lanes``) that have no lane wait for
        a partition that could run on them."""
        if self.pending:
            return True
        bound = self.scheduled.get(node)
        if not bound:
            return False
        joined = {(lane.job.namespace, lane.job.name, lane.partition, lane.attempt)
                  for lane in lanes}
        return any(b not in joined for b in bound)


def mode_of(worker: workerstatus.Worker, scheduling: bool, now: float) -> tuple[str, float]:
    """The mode a GPU is in now, and since when at the latest (a lane that stopped beating
    went unknown when its heartbeat got old, not when someone looked). ``scheduling``: a
    partition that could run on it is pending, or bound to its node and not a lane yet
    (``Queue.scheduling``). A GPU whose lane holds its GPU phase is busy, heard from or not."""
    if worker.holder is not None:
        return BUSY, now
    if worker.lanes:
        newest = max(lane.heartbeat.timestamp() for lane in worker.lanes)
        if now - newest > workerstatus.HEARTBEAT_FRESH_S:
            return UNKNOWN, newest + workerstatus.HEARTBEAT_FRESH_S
        return CPU, now
    return (SCHEDULING if scheduling else NO_WORK), now


@dataclass
class WorkerTrack:
    """One GPU's time by mode (busy, or idle by reason), as the watch saw it change."""

    first_seen: float
    mode: str = NO_WORK
    mode_since: float = 0.0
    closed: dict[str, float] = field(default_factory=dict)
    intervals: deque[tuple[float, float, str]] = field(default_factory=deque)

    def switch(self, mode: str, at: float) -> None:
        """Enter ``mode`` at ``at`` (not before the current mode began)."""
        if mode == self.mode:
            return
        at = max(at, self.mode_since)
        if at > self.mode_since:
            self.intervals.append((self.mode_since, at, self.mode))
            self.closed[self.mode] = self.closed.get(self.mode, 0.0) + at - self.mode_since
        self.mode, self.mode_since = mode, at
        while self.intervals and self.intervals[0][1] < at - WINDOW_S:
            self.intervals.popleft()

    def total(self, mode: str, now: float) -> float:
        """Seconds in ``mode`` since the server first saw the GPU."""
        open_part = max(now - self.mode_since, 0.0) if self.mode == mode else 0.0
        return self.closed.get(mode, 0.0) + open_part

    def between(self, start: float, end: float, mode: str = BUSY) -> float:
        """Seconds in ``mode`` between ``start`` and ``end`` (``end`` at most now)."""
        total = sum(max(0.0, min(stop, end) - max(begin, start))
                    for begin, stop, m in self.intervals if m == mode)
        if self.mode == mode:
            total += max(0.0, end - max(self.mode_since, start))
        return total

    def busy_total(self, now: float) -> float:
        return self.total(BUSY, now)

    def busy_between(self, start: float, end: float) -> float:
        return self.between(start, end, BUSY)


@dataclass
class Histogram:
    """Cumulative bucket counts in seconds, as Prometheus wants them."""

    buckets: list[int] = field(default_factory=lambda: [0] * len(DURATION_BUCKETS))
    total: float = 0.0
    count: int = 0

    def observe(self, seconds: float) -> None:
        for i, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1
        self.total += seconds
        self.count += 1


class History:
    def __init__(self, started: float) -> None:
        self.started = started
        self.workers: dict[tuple[str, str], WorkerTrack] = {}
        self.partition_since: dict[tuple[str, int], tuple[str, int, float]] = {}
        self.counted: dict[str, dict[int, str]] = {}
        self.completed: Counter[tuple[str, str]] = Counter()
        self.failed: Counter[tuple[str, str]] = Counter()
        self.durations: dict[tuple[str, str], Histogram] = {}
        self.stale_seen: dict[str, int] = {}
        self.stale_total = 0

    def copy(self) -> History:
        """What the aggregation reads, copied, so it can render in another thread while the
        watches go on feeding this one."""
        twin = History(self.started)
        twin.workers = {k: replace(t, intervals=deque(t.intervals), closed=dict(t.closed))
                        for k, t in self.workers.items()}
        twin.partition_since = dict(self.partition_since)
        twin.completed, twin.failed = Counter(self.completed), Counter(self.failed)
        twin.stale_total = self.stale_total
        return twin

    def window_start(self, now: float) -> float:
        return max(now - WINDOW_S, self.started)

    def saw_job(self, job: Job, now: float, baseline: bool = False) -> None:
        """Track the job's partitions; count those that finished since it was last seen (with
        ``baseline``, those already finished are only marked: they ended before this server
        started, and counting them would invent increases after every restart)."""
        counted = self.counted.setdefault(job.uid, {})
        for p in job.partitions:
            slot = (job.uid, p.index)
            previous = self.partition_since.get(slot)
            if previous is None or previous[:2] != (p.state, p.attempt):
                self.partition_since[slot] = (p.state, p.attempt, now)
            if p.state not in (DONE, FAILED) or p.index in counted:
                continue
            counted[p.index] = p.state
            if baseline:
                continue
            bucket = (job.namespace, job.proof_kind)
            if p.state == FAILED:
                self.failed[bucket] += 1
                continue
            self.completed[bucket] += 1
            for stage, attr in DURATION_STAGES:
                millis = getattr(p, attr)
                if millis is not None:
                    self.durations.setdefault((job.proof_kind, stage), Histogram()).observe(
                        millis / 1000
                    )

    def forgot_job(self, job: Job) -> None:
        """The job was deleted: drop what was kept per partition; the counters stay."""
        self.counted.pop(job.uid, None)
        for p in job.partitions:
            self.partition_since.pop((job.uid, p.index), None)

    def saw_workers(self, node: WorkerNode, queue: Queue, now: float,
                    baseline: bool = False) -> None:
        for w in node.workers:
            if (node.node, w.id) not in self.workers:
                self.workers[(node.node, w.id)] = WorkerTrack(first_seen=now, mode_since=now)
        self.classify([node], queue, now)
        seen = self.stale_seen.get(node.node, 0)
        # A recreated WorkerStatus starts its own count again: what it counted is new. What
        # the first list shows (``baseline``) was refused before this server started.
        if not baseline:
            self.stale_total += node.stale_writes_rejected - (
                seen if node.stale_writes_rejected >= seen else 0
            )
        self.stale_seen[node.node] = node.stale_writes_rejected

    def classify(self, nodes: Iterable[WorkerNode], queue: Queue, now: float) -> None:
        """Move every GPU of ``nodes`` into the mode it is in now (``mode_of``)."""
        for node in nodes:
            lanes = [lane for w in node.workers for lane in w.lanes]
            scheduling = queue.scheduling(node.node, lanes)
            for w in node.workers:
                track = self.workers.get((node.node, w.id))
                if track is not None:
                    mode, since = mode_of(w, scheduling, now)
                    track.switch(mode, since)

    def forgot_workers(self, node: WorkerNode) -> None:
        """The WorkerStatus was deleted (its node is gone): its workers leave the screen."""
        for w in node.workers:
            self.workers.pop((node.node, w.id), None)
        self.stale_seen.pop(node.node, None)

    def partition_secs(self, job: Job, index: int, now: float) -> float | None:
        entry = self.partition_since.get((job.uid, index))
        return None if entry is None else max(0.0, now - entry[2])
