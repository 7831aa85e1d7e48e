"""The ledger: what the fleet finished, kept after the objects that showed it are gone.

A ProofJob's status says which of its partitions finished and how long they took, and a
WorkerStatus counts the stale writes it refused; the status server's counters sum them. When
such an object is deleted (a finished job past its TTL, a node removed with its
WorkerStatus), what it counted must stay counted, or every counter would go down and
Prometheus would read a reset, and after a restart the status server would not know it had
ever happened. So the operator *folds* an object into the ledger when it is deleted: its
``Tally`` is added to the ledger's, and its UID is kept in ``folded`` (for ``FOLDED_KEEP_S``,
longer while the object still exists), which is what makes a fold idempotent and tells the
status server not to count the object itself any more. The status server's counters are the
ledger's tally plus the tallies of the objects not folded, never less than it has shown
before (``Tally.at_least``): the same figures from every replica and after every restart.

The ledger is one ConfigMap (``DATA_KEY`` holds the JSON), written only by the operator with
resourceVersion preconditions (``operator.ledger_store``). This module is the pure model, shared
by both.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kuzk.contract import api, gputime, workerstatus

DATA_KEY = "ledger.json"
SCHEMA = 1
FOLDED_KEEP_S = 600.0
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0,
                    1800.0, math.inf)
DURATION_STAGES = (("synthesis", "synthMs"), ("gpu", "gpuMs"))
# A partition's wait in the queue: from its job's start until its first attempt's pod started.
QUEUE_STAGE = "queue"

# (namespace, proof kind) for partition counts; (proof kind, stage) for durations
KindKey = tuple[str, str]
# A GPU as its series name it: (node, worker ID, GPU UUID, GPU model name)
GpuKey = tuple[str, str, str, str]


def gpu_key(node: str, worker: workerstatus.Worker) -> GpuKey:
    return (node, worker.id, worker.gpu.uuid, worker.gpu.name)


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

    def add(self, other: Histogram) -> None:
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.total += other.total
        self.count += other.count

    def at_least(self, floor: Histogram) -> Histogram:
        """Each figure the larger of the two (both cumulative, so the result is too)."""
        return Histogram([max(a, b) for a, b in zip(self.buckets, floor.buckets, strict=True)],
                         max(self.total, floor.total), max(self.count, floor.count))


@dataclass
class Tally:
    """What finished: partitions completed and failed by (namespace, proof kind), their
    synthesis and GPU durations by (proof kind, stage), stale worker writes refused, and the
    GPU seconds of deleted WorkerStatuses by GPU and mode (``gputime.GPU_TIME_MODES``)."""

    completed: Counter[KindKey] = field(default_factory=Counter)
    failed: Counter[KindKey] = field(default_factory=Counter)
    durations: dict[KindKey, Histogram] = field(default_factory=dict)
    stale_writes_rejected: int = 0
    gpu_seconds: dict[GpuKey, Counter[str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.completed or self.failed or self.stale_writes_rejected
                    or self.gpu_seconds)

    def add(self, other: Tally) -> None:
        self.completed.update(other.completed)
        self.failed.update(other.failed)
        for key, hist in other.durations.items():
            self.durations.setdefault(key, Histogram()).add(hist)
        self.stale_writes_rejected += other.stale_writes_rejected
        for gpu, seconds in other.gpu_seconds.items():
            self.gpu_seconds.setdefault(gpu, Counter()).update(seconds)

    def at_least(self, floor: Tally) -> Tally:
        """Every figure at least ``floor``'s: the counters a server shows never go down."""
        out = Tally(self.completed | floor.completed, self.failed | floor.failed,
                    stale_writes_rejected=max(self.stale_writes_rejected,
                                              floor.stale_writes_rejected))
        for key in self.durations.keys() | floor.durations.keys():
            out.durations[key] = self.durations.get(key, Histogram()).at_least(
                floor.durations.get(key, Histogram()))
        for gpu in self.gpu_seconds.keys() | floor.gpu_seconds.keys():
            out.gpu_seconds[gpu] = (self.gpu_seconds.get(gpu, Counter())
                                    | floor.gpu_seconds.get(gpu, Counter()))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "partitions": [{"namespace": ns, "proofKind": kind,
                            "completed": self.completed[(ns, kind)],
                            "failed": self.failed[(ns, kind)]}
                           for ns, kind in sorted(self.completed.keys() | self.failed.keys())],
            "durations": [{"proofKind": kind, "stage": stage, "buckets": hist.buckets,
                           "sum": hist.total, "count": hist.count}
                          for (kind, stage), hist in sorted(self.durations.items())],
            "staleWritesRejected": self.stale_writes_rejected,
            "gpuSeconds": [{"node": node, "worker": worker, "gpuUUID": uuid, "gpuName": name,
                            "seconds": dict(sorted(seconds.items()))}
                           for (node, worker, uuid, name), seconds
                           in sorted(self.gpu_seconds.items())],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Tally:
        tally = cls(stale_writes_rejected=int(doc.get("staleWritesRejected") or 0))
        for row in doc.get("partitions") or []:
            key = (str(row["namespace"]), str(row["proofKind"]))
            tally.completed[key] += int(row.get("completed") or 0)
            tally.failed[key] += int(row.get("failed") or 0)
        for row in doc.get("gpuSeconds") or []:
            gpu = (str(row["node"]), str(row["worker"]), str(row["gpuUUID"]),
                   str(row.get("gpuName") or ""))
            seconds: dict[str, float] = {}
            for mode, value in row["seconds"].items():
                name = gputime.gpu_time_mode(str(mode))
                seconds[name] = seconds.get(name, 0.0) + float(value)
            tally.gpu_seconds[gpu] = Counter(seconds)
        for row in doc.get("durations") or []:
            buckets = [int(n) for n in row["buckets"]]
            if len(buckets) != len(DURATION_BUCKETS):
                msg = (f"a duration histogram has {len(buckets)} buckets,"
                       f" not {len(DURATION_BUCKETS)}")
                raise ValueError(msg)
            tally.durations[(str(row["proofKind"]), str(row["stage"]))] = Histogram(
                buckets, float(row.get("sum") or 0.0), int(row.get("count") or 0))
        return tally


@dataclass(frozen=True)
class Finished:
    """What the tally reads of one partition: its state, synthesis and GPU milliseconds, and
    its wait in the queue in seconds (None where unknown)."""

    state: str
    synth_ms: int | None = None
    gpu_ms: int | None = None
    queue_s: float | None = None


def job_tally(namespace: str, proof_kind: str, partitions: Iterable[Finished]) -> Tally:
    """What a job's partitions count: done and failed ones, and the durations of the done."""
    tally = Tally()
    key = (namespace, proof_kind)
    for p in partitions:
        if p.state == api.FAILED:
            tally.failed[key] += 1
        elif p.state == api.DONE:
            tally.completed[key] += 1
            seconds = (None if p.synth_ms is None else p.synth_ms / 1000,
                       None if p.gpu_ms is None else p.gpu_ms / 1000, p.queue_s)
            stages = (*(stage for stage, _ in DURATION_STAGES), QUEUE_STAGE)
            for stage, value in zip(stages, seconds, strict=True):
                if value is not None:
                    tally.durations.setdefault((proof_kind, stage), Histogram()).observe(value)
    return tally


def queue_wait(job_start: float | None, attempt: int, started: float | None) -> float | None:
    """Seconds a partition waited in the queue: from its job's start until its first
    attempt's pod started (None for a retry, or where either time is unknown)."""
    if attempt != 1 or job_start is None or started is None:
        return None
    return max(0.0, started - job_start)


def proofjob_tally(job: Mapping[str, Any]) -> Tally:
    """What a ProofJob (as the API server returns it) counts."""
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    status = job.get("status") or {}
    start = api.as_timestamp(status.get("startTime"))
    return job_tally(str(meta.get("namespace", "")), str(spec.get("proofKind", "")), (
        Finished(str(e.get("state", "")), api.as_int(e.get("synthMs")),
                 api.as_int(e.get("gpuMs")),
                 queue_wait(start, api.as_int(e.get("attempt")) or 1,
                            api.as_timestamp(e.get("startedAt"))))
        for e in status.get("partitions") or []))


def workerstatus_tally(worker_status: Mapping[str, Any]) -> Tally:
    """What a WorkerStatus counts: the stale writes it refused, and its GPU's seconds by
    mode as its last write accounted them (a legacy WorkerStatus's: every GPU of its node)."""
    node = workerstatus.node_of(worker_status)
    model = workerstatus.parse(worker_status.get("status"))
    return Tally(stale_writes_rejected=model.stale_writes_rejected,
                 gpu_seconds={gpu_key(node, w): Counter(dict(w.gpu_time.seconds))
                              for w in model.workers if w.gpu_time.accounted_at is not None})


@dataclass
class Ledger:
    tally: Tally = field(default_factory=Tally)
    folded: dict[str, str] = field(default_factory=dict)  # UID -> when it was folded

    def fold(self, uid: str, tally: Tally, now: datetime) -> bool:
        """Add what the object ``uid`` counted, once; False when it was already folded."""
        if uid in self.folded:
            return False
        self.tally.add(tally)
        self.folded[uid] = api.format_time(now)
        return True

    def prune(self, now: datetime, live: Callable[[], Collection[str]]) -> None:
        """Forget the folds older than ``FOLDED_KEEP_S`` whose objects are gone (``live()``:
        the UIDs that still exist, asked only when a fold is that old): every status server
        has seen them go by then."""
        old = [uid for uid, when in self.folded.items()
               if (now - api.parse_time(when)).total_seconds() > FOLDED_KEEP_S]
        if not old:
            return
        existing = live()
        for uid in old:
            if uid not in existing:
                del self.folded[uid]

    def data(self) -> dict[str, str]:
        """The ConfigMap's ``data``."""
        doc = {"schema": SCHEMA, "tally": self.tally.to_json(), "folded": self.folded}
        return {DATA_KEY: json.dumps(doc, sort_keys=True, separators=(",", ":"))}


def parse(configmap: Mapping[str, Any] | None) -> Ledger:
    """The ledger a ConfigMap holds (an empty one when there is none); ValueError when it
    holds something else."""
    text = ((configmap or {}).get("data") or {}).get(DATA_KEY)
    if not text:
        return Ledger()
    try:
        doc = json.loads(text)
        if doc.get("schema") != SCHEMA:
            msg = f"schema {doc.get('schema')!r}, this kuzk reads schema {SCHEMA}"
            raise ValueError(msg)
        return Ledger(Tally.from_json(doc.get("tally") or {}),
                      {str(k): str(v) for k, v in (doc.get("folded") or {}).items()})
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
        msg = f"the ledger's {DATA_KEY} is not a kuzk ledger: {e}"
        raise ValueError(msg) from None

