"""An independent model of one node's WorkerStatus with lanes, written from the protocol's
rules (README.md's lanes protocol and the choices ``kuzk.contract.workerstatus.decisions``
documents) without importing ``contract.workerstatus``: tests compare the real decisions and
the real object against a second, separate reading of the protocol.

* ``NodeModel`` plays a sequence of writes and answers each as the protocol must (granted,
  waiting or gone; True, False), counting the stale ones.
* ``observed`` reads a stored status into the same abstract form as ``NodeModel.expected``:
  per worker its ID, GPU, lanes (pod UID, stage, whether it waits with ``readyAt``, rank),
  holder, completed count and remembered pods; plus the stale count. Times are left out.
* ``explain`` names the one protocol write that turns one stored version into the next, or
  says that none does: the check a test applies to every version a watch recorded while
  writers raced.

The rules, as the model reads them:

* A GPU is a worker, ``W<k>`` with the lowest free k, created by the first lane that joins it;
  lanes keep their arrival order. At most one lane holds the GPU phase (stage ``gpu``).
* ``acquire`` marks the lane ready (``readyAt``) and grants it the GPU phase only when no lane
  holds it and no other ready lane comes first: higher priority (its job's PriorityClass:
  kuzk-critical 2, kuzk-high 1, kuzk-normal 0; for none or another class, its kind's:
  winning-post 2, window-post 1, the others 0), then ready earlier, then arrived earlier. A
  holder asking again holds.
* The prover's writes are about the lane it joined: without that lane they are stale
  (refused, counted), and so is a GPU release of a lane that does not hold the GPU phase.
  Stages only move forward (a late report changes nothing and is not stale).
* The finalizer's release (by pod) removes the pod's lane; without one it is nothing to do,
  unless the sweep took the GPU phase from that pod (it is remembered): then it is stale.
* The sweep removes lanes whose pod is gone (lost), or whose pod ended with no finalizer
  release in charge (its outcome); a holder it removes is remembered, newest first, eight
  at most. It also marks lanes whose pod is not live, which changes nothing the model keeps.
* Leaving with success (a release by the prover, the finalizer or the sweep with outcome
  succeeded) adds one to the GPU's completed count.
* No write refreshes anything just to say that a lane is alive.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

PRIORITY = {"winning-post": 2, "window-post": 1, "snap-update": 0, "porep-c2": 0}
CLASS_PRIORITY = {"kuzk-critical": 2, "kuzk-high": 1, "kuzk-normal": 0}
STAGES = ("starting", "synthesizing", "synth_done", "gpu", "committing")
REPORTED = ("synthesizing", "synth_done")
JOIN_STAGES = ("starting", "synthesizing")  # a prover that synthesizes at once joins so
REMEMBERED = 8



def gpu_id(uuid: str) -> str:
    """A GPU's worker ID, by the rule the protocol states (8 hex digits of the SHA-256 of its
    UUID), written here again."""
    return hashlib.sha256(uuid.encode()).hexdigest()[:8]

@dataclass
class ModelLane:
    uid: str
    priority: int
    stage: str = "starting"
    ready: Any = None


@dataclass
class ModelWorker:
    id: str
    gpu: str
    lanes: list[ModelLane] = field(default_factory=list)
    holder: str | None = None
    completed: int = 0
    previous: list[str] = field(default_factory=list)

    def lane(self, uid: str) -> ModelLane | None:
        return next((lane for lane in self.lanes if lane.uid == uid), None)

    def remove(self, uid: str, succeeded: bool) -> None:
        self.lanes = [lane for lane in self.lanes if lane.uid != uid]
        if self.holder == uid:
            self.holder = None
        self.completed += succeeded


@dataclass
class NodeModel:
    """One node's WorkerStatus as the protocol's rules make it. ``now`` arguments are any
    ordered values (datetimes, step numbers); only their order matters, and for the sweep's
    silence a threshold of the same kind."""

    workers: list[ModelWorker] = field(default_factory=list)
    rejected: int = 0

    def _find(self, uid: str) -> tuple[ModelWorker, ModelLane] | None:
        for worker in self.workers:
            lane = worker.lane(uid)
            if lane is not None:
                return worker, lane
        return None

    def _stale(self) -> bool:
        self.rejected += 1
        return False

    def join(self, gpu: str, uid: str, kind: str, now: Any, priority_class: str = "") -> str:
        found = self._find(uid)
        if found is not None:
            return found[0].id
        worker = next((w for w in self.workers if w.gpu == gpu), None)
        if worker is None:
            worker = ModelWorker(gpu_id(gpu), gpu)
            self.workers.append(worker)
        worker.lanes.append(ModelLane(uid, CLASS_PRIORITY.get(priority_class,
                                                              PRIORITY.get(kind, 0))))
        return worker.id

    def stage(self, uid: str, stage: str, now: Any) -> bool:
        assert stage in REPORTED
        found = self._find(uid)
        if found is None:
            return self._stale()
        lane = found[1]
        if STAGES.index(stage) > STAGES.index(lane.stage):
            lane.stage = stage
        return True

    def acquire(self, uid: str, now: Any) -> str:
        found = self._find(uid)
        if found is None:
            self._stale()
            return "gone"
        worker, lane = found
        if worker.holder == uid:
            return "granted"
        if lane.ready is None:
            # A lane that asks waits in synth_done: its prover does not write that stage.
            lane.ready = now
            if STAGES.index(lane.stage) < STAGES.index("synth_done"):
                lane.stage = "synth_done"
        order = {x.uid: k for k, x in enumerate(worker.lanes)}

        def first(other: ModelLane) -> bool:
            if other.uid == uid or other.ready is None:
                return False
            mine = (-lane.priority, lane.ready, order[uid])
            return (-other.priority, other.ready, order[other.uid]) < mine

        if worker.holder is None and not any(first(other) for other in worker.lanes):
            worker.holder = uid
            lane.stage, lane.ready = "gpu", None
            return "granted"
        return "waiting"

    def release_gpu(self, uid: str, now: Any) -> bool:
        found = self._find(uid)
        if found is None or found[0].holder != uid:
            return self._stale()
        worker, lane = found
        worker.holder = None
        lane.stage = "committing"
        return True

    def leave(self, uid: str, succeeded: bool) -> bool:
        """The prover's own release: it joined, so a missing lane means someone removed it."""
        found = self._find(uid)
        if found is None:
            return self._stale()
        found[0].remove(uid, succeeded)
        return True

    def finalizer(self, uid: str, succeeded: bool) -> bool:
        found = self._find(uid)
        if found is not None:
            found[0].remove(uid, succeeded)
            return True
        if any(uid in w.previous for w in self.workers):
            self._stale()
        return False

    def sweep(
        self, outcome_of: Callable[[str, ModelLane], str | None]
    ) -> list[tuple[str, str, str]]:
        """Remove every lane for which ``outcome_of(uid, lane)`` names an outcome: (worker
        ID, pod UID, outcome) of each, in order."""
        swept = []
        for worker in self.workers:
            for lane in list(worker.lanes):
                outcome = outcome_of(lane.uid, lane)
                if outcome is None:
                    continue
                if worker.holder == lane.uid:
                    rest = [p for p in worker.previous if p != lane.uid]
                    worker.previous = [lane.uid, *rest][:REMEMBERED]
                worker.remove(lane.uid, outcome == "succeeded")
                swept.append((worker.id, lane.uid, outcome))
        return swept

    def sweep_live(self, live: Mapping[str, str | None]) -> list[tuple[str, str, str]]:
        """The operator's sweep: ``live`` maps each existing pod to None while its lane is
        its prover's or its finalizer's to end, else to the outcome of its end; a lane goes
        when its pod is gone, or when its pod's outcome is given."""
        return self.sweep(lambda uid, _: live.get(uid, "lost"))

    def expected(self) -> dict[str, Any]:
        return {
            "workers": [
                {
                    "id": w.id,
                    "gpu": w.gpu,
                    "lanes": [(x.uid, x.stage, x.ready is not None, x.priority)
                              for x in w.lanes],
                    "holder": w.holder,
                    "completed": w.completed,
                    "previous": list(w.previous),
                }
                for w in self.workers
            ],
            "rejected": self.rejected,
        }


def observed(status: Mapping[str, Any]) -> dict[str, Any]:
    """A stored status in the model's terms. Asserts what every stored version must show: the
    counts the printer columns read, a state that follows from the lanes, the holder one of
    the lanes and the only one in stage gpu, one lane per pod."""
    workers = list(status.get("workers") or [])
    rows = []
    for w in workers:
        lanes = list(w.get("lanes") or [])
        holder = ((w.get("holder") or {}).get("pod") or {}).get("uid")
        uids = [lane["pod"]["uid"] for lane in lanes]
        assert len(set(uids)) == len(uids), f"{w['id']}: a pod with two lanes: {uids}"
        in_gpu = [lane["pod"]["uid"] for lane in lanes if lane["stage"] == "gpu"]
        assert in_gpu == ([holder] if holder else []), f"{w['id']}: {holder} holds, {in_gpu}"
        state = "gpu" if holder else "waiting" if lanes else "idle"
        assert w["state"] == state, f"{w['id']} is {w['state']}, its lanes say {state}"
        assert "since" in w, f"{w['id']} has no since"
        for lane in lanes:
            assert {"since", "priority"} <= lane.keys(), lane
            assert "heartbeat" not in lane, lane
        rows.append(
            {
                "id": w["id"],
                "gpu": w["gpu"]["uuid"],
                "lanes": [(x["pod"]["uid"], x["stage"], "readyAt" in x, x["priority"])
                          for x in lanes],
                "holder": holder,
                "completed": w.get("completed", 0),
                "previous": list(w.get("previousPodUIDs") or []),
            }
        )
    if workers:
        assert status["workerCount"] == len(workers)
        assert status["proving"] == sum(1 for row in rows if row["holder"])
        assert status["lanes"] == sum(len(row["lanes"]) for row in rows)
    return {"workers": rows, "rejected": status.get("staleWritesRejected", 0)}


# --- transitions -------------------------------------------------------------------------
@dataclass(frozen=True)
class Transition:
    """What turned one version into the next: the write's kind, and the lanes it removed."""

    kind: str
    removed: frozenset[str] = frozenset()


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _worker_change(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> Transition | None:
    """The one write that turns this worker's ``before`` (None: it is new) into ``after``."""
    b_lanes = {x["pod"]["uid"]: x for x in (before or {}).get("lanes") or []}
    a_lanes = {x["pod"]["uid"]: x for x in after.get("lanes") or []}
    b_order, a_order = list(b_lanes), list(a_lanes)
    b_holder = (((before or {}).get("holder") or {}).get("pod") or {}).get("uid")
    a_holder = ((after.get("holder") or {}).get("pod") or {}).get("uid")
    b_completed, a_completed = (before or {}).get("completed", 0), after.get("completed", 0)
    b_previous = list((before or {}).get("previousPodUIDs") or [])
    a_previous = list(after.get("previousPodUIDs") or [])
    if before is not None and before["gpu"]["uuid"] != after["gpu"]["uuid"]:
        return None

    def same(uid: str) -> bool:
        x, y = b_lanes[uid], a_lanes[uid]
        return (x["stage"], x.get("readyAt")) == (y["stage"], y.get("readyAt"))

    # A lane joined: appended, in a stage it may join in, nothing else changed.
    if a_order[:-1] == b_order and len(a_order) == len(b_order) + 1:
        new = a_lanes[a_order[-1]]
        unchanged = all(same(uid) for uid in b_order)
        if (
            unchanged and new["stage"] in JOIN_STAGES and "readyAt" not in new
            and (a_holder, a_completed, a_previous) == (b_holder, b_completed, b_previous)
        ):
            return Transition("join")
        return None
    if before is None:
        return None
    # Lanes left: a release (the prover's or the finalizer's: one lane, one completed at
    # most, nothing remembered) or the sweep (which remembers the holders it removes).
    if len(a_order) < len(b_order):
        removed = [uid for uid in b_order if uid not in a_lanes]
        if [uid for uid in b_order if uid in a_lanes] != a_order:
            return None
        if not all(same(uid) for uid in a_order):
            return None
        if a_holder != (None if b_holder in removed else b_holder):
            return None
        if not 0 <= a_completed - b_completed <= len(removed):
            return None
        if a_previous == b_previous and len(removed) == 1:
            return Transition("release", frozenset(removed))
        took = [b_holder] if b_holder in removed else []
        if a_previous == (took + [p for p in b_previous if p not in took])[:REMEMBERED]:
            return Transition("sweep", frozenset(removed))
        return None
    if a_order != b_order or (a_completed, a_previous) != (b_completed, b_previous):
        return None
    changed = [uid for uid in b_order if not same(uid)]
    if not changed:
        return Transition("mark") if a_holder == b_holder else None
    if len(changed) != 1:
        return None
    (uid,) = changed
    x, y = b_lanes[uid], a_lanes[uid]
    forward = STAGES.index(y["stage"]) > STAGES.index(x["stage"])
    if y["stage"] in REPORTED and forward and x.get("readyAt") == y.get("readyAt"):
        return Transition("stage") if a_holder == b_holder else None
    # Waiting: ready now, in synth_done (the acquire writes that stage, or keeps a later one).
    waits = y["stage"] == x["stage"] or (y["stage"] == "synth_done" and forward)
    if waits and "readyAt" not in x and "readyAt" in y:
        return Transition("acquire-wait") if a_holder == b_holder else None
    if (x["stage"], y["stage"], b_holder, a_holder) == ("gpu", "committing", uid, None):
        return Transition("release_gpu")
    if y["stage"] == "gpu" and "readyAt" not in y and (b_holder, a_holder) == (None, uid):
        # Granted: no other ready lane came first (priority, then readyAt, then arrival).
        since = _time(after["holder"].get("since"))
        mine = (-y["priority"], _time(x.get("readyAt")) or since, b_order.index(uid))
        for k, other in enumerate(b_lanes.values()):
            ready = _time(other.get("readyAt"))
            if other["pod"]["uid"] != uid and ready is not None and (
                (-other["priority"], ready, k) < mine
            ):
                return None
        return Transition("acquire-grant")
    return None


def explain(before: Mapping[str, Any], after: Mapping[str, Any]) -> Transition | None:
    """The one protocol write that turns stored status ``before`` into ``after`` (times
    aside), or None when no single write does: a lost update, a write applied to a version
    it did not read, a lane gone without a release."""
    b_workers = {w["id"]: w for w in before.get("workers") or []}
    a_workers = {w["id"]: w for w in after.get("workers") or []}
    b_stale, a_stale = before.get("staleWritesRejected", 0), after.get("staleWritesRejected", 0)
    if not set(b_workers) <= set(a_workers):
        return None
    if a_stale == b_stale + 1 and observed(after)["workers"] == observed(before)["workers"]:
        return Transition("stale")
    if a_stale != b_stale:
        return None
    changes = {}
    for worker_id, worker in a_workers.items():
        old = b_workers.get(worker_id)
        if old is not None and _abstract(old) == _abstract(worker):
            continue
        change = _worker_change(old, worker)
        if change is None:
            return None
        changes[worker_id] = change
    new = set(a_workers) - set(b_workers)
    if new:
        if len(new) != 1 or len(changes) != 1:
            return None
        added = a_workers[next(iter(new))]
        if added.get("id") != gpu_id(str((added.get("gpu") or {}).get("uuid") or "")):
            return None
    if not changes:
        return Transition("mark")
    if len(changes) == 1:
        return next(iter(changes.values()))
    # Only the sweep changes several workers at once, and only by removing lanes.
    if all(c.kind in ("release", "sweep") for c in changes.values()):
        return Transition("sweep", frozenset().union(*(c.removed for c in changes.values())))
    return None


def _abstract(worker: Mapping[str, Any]) -> Any:
    return observed({"workers": [worker], "workerCount": 1,
                     "proving": 1 if worker.get("holder") else 0,
                     "lanes": len(worker.get("lanes") or [])})["workers"]
