"""The ``/status`` document as types: what ``aggregate.render`` returns, field by field.

Each field's comment is its row of README.md's field table ("The status endpoint"); times are
as of ``generated_at``. ``render`` is typed with these, so ``mypy --strict`` checks every name
the server writes, and ``validate`` checks a rendered (or parsed) document against them: the
keys of every object at every depth, and the JSON type of every value.
"""

from __future__ import annotations

import types
from typing import Any, TypedDict, get_args, get_origin, get_type_hints, is_typeddict


class View(TypedDict):
    # every watch listed and connected
    synced: bool
    # 0 while every watch is connected, else seconds since a watch lost its connection
    age_secs: float
    # watches that broke and resumed or listed again, all resources together
    watch_restarts: int


class Fleet(TypedDict):
    # GPU nodes
    nodes: int
    # their physical GPUs, never time-slicing replicas (contract.gpu.physical_gpus)
    gpus: int
    # GPUs in their GPU phase (a holder not live is not counted)
    gpus_proving: int
    # GPUs with lanes, none in the GPU phase
    gpus_waiting: int
    # the share of the last ten minutes the fleet's GPUs spent in their GPU phase; null without
    # GPUs
    busy_fraction_10m: float | None


class Partition(TypedDict):
    # the partition's index in its job
    index: int
    # pending, scheduled, synthesizing, synth_done, gpu, committing, done or failed; where the
    # attempt has a lane, its lane's stage, and gpu only for the lane holding the GPU phase
    state: str
    # the attempt, from 1
    attempt: int
    # the node it is bound to or ran on; null before
    node: str | None
    # the GPU (worker id) it ran on; null before
    worker: str | None
    # synthesis time in ms; null until measured
    synth_ms: int | None
    # GPU phase time in ms; null until measured
    gpu_ms: int | None
    # time in the current state; null once done or failed
    stage_secs: float | None
    # why it failed, was retried or cannot be scheduled; null once done
    reason: str | None
    # the reason's detail; null once done
    message: str | None


class Pipeline(TypedDict):
    # namespace/name, never cut
    job_id: str
    # the ProofJob's namespace
    namespace: str
    # the ProofJob's name
    name: str
    # the ProofJob's UID
    uid: str
    # the ProofJob's proof kind
    proof_kind: str
    # the ProofJob's phase
    phase: str
    # seconds since the job started; null before
    started_secs_ago: float | None
    # seconds since the job finished; null before
    finished_secs_ago: float | None
    # the job's partitions
    total_partitions: int
    # its partitions done
    partitions_done: int
    # its partitions failed
    partitions_failed: int
    # one per partition, by index
    partitions: list[Partition]
    # of the ProofJob it was read from
    resource_version: str


class Holder(TypedDict):
    # the holding lane's pod
    pod: str
    # its job, namespace/name
    job_id: str
    # its job's proof kind
    proof_kind: str
    # its partition
    partition: int
    # its attempt
    attempt: int
    # how long it has held the GPU phase
    since_secs: float


class Lane(TypedDict):
    # the lane's pod
    pod: str
    # its job, namespace/name
    job_id: str
    # its job's proof kind
    proof_kind: str
    # its partition
    partition: int
    # its attempt
    attempt: int
    # starting, synthesizing, synth_done, gpu or committing
    stage: str
    # time in the stage
    stage_secs: float
    # how long its pod has not been live (its readiness probe fails); null while live
    not_live_secs: float | None
    # how long it has waited for the GPU phase; null when not waiting
    ready_secs: float | None
    # its prover's resident host memory at its last write; null before its first measured write
    host_memory_bytes: int | None
    # the device memory its CuPy pool held at its last write (0 on NumPy); null before
    device_memory_bytes: int | None


class Memory(TypedDict):
    """What lanes hold and do: a GPU's figures (``GpuWorker``) and a node's (``Node``)."""

    # lanes synthesizing now
    lanes_synthesizing: int
    # lanes ready, waiting for the GPU phase
    lanes_waiting: int
    # the lanes' host memory, summed
    host_memory_bytes: int
    # the lanes' device memory, summed
    device_memory_bytes: int


class GpuWorker(TypedDict):
    # the GPU's node
    node: str
    # the GPU's worker id
    worker_id: str
    # the GPU's UUID; null when unknown
    gpu_uuid: str | None
    # the GPU's model name; null when unknown
    gpu_name: str | None
    # gpu while a lane holds the GPU phase, waiting while lanes exist but none holds it, idle
    # with no lanes
    state: str
    # the lane holding the GPU phase; null without one
    holder: Holder | None
    # its lanes in arrival order, the holder's too
    lanes: list[Lane]
    # null in the GPU phase, else why the GPU is idle now: cpu, not_live, scheduling, no_work
    idle_reason: str | None
    # the holder's stage; null without one
    stage: str | None
    # the holder's job; null without one
    current_job: str | None
    # the holder's proof kind; null without one
    current_proof_kind: str | None
    # the holder's partition; null without one
    current_partition: int | None
    # the holder's attempt; null without one
    attempt: int | None
    # how long the holder has held the GPU phase; null without one
    busy_secs: float | None
    # the holder's time in its stage; null without one
    stage_secs: float | None
    # partitions the GPU completed
    completed: int
    # the share of the last ten minutes in the GPU phase; null at the server's first moment
    busy_fraction_10m: float | None
    # its lanes synthesizing now
    lanes_synthesizing: int
    # its lanes ready, waiting for the GPU phase
    lanes_waiting: int
    # its lanes' host memory, summed
    host_memory_bytes: int
    # its lanes' device memory, summed
    device_memory_bytes: int
    # seconds in the GPU phase (the WorkerStatus's gpuTime)
    busy_seconds_total: float
    # seconds idle by reason: no_lane, cpu, not_live (the WorkerStatus's gpuTime)
    idle_seconds_total: dict[str, float]
    # 20 slices of 30 s, oldest first: the share of each in the GPU phase; null before the
    # server started
    busy_strip_10m: list[float | None]
    # per slice, the reason the GPU was idle longest; null where it was never idle
    idle_strip_10m: list[str | None]
    # of its WorkerStatus
    resource_version: str


class Node(TypedDict):
    # the node's name
    node: str
    # its GPUs: the workers its WorkerStatuses list
    gpus: int
    # its GPUs' lanes
    lanes: int
    # its lanes synthesizing now
    lanes_synthesizing: int
    # its lanes ready, waiting for the GPU phase
    lanes_waiting: int
    # its lanes' host memory, summed
    host_memory_bytes: int
    # its lanes' device memory, summed
    device_memory_bytes: int
    # the Node's allocatable memory; null when it does not say
    allocatable_memory_bytes: int | None


class Counters(TypedDict):
    # partitions completed, deleted jobs' included
    total_completed: int
    # partitions failed, deleted jobs' included
    total_failed: int
    # partitions completed per proof kind, every kind, zeros included
    completed_by_kind: dict[str, int]
    # partitions failed per proof kind, every kind, zeros included
    failed_by_kind: dict[str, int]
    # partitions waiting for a GPU: pending and scheduled
    queue_depth: int
    # the WorkerStatuses' staleWritesRejected, deleted ones' included
    stale_writes_rejected: int


# What this answer holds of the listing (``?limit=``, ``?continue=``), as a Kubernetes list's
# metadata: ``continue``, a token for the next page of pipelines, null on the last page (a
# keyword in Python, hence this form); ``remaining_item_count``, the pipelines after this page.
ListMeta = TypedDict("ListMeta", {"continue": str | None, "remaining_item_count": int})


class StatusDocument(TypedDict):
    # seconds since the server started
    uptime_secs: float
    # when the document was rendered, seconds since the epoch
    generated_at: float
    # the watches' state
    view: View
    # the fleet's GPUs
    fleet: Fleet
    # the jobs, by creation time then namespace/name; finished ones for --keep-finished
    pipelines: list[Pipeline]
    # one per physical GPU, by node then worker (W2 before W10)
    gpu_workers: list[GpuWorker]
    # one per GPU node, by name
    nodes: list[Node]
    # what finished (the ledger's rule)
    counters: Counters
    # the page: a token for the next one, and how many pipelines follow
    metadata: ListMeta


def fields(model: Any = StatusDocument, prefix: str = "") -> list[str]:
    """Every field's path, as README.md's table names them: ``view.synced``,
    ``gpu_workers[].lanes[].stage``; an object's fields after its own path."""
    out = []
    for name, hint in get_type_hints(model).items():
        path = prefix + name
        out.append(path)
        inner, suffix = _unwrap(hint), ""
        while get_origin(inner) is list:
            inner, suffix = _unwrap(get_args(inner)[0]), suffix + "[]"
        if is_typeddict(inner):
            out += fields(inner, f"{path}{suffix}.")
    return out


def validate(doc: object) -> list[str]:
    """What in ``doc`` does not fit ``StatusDocument``: a missing or unexpected key, or a value
    of another JSON type, each as ``path: what``; empty when it fits."""
    return _check(doc, StatusDocument, "")


def _unwrap(hint: Any) -> Any:
    """``X | None`` (the model's only unions) as ``X``; any other hint as it is."""
    if not _is_union(hint):
        return hint
    (inner,) = (arg for arg in get_args(hint) if arg is not type(None))
    return inner


def _is_union(hint: Any) -> bool:
    return get_origin(hint) is types.UnionType


def _check(value: object, hint: Any, path: str) -> list[str]:
    where = path or "document"
    if _is_union(hint):
        return [] if value is None else _check(value, _unwrap(hint), path)
    if is_typeddict(hint):
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        hints = get_type_hints(hint)
        missing = hint.__required_keys__ - value.keys()
        errors = [f"{where}: missing {key}" for key in sorted(missing)]
        errors += [f"{where}: unexpected {key}" for key in sorted(value.keys() - hints.keys())]
        for key in (key for key in hints if key in value):
            errors += _check(value[key], hints[key], f"{path}.{key}" if path else key)
        return errors
    origin, args = get_origin(hint), get_args(hint)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: expected a list, got {type(value).__name__}"]
        return [e for i, item in enumerate(value) for e in _check(item, args[0], f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: expected an object, got {type(value).__name__}"]
        return [e for key, item in value.items() for e in _check(item, args[1], f"{path}.{key}")]
    if not _is_a(value, hint):
        return [f"{where}: expected {hint.__name__}, got {type(value).__name__}"]
    return []


def _is_a(value: object, hint: type) -> bool:
    """JSON's types: a bool is no number, an int is a float."""
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, int | float)
    return isinstance(value, hint)
