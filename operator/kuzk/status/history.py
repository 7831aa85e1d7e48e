"""What the status server has seen happen, which no single API object says.

The objects say what is true now; a screen also needs what was true a moment ago: how long a
worker has been proving over the last ten minutes, how long a partition has been in its
state, how many partitions finished while the server ran. ``History`` is fed every object the
watches deliver, with the time it arrived, and keeps exactly that. Its counters only go up
(Prometheus semantics: a restarted server starts them again from what its first lists show).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field, replace

from kuzk.api import DONE, FAILED
from kuzk.status.objects import Job, WorkerNode

WINDOW_S = 600.0
STRIP_CELLS = 20
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
                    1800.0, math.inf)
DURATION_STAGES = (("synthesis", "synth_ms"), ("gpu", "gpu_ms"))


@dataclass
class WorkerTrack:
    """One GPU worker's proving intervals, as the watch saw its state change."""

    first_seen: float
    proving_since: float | None = None
    stage: str | None = None
    stage_since: float = 0.0
    busy_closed: float = 0.0
    intervals: deque[tuple[float, float]] = field(default_factory=deque)

    def busy_total(self, now: float) -> float:
        """Seconds spent proving since the server first saw the worker."""
        open_part = now - self.proving_since if self.proving_since is not None else 0.0
        return self.busy_closed + max(open_part, 0.0)

    def busy_between(self, start: float, end: float) -> float:
        """Seconds spent proving between ``start`` and ``end`` (``end`` at most now)."""
        total = sum(max(0.0, min(stop, end) - max(begin, start))
                    for begin, stop in self.intervals)
        if self.proving_since is not None:
            total += max(0.0, end - max(self.proving_since, start))
        return total


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
        twin.workers = {k: replace(t, intervals=deque(t.intervals))
                        for k, t in self.workers.items()}
        twin.partition_since = dict(self.partition_since)
        twin.completed, twin.failed = Counter(self.completed), Counter(self.failed)
        twin.stale_total = self.stale_total
        return twin

    def window_start(self, now: float) -> float:
        return max(now - WINDOW_S, self.started)

    def saw_job(self, job: Job, now: float) -> None:
        counted = self.counted.setdefault(job.uid, {})
        for p in job.partitions:
            slot = (job.uid, p.index)
            previous = self.partition_since.get(slot)
            if previous is None or previous[:2] != (p.state, p.attempt):
                self.partition_since[slot] = (p.state, p.attempt, now)
            if p.state not in (DONE, FAILED) or p.index in counted:
                continue
            counted[p.index] = p.state
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

    def saw_workers(self, node: WorkerNode, now: float) -> None:
        for w in node.workers:
            track = self.workers.get((node.node, w.id))
            if track is None:
                track = self.workers[(node.node, w.id)] = WorkerTrack(first_seen=now,
                                                                      stage_since=now)
            proving = w.state == "proving"
            if proving and track.proving_since is None:
                track.proving_since = now
            elif not proving and track.proving_since is not None:
                track.intervals.append((track.proving_since, now))
                track.busy_closed += now - track.proving_since
                track.proving_since = None
            stage = w.stage if proving else None
            if stage != track.stage:
                track.stage, track.stage_since = stage, now
            while track.intervals and track.intervals[0][1] < now - WINDOW_S:
                track.intervals.popleft()
        seen = self.stale_seen.get(node.node, 0)
        # A recreated WorkerStatus starts its own count again: what it counted is new.
        self.stale_total += node.stale_writes_rejected - (
            seen if node.stale_writes_rejected >= seen else 0
        )
        self.stale_seen[node.node] = node.stale_writes_rejected

    def forgot_workers(self, node: WorkerNode) -> None:
        """The WorkerStatus was deleted (its node is gone): its workers leave the screen."""
        for w in node.workers:
            self.workers.pop((node.node, w.id), None)
        self.stale_seen.pop(node.node, None)

    def partition_secs(self, job: Job, index: int, now: float) -> float | None:
        entry = self.partition_since.get((job.uid, index))
        return None if entry is None else max(0.0, now - entry[2])
