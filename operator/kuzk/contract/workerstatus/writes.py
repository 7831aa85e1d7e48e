"""The WorkerStatus write protocol's writes: each one GETs the object, decides from what it
says (the pure ``decide_*`` of ``kuzk.contract.workerstatus.decisions``), then replaces ``/status``
carrying the ``resourceVersion`` that was read; on 409 it reads and decides again
(``guarded_write``). Everything here talks to the API server and blocks; the rules it applies are
the decisions'.

A prover ``join``s its GPU's lanes (creating the GPU's WorkerStatus if it is the first:
``create_worker_status``), reports its ``stage``s, ``acquire``s the GPU phase (waiting on a
watch of the object while another lane holds it: ``wait_for_change``), gives it up with
``release_gpu`` and ``leave``s when it exits; ``claim`` is ``join`` and then ``acquire``, for
a prover that holds its GPU for its whole run. The operator's finalizer ``release``s the lane
of a pod in the node's WorkerStatus that concerns it, its ``sweep`` removes and marks lanes,
and ``retire_legacy`` deletes a legacy WorkerStatus no lane is on any more.

A WorkerStatus that is gone makes the prover's writes after ``join`` raise
``WorkerStatusMissing`` (its node is being deleted); ``release`` and ``sweep`` treat it as
nothing to do, so a pod's finalizer never sticks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar, cast

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kuzk.contract.api import (
    API_VERSION,
    GROUP,
    VERSION,
    WORKERSTATUS_KIND,
    WORKERSTATUS_PLURAL,
    WORKERSTATUSES_PATH,
    WorkerOutcome,
)
from kuzk.contract.clock import SYSTEM, Clock
from kuzk.contract.rawjson import METADATA_ONLY, call
from kuzk.contract.retry import Backoff
from kuzk.contract.workerstatus import Gpu, decisions, legacy, parse, worker_status_name
from kuzk.contract.workerstatus.decisions import Acquired, Assignment, Released, WriteDecision
from kuzk.contract.workerstatus.lane_model import LaneStage, Memory, PodRef

log = logging.getLogger("kuzk.contract.workerstatus.writes")

T = TypeVar("T")

# How long a write keeps trying through continuous 409s: generous, since a GPU's lanes all
# write its one WorkerStatus, a loaded API server answers slowly, and a prover waits anyway.
CONFLICT_BUDGET_S = 30.0
# The wait after each conflict: from 10 ms doubling to 250 ms, anywhere from 0 (full jitter:
# the lanes that conflicted do not come back together).
CONFLICT_BACKOFF = Backoff(base=0.01, cap=0.25, jitter=1.0)
# A write gives up on a connection the API server never accepts after 10 s, and on an answer
# only after 2 min (answers are slow under load, and a write that times out may have landed).
_TIMEOUTS = (10.0, 120.0)
# A waiting lane's watch ends after this long and the lane asks again, so a change the watch
# missed (a dropped connection) costs at most this much.
ACQUIRE_WATCH_S = 10


class WorkerStatusMissing(LookupError):
    """The WorkerStatus does not exist (not created yet, or its node is gone)."""


class WorkerWriteConflict(RuntimeError):
    """The object kept changing under the write (409 Conflict) for the whole retry budget."""


@dataclass
class Seen:
    """The newest ``resourceVersion`` of its WorkerStatus that one lane has read or written.
    The lane's next read asks for a version not older than it, which the API server answers
    from its watch cache, without reading etcd (measured on the test bed's control plane: half
    the API server's CPU of a quorum read, and none of etcd's), and the answer holds every
    write the lane made itself, so a decision about its own lane is never made on less. A
    lane's first read, and every read after a 409, is a quorum read: the cache may not have
    seen the write that conflicted yet. Only a lane keeps one: the operator's release and
    sweep decide about lanes other processes write, and read the latest."""

    version: str = ""


def _path(name: str) -> str:
    return f"{WORKERSTATUSES_PATH}/{name}"


def _read(api: client.ApiClient, name: str, not_older_than: str) -> dict[str, Any]:
    """WorkerStatus ``name``: the latest (a quorum read) or, given ``not_older_than``, the
    watch cache's, at that version or later."""
    query = [("resourceVersion", not_older_than)] if not_older_than else []
    return call(api, "GET", _path(name), query=query, timeout=_TIMEOUTS)


def _guarded(
    api: client.ApiClient,
    name: str,
    decide: Callable[[Mapping[str, Any]], WriteDecision[T]],
    budget_s: float,
    clock: Clock,
    seen: Seen | None = None,
) -> tuple[T, str]:
    conflicts, deadline = 0, 0.0
    while True:
        try:
            current = _read(api, name, seen.version if seen and not conflicts else "")
            version = str((current.get("metadata") or {}).get("resourceVersion") or "")
            decision = decide(current.get("status") or {})
            if decision.status is not None:
                written = call(api, "PUT", _path(name) + "/status",
                               {**current, "status": decision.status}, timeout=_TIMEOUTS)
                version = str((written.get("metadata") or {}).get("resourceVersion") or "")
        except ApiException as error:
            if error.status == 404:
                msg = f"WorkerStatus {name} does not exist"
                raise WorkerStatusMissing(msg) from None
            if error.status != 409:
                raise  # the caller's to try again, if ``retry.is_transient`` says it may
            conflicts += 1
            if conflicts == 1:
                deadline = clock.monotonic() + budget_s
            elif clock.monotonic() >= deadline:
                msg = f"WorkerStatus {name}: still conflicting after {conflicts} tries"
                raise WorkerWriteConflict(msg) from None
            clock.sleep(CONFLICT_BACKOFF.delay(conflicts))
            continue
        for note in decision.notes:
            log.info("WorkerStatus %s: %s", name, note)
        if seen is not None:
            seen.version = version
        return decision.result, version


def guarded_write(
    api: client.ApiClient,
    name: str,
    decide: Callable[[Mapping[str, Any]], WriteDecision[T]],
    *,
    budget_s: float = CONFLICT_BUDGET_S,
    clock: Clock = SYSTEM,
    seen: Seen | None = None,
) -> T:
    """The one way kuzk writes a WorkerStatus: GET, ``decide(status)``, replace ``/status``
    with the resourceVersion that was read; on 409 Conflict back off (full jitter) and start
    over, until ``budget_s`` seconds of continuous conflict raise WorkerWriteConflict. A
    lane's writes pass its ``Seen``: their GETs then come from the watch cache."""
    return _guarded(api, name, decide, budget_s, clock, seen)[0]


def join(
    api: client.ApiClient, node: str, gpu: Gpu, assignment: Assignment, *, clock: Clock = SYSTEM,
    memory: Callable[[], Memory | None] = lambda: None, stage: LaneStage = LaneStage.STARTING,
    seen: Seen | None = None,
) -> str:
    """Add ``assignment``'s lane, in ``stage`` (``decisions.decide_join``), to the worker of
    ``gpu`` on ``node``, in the GPU's WorkerStatus, which the first lane of the GPU creates
    (``create_worker_status``); return the WorkerStatus's name, where the lane's other writes
    go. ``memory`` is asked before
    each decision (so that a join which had to create the object first carries what the
    prover holds when it writes); in the other lane writes ``memory`` is what the prover
    holds now.

    Raises WorkerStatusMissing when the node does not exist."""
    name = worker_status_name(node, gpu.uuid)

    def decide(status: Mapping[str, Any]) -> WriteDecision[str]:
        return decisions.decide_join(status, gpu, assignment, clock.now(), memory(), stage)

    try:
        guarded_write(api, name, decide, clock=clock, seen=seen)
    except WorkerStatusMissing:
        create_worker_status(api, node, gpu)
        guarded_write(api, name, decide, clock=clock, seen=seen)
    return name


def stage(
    api: client.ApiClient, name: str, assignment: Assignment, stage: str, *,
    clock: Clock = SYSTEM, memory: Memory | None = None, seen: Seen | None = None,
) -> bool:
    """Set the stage of ``assignment``'s lane in WorkerStatus ``name``; False when stale."""
    return guarded_write(
        api, name, lambda s: decisions.decide_stage(s, assignment, stage, clock.now(), memory),
        clock=clock, seen=seen)


def wait_for_change(
    api: client.ApiClient,
    name: str,
    version: str,
    timeout_s: float,
    until: Callable[[Mapping[str, Any]], bool] | None = None,
) -> str:
    """Return when WorkerStatus ``name`` changes after ``version`` (into a status for which
    ``until`` holds, when given), or after ``timeout_s``: a watch of that one object, no
    polling, and no request per change that does not matter to the caller. Returns the
    resourceVersion of the change it returned on ("" after the timeout)."""
    objects = client.CustomObjectsApi(api)
    stream = watch.Watch()  # type: ignore[no-untyped-call]
    try:
        for event in stream.stream(  # type: ignore[no-untyped-call]
            objects.list_cluster_custom_object, GROUP, VERSION, WORKERSTATUS_PLURAL,
            field_selector=f"metadata.name={name}",
            resource_version=version,
            timeout_seconds=max(1, int(timeout_s)),
            _request_timeout=(_TIMEOUTS[0], timeout_s + 10.0),
        ):
            changed = event.get("object") or {}
            if until is None or event.get("type") != "MODIFIED" or until(
                    changed.get("status") or {}):
                return str((changed.get("metadata") or {}).get("resourceVersion") or "")
    except ApiException as error:
        if error.status != 410:  # Gone: the version is too old; the caller reads anew
            raise
    finally:
        stream.stop()  # type: ignore[no-untyped-call]
    return ""


def _decide_acquire_now(
    status: Mapping[str, Any], *, assignment: Assignment, clock: Clock, memory: Memory | None
) -> WriteDecision[Acquired]:
    return decisions.decide_acquire(status, assignment, clock.now(), memory)


def acquire(
    api: client.ApiClient,
    name: str,
    assignment: Assignment,
    *,
    wait_s: float | None = None,
    watch_s: float = ACQUIRE_WATCH_S,
    clock: Clock = SYSTEM,
    memory: Callable[[], Memory | None] = lambda: None,
    seen: Seen | None = None,
) -> Acquired:
    """Hold the GPU phase of ``assignment``'s lane: granted at once if the GPU is free and no
    waiting lane comes first, else wait on a watch of the WorkerStatus and ask again when it
    changes. Returns GRANTED, GONE (the lane was removed: stale), or WAITING once ``wait_s``
    has passed (None: no limit). ``memory`` is asked before each try."""
    deadline = None if wait_s is None else clock.monotonic() + wait_s
    while True:
        result, version = _guarded(
            api, name, partial(_decide_acquire_now, assignment=assignment, clock=clock,
                               memory=memory()),
            CONFLICT_BUDGET_S, clock, seen,
        )
        if result is not Acquired.WAITING:
            return result
        left = watch_s if deadline is None else min(watch_s, deadline - clock.monotonic())
        if left <= 0:
            return result

        def decided(status: Mapping[str, Any]) -> bool:
            # Another lane's stage or memory changes nothing for this one: ask the API
            # server again only once the decision on what the watch shows would change.
            verdict = decisions.decide_acquire(status, assignment, clock.now())
            return verdict.result is not Acquired.WAITING

        changed = wait_for_change(api, name, version, left, decided)
        if seen is not None and changed:
            seen.version = changed  # read next what the watch showed, or later


def release_gpu(
    api: client.ApiClient, name: str, assignment: Assignment, *, clock: Clock = SYSTEM,
    memory: Memory | None = None, seen: Seen | None = None,
) -> bool:
    """Give up the GPU phase ``assignment``'s lane holds; False when the write is stale."""
    return guarded_write(
        api, name, lambda s: decisions.decide_release_gpu(s, assignment, clock.now(), memory),
        clock=clock, seen=seen)


def claim(
    api: client.ApiClient,
    node: str,
    gpu: Gpu,
    assignment: Assignment,
    *,
    wait_s: float | None = None,
    clock: Clock = SYSTEM,
) -> str:
    """``join`` and ``acquire``: for a prover that holds its GPU for its whole run. Returns
    the WorkerStatus's name once the GPU phase is held (or ``wait_s`` has passed)."""
    name = join(api, node, gpu, assignment, clock=clock)
    acquire(api, name, assignment, wait_s=wait_s, clock=clock)
    return name


def node_worker_statuses(api: client.ApiClient, node: str) -> list[dict[str, Any]]:
    """The WorkerStatuses of ``node`` (its GPUs', and a legacy one of its own): one LIST by
    the CRD's selectable field ``spec.nodeName``."""
    listed = client.CustomObjectsApi(api).list_cluster_custom_object(
        GROUP, VERSION, WORKERSTATUS_PLURAL,
        field_selector=f"spec.nodeName={node}", _request_timeout=_TIMEOUTS,
    )
    return list(cast(dict[str, Any], listed).get("items") or [])


def release(
    api: client.ApiClient, node: str, pod: PodRef, outcome: WorkerOutcome,
    *, clock: Clock = SYSTEM,
) -> bool:
    """The finalizer's release where no cache says where the pod's lane is (an orphaned pod,
    the uninstall hook): list the node's WorkerStatuses and ``release_at`` the one that
    concerns the pod (``decisions.concerns``); True if it released a lane.

    False when none concerns the pod (it left, or never joined), when the write is stale
    (refused and counted), or when the WorkerStatus is gone: then there is nothing to release
    and a finalizer may go."""
    for found in node_worker_statuses(api, node):
        if decisions.concerns(found.get("status"), pod.uid):
            return release_at(api, str((found.get("metadata") or {}).get("name") or ""), pod,
                              outcome, clock=clock)
    log.info("node %s: %s holds no lane: nothing to release", node, decisions.describe(pod))
    return False


def release_at(
    api: client.ApiClient, name: str, pod: PodRef, outcome: WorkerOutcome,
    *, clock: Clock = SYSTEM,
) -> bool:
    """The finalizer's release in WorkerStatus ``name``: remove ``pod``'s lane (and the GPU
    phase with it); True if it did. False when the pod holds nothing there, when the write is
    stale (the sweep took its GPU phase: refused and counted), or when the WorkerStatus is
    gone."""
    try:
        return guarded_write(
            api, name, lambda s: decisions.decide_release(s, pod, outcome, clock.now()),
            clock=clock)
    except WorkerStatusMissing:
        return False


def leave(
    api: client.ApiClient, name: str, assignment: Assignment, outcome: WorkerOutcome,
    *, clock: Clock = SYSTEM, seen: Seen | None = None,
) -> bool:
    """The prover's own release of its lane in WorkerStatus ``name`` when it exits; False
    when the lane was gone (stale: refused and counted) or the WorkerStatus is."""
    try:
        return guarded_write(
            api, name, lambda s: decisions.decide_leave(s, assignment, outcome, clock.now()),
            clock=clock, seen=seen)
    except WorkerStatusMissing:
        log.info("no WorkerStatus %s: nothing to leave for %s", name,
                 decisions.describe(assignment))
        return False


def sweep(
    api: client.ApiClient,
    name: str,
    live_pods: Mapping[str, WorkerOutcome | None],
    now: datetime,
    not_live: Mapping[str, datetime] | None = None,
    *,
    scope: Collection[str] = (),
    clock: Clock = SYSTEM,
) -> list[Released]:
    """Remove (guarded) the lanes of WorkerStatus ``name`` as ``decide_sweep`` says (those
    whose pod is gone, or ended without its finalizer in charge), and mark the lanes whose
    pod is not live; only the lanes of jobs in ``scope``'s namespaces (empty: all)."""
    try:
        return guarded_write(
            api, name, lambda s: decisions.decide_sweep(s, live_pods, now, not_live, scope),
            clock=clock,
        )
    except WorkerStatusMissing:
        return []


def create_worker_status(api: client.ApiClient, node: str, gpu: Gpu) -> bool:
    """Create the WorkerStatus of ``gpu`` on ``node`` if absent, owned by the Node (so the
    garbage collector deletes it with the node); True if this call created it (False: a lane
    of the same GPU did first). Raises WorkerStatusMissing when the node does not exist."""
    try:
        meta = call(api, "GET", f"/api/v1/nodes/{node}", accept=METADATA_ONLY,
                    timeout=_TIMEOUTS).get("metadata") or {}
    except ApiException as error:
        if error.status == 404:
            msg = f"node {node} does not exist"
            raise WorkerStatusMissing(msg) from None
        raise
    body = {
        "apiVersion": API_VERSION,
        "kind": WORKERSTATUS_KIND,
        "metadata": {
            "name": worker_status_name(node, gpu.uuid),
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": meta.get("uid", "")}
            ],
        },
        "spec": {"nodeName": node, "gpu": gpu.as_status()},
    }
    try:
        call(api, "POST", WORKERSTATUSES_PATH, body, timeout=_TIMEOUTS)
    except ApiException as error:
        if error.status == 409:
            return False
        raise
    return True


def retire_legacy(api: client.ApiClient, worker_status: Mapping[str, Any]) -> bool:
    """Delete a legacy WorkerStatus (``workerstatus.legacy``) that no lane is on any more, with
    preconditions on its UID and resourceVersion (a write since keeps it); its counters go to
    the ledger with its deletion, as any WorkerStatus's do. True if this call deleted it."""
    meta = worker_status.get("metadata") or {}
    workers = parse(worker_status.get("status")).workers
    if not legacy(worker_status) or any(w.lanes for w in workers):
        return False
    try:
        client.CustomObjectsApi(api).delete_cluster_custom_object(
            GROUP, VERSION, WORKERSTATUS_PLURAL, str(meta.get("name") or ""),
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(
                uid=meta.get("uid"), resource_version=meta.get("resourceVersion"))),
            _request_timeout=_TIMEOUTS,
        )
    except ApiException as error:
        if error.status in (404, 409):
            return False
        raise
    return True
