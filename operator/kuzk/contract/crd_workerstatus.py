"""The WorkerStatus CustomResourceDefinition: one physical GPU of one node, its lanes
(partition pods) and the one holding its GPU phase, with the CEL rules that keep a written
status consistent whoever writes it.
"""

from __future__ import annotations

from typing import Any

from kuzk.contract import api
from kuzk.contract.crd_schema import (
    arr,
    integer,
    kuzk_crd,
    number,
    obj,
    rule,
    string,
    timestamp,
    with_rules,
)
from kuzk.contract.workerstatus import MAX_LANES, MAX_WORKERS, PREVIOUS_PODS, WorkerState
from kuzk.contract.workerstatus.lane_model import LaneStage
from kuzk.contract.workerstatus.lanes import PRIORITY_CLASSES


def _gpu() -> dict[str, Any]:
    return obj(
        "The GPU: its UUID is its identity.",
        {
            "uuid": string("GPU UUID (GPU-…), from the runtime or the device.", minLength=1,
                           maxLength=128),
            "name": string("GPU model name."),
            "memoryBytes": integer("GPU memory in bytes.", minimum=0),
        },
        required=["uuid"],
    )


def _workerstatus_spec() -> dict[str, Any]:
    spec = obj(
        "The GPU this WorkerStatus describes, and its node; immutable.",
        {
            "nodeName": with_rules(
                string(
                    "Name of the GPU's node. A prover may write only the WorkerStatuses of"
                    " its own node (the chart's admission policy compares this field with"
                    " its token's node).",
                    minLength=1,
                    maxLength=api.DNS_SUBDOMAIN_MAX,
                ),
                rule("self == oldSelf", "nodeName is immutable"),
            ),
            "gpu": _gpu(),
        },
        required=["nodeName"],
    )
    return with_rules(
        spec,
        rule("self == oldSelf", "spec is immutable: a WorkerStatus is one GPU of one node"),
        {
            "rule": "oldSelf.hasValue() || has(self.gpu)",
            "optionalOldSelf": True,
            "message": "spec.gpu is required: a WorkerStatus is one GPU (only a WorkerStatus"
                       " of a release before per-GPU WorkerStatuses, named after its node, has"
                       " none; the operator retires those)",
            "fieldPath": ".gpu",
        },
    )


def _workerstatus_status() -> dict[str, Any]:
    pod = obj(
        "A partition pod: the identity of a lane. Writes about a lane apply only while the"
        " worker still has this pod UID.",
        {
            "name": string("Name of the partition pod.", maxLength=api.DNS_SUBDOMAIN_MAX),
            "uid": string("UID of the partition pod.", minLength=1, maxLength=64),
        },
        required=["uid"],
    )
    lane = obj(
        "One partition pod on this GPU (through the device plugin's time-slicing replicas).",
        {
            "pod": pod,
            "job": obj(
                "The ProofJob the lane proves a partition of.",
                {
                    "namespace": string("Namespace of the ProofJob."),
                    "name": string("Name of the ProofJob."),
                    "uid": string("UID of the ProofJob."),
                    "proofKind": string("Proof kind of the job.", enum=list(api.PROOF_KINDS)),
                },
            ),
            "partition": integer("Partition index the lane proves.", minimum=0),
            "attempt": integer("Attempt of that partition.", minimum=1),
            "priority": integer(
                "Rank of the lane when lanes wait for the GPU phase: higher goes first. It is"
                " the rank of its ProofJob's resolved PriorityClass (spec.prover.priorityClassName,"
                " else the class its proof kind defaults to): "
                + ", ".join(f"{name} {rank}" for rank, name in enumerate(PRIORITY_CLASSES))
                + ". A class kuzk does not know ranks as its proof kind's default class.",
                minimum=0,
            ),
            "stage": string(
                "starting (the pod started), synthesizing (CPU), synth_done (waiting for the"
                " GPU phase), gpu (holds the GPU phase), committing (CPU, after the GPU"
                " phase).",
                enum=[str(s) for s in LaneStage],
            ),
            "since": timestamp("When the lane entered its stage."),
            "notLiveSince": timestamp(
                "Since when the lane's pod is not live: running, and its prover's readiness"
                " probe failed (the prover is stuck). Written by the operator, absent while the"
                " pod is live; a lane writes no sign of life of its own. The pod's liveness"
                " probe then has the prover killed and the lane released."
            ),
            "readyAt": timestamp(
                "When the lane asked for the GPU phase; set while it waits for it. Waiting"
                " lanes get it by priority, then by readyAt."
            ),
            "hostMemoryBytes": integer(
                "Resident host memory of the lane's prover when it last wrote (its join, a"
                " stage, the GPU phase): a lane waiting for the GPU keeps its witness here.",
                minimum=0,
            ),
            "deviceMemoryBytes": integer(
                "Device memory the lane's prover held when it last wrote (CuPy's memory pool);"
                " the holder's acquire adds what its GPU phase allocates right after; 0"
                " without a device.",
                minimum=0,
            ),
        },
        required=["pod", "stage"],
    )
    worker = obj(
        "One physical GPU, with the lanes (partition pods) it carries.",
        {
            "id": string(
                "Stable worker ID: 8 hex digits of the SHA-256 of the GPU's UUID (the suffix of"
                " the WorkerStatus's name); W0, W1… in a legacy WorkerStatus.",
                minLength=1, maxLength=api.DNS_LABEL_MAX),
            "gpu": _gpu(),
            "state": string(
                "gpu while a lane holds the GPU phase (the only busy state, while that lane is"
                " live: see notLiveSince), waiting while lanes exist but none holds it, idle"
                " with no lanes.",
                enum=[str(s) for s in WorkerState],
            ),
            "lanes": arr(
                "The partition pods on this GPU, in arrival order.",
                lane,
                maxItems=MAX_LANES,
            ),
            "holder": obj(
                "The lane in its GPU phase; absent while none holds it. At most one lane"
                " holds the GPU phase, and it is one of the lanes.",
                {"pod": pod, "since": timestamp("Since when the lane holds the GPU phase.")},
                required=["pod"],
            ),
            "previousPodUIDs": arr(
                "UIDs of the pods whose lane the sweep removed while they held the GPU phase,"
                " newest first. A later finalizer release about one of them is stale (refused"
                " and counted); one about a pod that has no lane (its prover left, or it never"
                " joined) is nothing to do.",
                string("UID of a partition pod.", maxLength=64),
                maxItems=PREVIOUS_PODS,
            ),
            "since": timestamp("When the worker entered its current state."),
            "completed": integer("Partitions this GPU finished.", minimum=0),
            "gpuTime": obj(
                "The GPU's seconds by mode since the worker was added, up to accountedAt."
                " Every write adds the time since accountedAt to the mode the GPU was in, so"
                " the counts survive any reader's restart.",
                {
                    "busySeconds": number("Seconds a live lane held the GPU phase.", minimum=0),
                    "cpuSeconds": number(
                        "Idle seconds with lanes, none holding the GPU phase (start-up,"
                        " synthesis, waiting, commitment: CPU work).",
                        minimum=0,
                    ),
                    "notLiveSeconds": number(
                        "Idle seconds while the lane holding the GPU phase was not live, or,"
                        " with none holding it, none of the lanes was (notLiveSince): a hung"
                        " prover, until its pod's liveness probe had it killed.",
                        minimum=0,
                    ),
                    "noLaneSeconds": number("Idle seconds without lanes.", minimum=0),
                    "accountedAt": timestamp("Up to when the seconds are counted."),
                },
                required=["accountedAt"],
            ),
        },
        required=["id", "state"],
    )
    worker = with_rules(
        worker,
        rule(
            "!has(self.holder) || (has(self.lanes)"
            " && self.lanes.exists(l, l.pod.uid == self.holder.pod.uid))",
            "holder must be one of the worker's lanes: no lane has the holder's pod UID",
            ".holder",
        ),
        rule(
            "!has(self.lanes) || self.lanes.all(l, l.stage != 'gpu'"
            " || (has(self.holder) && self.holder.pod.uid == l.pod.uid))",
            "a lane in stage gpu must be the holder: a GPU has one holder of its GPU phase",
            ".lanes",
        ),
        rule(
            "!has(self.holder) || !has(self.lanes) || self.lanes.all(l,"
            " l.pod.uid != self.holder.pod.uid || l.stage == 'gpu')",
            "holder's lane must be in stage gpu",
            ".holder",
        ),
        rule(
            "self.state == (has(self.holder) ? 'gpu'"
            " : (has(self.lanes) && self.lanes.size() > 0) ? 'waiting' : 'idle')",
            "state must be gpu with a holder, waiting with lanes and no holder, else idle",
        ),
        rule(
            "!has(self.lanes) || self.lanes.all(l, self.lanes.exists_one(m,"
            " m.pod.uid == l.pod.uid))",
            "a pod has at most one lane on a GPU",
        ),
    )
    status = obj(
        "The GPU's worker, written with resourceVersion-checked replaces only, by the lanes"
        " of this GPU and the operator's release and sweep.",
        {
            "workers": arr(
                "The GPU's worker: one (of spec.gpu), or none before its first lane joins. A"
                " legacy WorkerStatus (no spec.gpu) lists every GPU of its node.",
                worker,
                key="id",
                maxItems=MAX_WORKERS,
            ),
            "proving": integer(
                "Number of workers whose GPU phase a lane holds; kept equal to the workers"
                " list by every writer (it backs the Proving column).",
                minimum=0,
            ),
            "lanes": integer(
                "Number of lanes on all workers (it backs the Lanes column).", minimum=0
            ),
            "workerCount": integer(
                "Number of workers; kept equal to the workers list by every writer.",
                minimum=0,
            ),
            "staleWritesRejected": integer(
                "Writes refused because they were about something their pod no longer held.",
                minimum=0,
            ),
            "updatedAt": timestamp("When the status was last written."),
        },
    )
    proving = "self.workers.filter(w, has(w.holder)).size()"
    return with_rules(
        status,
        rule(
            f"!has(self.proving) || self.proving == (has(self.workers) ? {proving} : 0)",
            "proving must equal the number of workers whose GPU phase is held",
        ),
        rule(
            "!has(self.workerCount)"
            " || self.workerCount == (has(self.workers) ? self.workers.size() : 0)",
            "workerCount must equal the number of workers",
        ),
    )


def workerstatus_crd() -> dict[str, Any]:
    """The WorkerStatus CRD (cluster-scoped, short name ws, one per physical GPU)."""
    return kuzk_crd(
        api.WORKERSTATUS_KIND,
        api.WORKERSTATUS_PLURAL,
        api.WORKERSTATUS_SINGULAR,
        api.WORKERSTATUS_SHORT_NAME,
        "Cluster",
        "What one physical GPU is doing: its lanes (partition pods) and the one holding its"
        " GPU phase. Named <node>-<worker id>, created by the GPU's first lane, owned by the"
        " Node.",
        _workerstatus_spec(),
        _workerstatus_status(),
        [
            {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName"},
            {"name": "GPU", "type": "string", "jsonPath": ".spec.gpu.uuid"},
            {"name": "State", "type": "string", "jsonPath": ".status.workers[0].state"},
            {"name": "Holder", "type": "string",
             "jsonPath": ".status.workers[0].holder.pod.name"},
            {"name": "Lanes", "type": "integer", "jsonPath": ".status.lanes"},
            {
                "name": "Stale",
                "type": "integer",
                "jsonPath": ".status.staleWritesRejected",
                "priority": 1,
            },
        ],
        root_rules=[
            rule(
                "has(self.spec.gpu) || self.metadata.name == self.spec.nodeName",
                "a WorkerStatus without spec.gpu is a legacy one, named after its node:"
                " metadata.name must equal spec.nodeName",
                ".spec.nodeName",
            ),
            rule(
                "!has(self.spec.gpu) || !has(self.status) || !has(self.status.workers)"
                " || (self.status.workers.size() <= 1 && self.status.workers.all(w,"
                " has(w.gpu) && w.gpu.uuid == self.spec.gpu.uuid))",
                "a WorkerStatus is one GPU: status.workers holds at most one worker, and its"
                " gpu.uuid must equal spec.gpu.uuid",
                ".status.workers",
            ),
        ],
        selectable_fields=[".spec.nodeName"],
    )
