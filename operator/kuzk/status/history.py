"""What the status server has seen happen, which no single API object says.

The objects say what is true now; a screen also needs what was true a moment ago: how long a
GPU spent in its GPU phase over the last ten minutes and why it was idle otherwise, how long a
partition has been in its state. ``History`` is fed every object the watches deliver, with
the time it arrived, and keeps exactly that. What finished is the objects' to say, and the
ledger's once they are gone: the view counts it (``contract.ledger``), not the history. So are a
GPU's busy and idle seconds since it was added (its WorkerStatus's ``gpuTime``, which
survives this server): the history is the finer picture of the last ten minutes, with the
reasons only the ProofJobs tell apart, ``scheduling`` and ``no_work``.

A GPU's time is split into modes, one at a time, so that they add up to the wall time since
the server first saw it: ``busy`` while a lane holds its GPU phase (nothing else is busy), else
idle for a reason: ``cpu`` (lanes, none holding: starting, synthesizing, waiting or
committing), ``not_live`` (the lane holding the GPU phase, or with none holding it every
lane, is marked not live: its pod's readiness probe fails, ``workerstatus.Worker.mode``),
``scheduling`` (no lane, but a
partition that could run here is pending, or scheduled to this node and its pod has not joined
a lane yet), ``no_work`` (no lane and nothing that could run here). The reasons of the GPUs
without lanes follow the ProofJobs too: the view classifies again when its queue changes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from kuzk.contract import gputime, workerstatus
from kuzk.contract.workerstatus import lane_model
from kuzk.status.objects import Job, Partition, WorkerNode

WINDOW_S = 600.0
STRIP_CELLS = 20


BUSY, CPU, NOT_LIVE = gputime.BUSY, gputime.IDLE_CPU, gputime.IDLE_NOT_LIVE
SCHEDULING, NO_WORK = "scheduling", "no_work"
IDLE_REASONS = (NO_WORK, SCHEDULING, CPU, NOT_LIVE)


# A partition attempt bound to a node: its job's namespace and name, its index and attempt.
Bound = tuple[str, str, int, int]


@dataclass(frozen=True)
class Queue:
    """What could run on a GPU with no lane: a partition pending (anywhere: its pod is not
    bound yet), or one scheduled to the GPU's node (``scheduled``: node -> the partition
    attempts bound there) whose pod has not joined a lane there yet."""

    pending: bool = False
    scheduled: Mapping[str, Collection[Bound]] = field(default_factory=dict)

    def scheduling(self, node: str, lanes: Iterable[lane_model.Lane]) -> bool:
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


def mode_of(worker: workerstatus.Worker, scheduling: bool) -> str:
    """The mode a GPU is in now. ``scheduling``: a partition that could run on it is
    pending, or bound to its node and not a lane yet (``Queue.scheduling``). The modes of
    GPUs with lanes are the object's own (``workerstatus.Worker.mode``), the ones its stored
    seconds count."""
    mode = worker.mode()
    if mode == gputime.IDLE_NO_LANE:
        return SCHEDULING if scheduling else NO_WORK
    return mode


@dataclass
class WorkerTrack:
    """One GPU's time by mode (busy, or idle by reason), as the watch saw it change."""

    first_seen: float
    mode: str = NO_WORK
    mode_since: float = 0.0
    intervals: deque[tuple[float, float, str]] = field(default_factory=deque)

    def switch(self, mode: str, at: float) -> None:
        """Enter ``mode`` at ``at`` (not before the current mode began)."""
        if mode == self.mode:
            return
        at = max(at, self.mode_since)
        if at > self.mode_since:
            self.intervals.append((self.mode_since, at, self.mode))
        self.mode, self.mode_since = mode, at
        while self.intervals and self.intervals[0][1] < at - WINDOW_S:
            self.intervals.popleft()

    def between(self, start: float, end: float, mode: str = BUSY) -> float:
        """Seconds in ``mode`` between ``start`` and ``end`` (``end`` at most now)."""
        total = sum(max(0.0, min(stop, end) - max(begin, start))
                    for begin, stop, m in self.intervals if m == mode)
        if self.mode == mode:
            total += max(0.0, end - max(self.mode_since, start))
        return total

    def busy_between(self, start: float, end: float) -> float:
        return self.between(start, end, BUSY)


class History:
    def __init__(self, started: float) -> None:
        self.started = started
        self.workers: dict[tuple[str, str], WorkerTrack] = {}
        # By job UID: the partitions last seen (the job's own tuple, which the view keeps
        # anyway) and since when each is in its state and attempt; two tuples per job, not
        # two per partition (ten thousand jobs are 160,000 partitions).
        self.partition_since: dict[str, tuple[tuple[Partition, ...], tuple[float, ...]]] = {}

    def copy(self, *, partitions: bool = True) -> History:
        """What the aggregation reads, copied, so it can render in another thread while the
        watches go on feeding this one; the GPUs' alone without ``partitions``."""
        twin = History(self.started)
        twin.workers = {k: replace(t, intervals=deque(t.intervals))
                        for k, t in self.workers.items()}
        if partitions:
            twin.partition_since = dict(self.partition_since)
        return twin

    def window_start(self, now: float) -> float:
        return max(now - WINDOW_S, self.started)

    def saw_job(self, job: Job, now: float) -> None:
        """Track since when each of the job's partitions is in its state (and attempt)."""
        seen, since = self.partition_since.get(job.uid, ((), ()))
        if seen == job.partitions:
            return
        self.partition_since[job.uid] = (job.partitions, tuple(
            since[i] if i < len(seen) and (seen[i].state, seen[i].attempt) == (p.state, p.attempt)
            else now for i, p in enumerate(job.partitions)))

    def forgot_job(self, job: Job) -> None:
        """The job was deleted: drop what was kept of its partitions."""
        self.partition_since.pop(job.uid, None)

    def saw_workers(self, node: WorkerNode, same_node: Iterable[WorkerNode], queue: Queue,
                    now: float) -> None:
        """A WorkerStatus (one GPU) appeared or changed; ``same_node``: every WorkerStatus of
        its node (itself included), whose lanes tell what is scheduled there already."""
        for w in node.workers:
            if (node.node, w.id) not in self.workers:
                self.workers[(node.node, w.id)] = WorkerTrack(first_seen=now, mode_since=now)
        self.classify(same_node, queue, now)

    def classify(self, nodes: Iterable[WorkerNode], queue: Queue, now: float) -> None:
        """Move every GPU of ``nodes`` (WorkerStatuses; each node's all of them, as a node's
        lanes on any of its GPUs tell whether a partition bound there joined) into the mode
        it is in now (``mode_of``)."""
        nodes = list(nodes)
        lanes: dict[str, list[lane_model.Lane]] = {}
        for node in nodes:
            lanes.setdefault(node.node, []).extend(lane for w in node.workers for lane in w.lanes)
        for node in nodes:
            scheduling = queue.scheduling(node.node, lanes[node.node])
            for w in node.workers:
                track = self.workers.get((node.node, w.id))
                if track is not None:
                    track.switch(mode_of(w, scheduling), now)

    def forgot_workers(self, node: WorkerNode) -> None:
        """The WorkerStatus was deleted (its node is gone): its GPU leaves the screen."""
        for w in node.workers:
            self.workers.pop((node.node, w.id), None)

    def since(self, job: Job) -> tuple[float | None, ...]:
        """When each of the job's partitions entered its state, by position; None where the
        watch has not seen it."""
        seen, since = self.partition_since.get(job.uid, ((), ()))
        return tuple(since[i] if i < len(seen) and seen[i].state == p.state
                     and seen[i].attempt == p.attempt else None
                     for i, p in enumerate(job.partitions))
