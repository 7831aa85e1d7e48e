"""Test doubles for the operator's pure logic: object factories and a tiny in-memory cluster.

``Make`` builds ProofJob, Pod and WorkerStatus dicts shaped like the API server's (pods come
from ``pod_manifest``, so labels and owners are the real ones). ``Cluster`` applies a Decision the
way the handler layer does (create if absent, finalizer-aware delete, release then drop
kuzk's finalizer and only it, status replace with nulls pruned) and plays kubelet and prover,
so tests feed ``reconcile`` its own results back.

What it does not model, and where that is tested instead: the guarded WorkerStatus write (a release
here always frees the claim; stale refusals are ``tests/unit/contract/test_worker_decisions.py`` and
``tests/integration/workers``), resourceVersion conflicts and watch lag (the runtime's overlays:
``test_event_filters.py`` and ``tests/integration/operator``), and a kubelet stopping a deleted pod
(a deleting pod keeps its phase until a test ends it; the clock moves only when a test ticks it;
``tests/integration/testenv/test_pod_deletion.py`` has the real one).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kuzk.contract import api
from kuzk.contract.proofjob import resolve
from kuzk.operator.controller import without_nulls
from kuzk.operator.decide.actions import (
    Action,
    CreatePod,
    Decision,
    DeleteJob,
    DeletePod,
    Event,
    ReleaseWorker,
)
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from kuzk.operator.decide.reconcile import reconcile

T0 = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
SETTINGS = PodSettings(image="kuzk/prover:test")
JOB_UID = "job-uid-1"
GRACE_SECONDS = 30


def commitment_for(partition: int) -> str:
    """A distinct, valid hex commitment per partition."""
    return f"{partition:02x}" * 32


class Make:
    """Factories for the API objects reconcile reads."""

    @staticmethod
    def job(kind: str = "snap-update", name: str = "job", **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": api.API_VERSION,
            "kind": api.PROOFJOB_KIND,
            "metadata": {"name": name, "namespace": "ns", "uid": JOB_UID, "generation": 1},
            "spec": {"proofKind": kind, "sector": {"miner": 1000, "number": 7}, **spec},
        }

    @staticmethod
    def pod(
        job: dict[str, Any],
        partition: int = 0,
        attempt: int = 1,
        *,
        phase: str = "Pending",
        node: str | None = None,
        exit_code: int | None = None,
        message: str | None = None,
        reason: str | None = None,
        pod_reason: str | None = None,
        conditions: Iterable[dict[str, Any]] = (),
        deleting: datetime | None = None,
        finalizer: bool = True,
        started: datetime | None = None,
        finished: datetime | None = None,
    ) -> dict[str, Any]:
        pod = pod_manifest(resolve(job), partition, attempt, SETTINGS)
        meta = pod["metadata"]
        meta["uid"] = f"uid-{meta['name']}"
        if not finalizer:
            meta["finalizers"] = []
        if deleting is not None:
            meta["deletionTimestamp"] = api.format_time(deleting)
        if node is not None:
            pod["spec"]["nodeName"] = node
        status: dict[str, Any] = {"phase": phase, "conditions": list(conditions)}
        if started is not None:
            status["startTime"] = api.format_time(started)
        if pod_reason is not None:
            status["reason"] = pod_reason
        if exit_code is not None:
            terminated: dict[str, Any] = {"exitCode": exit_code}
            if message is not None:
                terminated["message"] = message
            if reason is not None:
                terminated["reason"] = reason
            if finished is not None:
                terminated["finishedAt"] = api.format_time(finished)
            status["containerStatuses"] = [{"name": "prover", "state": {"terminated": terminated}}]
        pod["status"] = status
        return pod

    @staticmethod
    def workers(node: str, *claims: tuple[str, str, str]) -> dict[str, Any]:
        """A WorkerStatus; each claim is a lane (worker id, pod uid, lane stage), one worker
        per worker id."""
        lanes: dict[str, list[dict[str, Any]]] = {}
        for wid, uid, stage in claims:
            lanes.setdefault(wid, []).append({"pod": {"uid": uid}, "stage": stage})
        return {
            "apiVersion": api.API_VERSION,
            "kind": api.WORKERSTATUS_KIND,
            "metadata": {"name": node},
            "spec": {"nodeName": node},
            "status": {"workers": [{"id": wid, "lanes": ls} for wid, ls in lanes.items()]},
        }

    @staticmethod
    def result(partition: int, synth_ms: float = 120.4, gpu_ms: float = 33.6) -> str:
        return (
            f'{{"commitment": "{commitment_for(partition)}", '
            f'"synth_ms": {synth_ms}, "gpu_ms": {gpu_ms}, "backend": "numpy"}}'
        )


@dataclass
class Cluster:
    """An in-memory API server, kubelet and prover around one ProofJob."""

    job: dict[str, Any]
    now: datetime = T0
    nodes: dict[str, int] = field(default_factory=lambda: {"node-a": 2, "node-b": 2})
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # uid: node, id, stage
    created: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    job_deleted: bool = False
    _uids: itertools.count[int] = field(default_factory=itertools.count)

    # --- the API server and the handler layer -------------------------------------------
    def inputs(self) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """What a sync hands ``reconcile``: the job, its pods and the WorkerStatuses."""
        workers = [
            Make.workers(
                node, *((wid, uid, st) for uid, (n, wid, st) in self.claims.items() if n == node)
            )
            for node in self.nodes
        ]
        return self.job, list(self.pods.values()), workers

    def decide(self) -> Decision:
        job, pods, workers = self.inputs()
        return reconcile(copy.deepcopy(job), pods, workers, self.now, settings=SETTINGS)

    def reconcile(self) -> Decision:
        decision = self.decide()
        self.apply(decision)
        return decision

    def apply(self, decision: Decision) -> None:
        self.job["status"] = without_nulls(copy.deepcopy(decision.status))
        for action in decision.actions:
            self.apply_action(action)

    def apply_action(self, action: Action) -> None:
        if isinstance(action, CreatePod):
            self._create(action.manifest)
        elif isinstance(action, DeletePod):
            self.delete(action.name, uid=action.uid)
        elif isinstance(action, ReleaseWorker):
            self._release(action)
        elif isinstance(action, Event):
            self.events.append(action)
        elif isinstance(action, DeleteJob):
            self.job_deleted = True

    def _create(self, manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        if name in self.pods:
            return
        pod = copy.deepcopy(manifest)
        pod["metadata"]["uid"] = f"uid-{next(self._uids)}"
        pod["status"] = {"phase": "Pending"}
        self.pods[name] = pod
        self.created.append(name)

    def delete(self, name: str, uid: str | None = None) -> None:
        pod = self.pods.get(name)
        if pod is None or (uid and pod["metadata"]["uid"] != uid):
            return
        if pod["metadata"].get("finalizers"):
            deadline = self.now + timedelta(seconds=GRACE_SECONDS)
            pod["metadata"].setdefault("deletionTimestamp", api.format_time(deadline))
        else:
            del self.pods[name]

    def _release(self, action: ReleaseWorker) -> None:
        self.claims.pop(action.pod_uid, None)
        pod = self.pods.get(action.pod_name)
        if pod is None or pod["metadata"]["uid"] != action.pod_uid:
            return
        meta = pod["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != api.FINALIZER]
        if meta.get("deletionTimestamp") and not meta["finalizers"]:
            del self.pods[action.pod_name]

    # --- kubelet and prover ---------------------------------------------------------------
    def running(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods.values()
            if p["status"]["phase"] in ("Pending", "Running") and p["spec"].get("nodeName")
        ]

    def schedule(self) -> None:
        """Bind pending pods to nodes with a free GPU, in name order."""
        for pod in sorted(self.pods.values(), key=lambda p: p["metadata"]["name"]):
            if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            for node, gpus in self.nodes.items():
                used = sum(1 for p in self.running() if p["spec"]["nodeName"] == node)
                if used < gpus:
                    pod["spec"]["nodeName"] = node
                    break

    def start(self, name: str, stage: str = "synthesizing") -> None:
        pod = self.pods[name]
        node = pod["spec"]["nodeName"]
        busy = {wid for n, wid, _ in self.claims.values() if n == node}
        worker = next(f"W{i}" for i in range(8) if f"W{i}" not in busy)
        pod["status"].update(phase="Running", startTime=api.format_time(self.now))
        self.claims[pod["metadata"]["uid"]] = (node, worker, stage)

    def stage(self, name: str, stage: str) -> None:
        uid = self.pods[name]["metadata"]["uid"]
        node, worker, _ = self.claims[uid]
        self.claims[uid] = (node, worker, stage)

    def finish(self, name: str, exit_code: int = 0, message: str | None = None) -> None:
        pod = self.pods[name]
        partition = int(pod["metadata"]["labels"][api.LABEL_PARTITION])
        if message is None and exit_code == 0:
            message = Make.result(partition)
        self.claims.pop(pod["metadata"]["uid"], None)
        terminated = {"exitCode": exit_code, "finishedAt": api.format_time(self.now)}
        if message is not None:
            terminated["message"] = message
        pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [
            {"name": "prover", "state": {"terminated": terminated}}
        ]

    def preempt(self, name: str) -> None:
        pod = self.pods[name]
        pod["status"].setdefault("conditions", []).append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "preempted by a higher priority pod",
            }
        )
        self.delete(name)

    def terminate_deleting(self) -> None:
        """The kubelet stops every deleting pod's container (SIGTERM, exit 143)."""
        for pod in list(self.pods.values()):
            if pod["metadata"].get("deletionTimestamp") and pod["status"]["phase"] in (
                "Pending",
                "Running",
            ):
                if pod["spec"].get("nodeName"):
                    self.finish(pod["metadata"]["name"], exit_code=143, message="terminated")
                else:
                    pod["status"]["phase"] = "Failed"

    def tick(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)

    def partition(self, index: int) -> dict[str, Any]:
        return next(p for p in self.job["status"]["partitions"] if p["index"] == index)

    def current_pod(self, index: int) -> dict[str, Any]:
        return self.pods[self.partition(index)["pod"]]
