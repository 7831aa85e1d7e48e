"""An independent model of one node's WorkerStatus, written from DESIGN.md section 2 and the
choices documented in ``kuzk.workers`` (it imports nothing from that module), so that tests
compare the real object against a second, separate reading of the protocol.

The model keeps only what the protocol decides: per worker its ID, GPU, state, stage, job,
partition, attempt, pod UID, completed count and the pods a claim took it from while they
still held it (newest first), and the node's refused-write count. The finalizer's release is
stale only for a pod a worker remembers; for a pod that holds no worker (never did, or was
released before the next claim) it writes nothing.
Timestamps are the API server's business and are checked for presence only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Job:
    """What the model needs of an assignment."""

    name: str
    partition: int
    attempt: int
    pod_uid: str


@dataclass
class ModelWorker:
    id: str
    gpu: str
    state: str = "idle"
    stage: str | None = None
    job: Job | None = None
    last_pod: str | None = None
    completed: int = 0
    previous: list[str] = field(default_factory=list)


@dataclass
class NodeModel:
    workers: dict[str, ModelWorker] = field(default_factory=dict)  # by GPU UUID, in order
    rejected: int = 0

    def _holding(self, pod_uid: str) -> ModelWorker | None:
        for worker in self.workers.values():
            if worker.state == "proving" and worker.job and worker.job.pod_uid == pod_uid:
                return worker
        return None

    def claim(self, gpu: str, job: Job) -> str:
        if gpu not in self.workers:
            self.workers[gpu] = ModelWorker(f"W{len(self.workers)}", gpu)
        worker = self.workers[gpu]
        if not (worker.state == "proving" and worker.job == job):
            current = worker.job.pod_uid if worker.state == "proving" and worker.job else None
            if current is not None and current != job.pod_uid:
                worker.previous = [current, *(p for p in worker.previous if p != current)]
                worker.previous = [p for p in worker.previous if p != job.pod_uid]
            worker.state, worker.stage, worker.job = "proving", None, job
        return worker.id

    def stage(self, job: Job, stage: str) -> bool:
        worker = self._holding(job.pod_uid)
        if worker is None:
            self.rejected += 1
            return False
        worker.stage = stage
        return True

    def heartbeat(self, job: Job) -> bool:
        if self._holding(job.pod_uid) is None:
            self.rejected += 1
            return False
        return True

    def release(self, pod_uid: str, succeeded: bool, *, by_pod_ref: bool = False) -> bool:
        """The prover's release (by assignment: it claimed, so a miss is stale) or the
        finalizer's (by pod: stale only for a pod a worker remembers)."""
        worker = self._holding(pod_uid)
        if worker is not None:
            worker.state, worker.stage, worker.job = "idle", None, None
            worker.last_pod = pod_uid
            worker.completed += succeeded
            return True
        if any(w.state == "idle" and w.last_pod == pod_uid for w in self.workers.values()):
            return False
        if not by_pod_ref or any(pod_uid in w.previous for w in self.workers.values()):
            self.rejected += 1
        return False

    def expected(self) -> dict[str, Any]:
        rows = []
        for w in self.workers.values():
            job = w.job
            rows.append(
                {
                    "id": w.id,
                    "gpu": w.gpu,
                    "state": w.state,
                    "stage": w.stage,
                    "job": job.name if job else None,
                    "partition": job.partition if job else None,
                    "attempt": job.attempt if job else None,
                    "pod": job.pod_uid if job else w.last_pod,
                    "completed": w.completed,
                    "previous": w.previous,
                }
            )
        return {
            "workers": rows,
            "proving": sum(w.state == "proving" for w in self.workers.values()),
            "rejected": self.rejected,
        }


def observed(status: dict[str, Any]) -> dict[str, Any]:
    """The real object's status in the model's terms; asserts the timestamps a worker in its
    state must carry and the counts the CRD's CEL rules demand."""
    rows = []
    for w in status.get("workers") or []:
        assert "since" in w, f"worker {w['id']} has no since"
        if w["state"] == "proving":
            assert "heartbeat" in w, f"proving worker {w['id']} has no heartbeat"
        rows.append(
            {
                "id": w["id"],
                "gpu": w["gpu"]["uuid"],
                "state": w["state"],
                "stage": w.get("stage"),
                "job": (w.get("job") or {}).get("name"),
                "partition": w.get("partition"),
                "attempt": w.get("attempt"),
                "pod": (w.get("pod") or {}).get("uid"),
                "completed": w.get("completed", 0),
                "previous": w.get("previousPodUIDs") or [],
            }
        )
    assert status.get("workerCount", 0) == len(rows)
    return {
        "workers": rows,
        "proving": status.get("proving", 0),
        "rejected": status.get("staleWritesRejected", 0),
    }
