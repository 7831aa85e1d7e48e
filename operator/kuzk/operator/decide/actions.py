"""What a reconcile decides: the actions for the handler layer to apply, and the new status.

The decision is data, so the pure reconciler can be tested exhaustively and the Kopf layer
stays a loop that applies it. Recommended order for the applier: write the status first (it
is the only durable memory), then create and delete pods, then release workers, then post
events, then delete the job. Every action is idempotent: creating a pod that exists
(409 AlreadyExists), deleting one that is gone (404) and releasing twice are all no-ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class CreatePod:
    """Create this partition attempt's pod, if absent (the name is deterministic)."""

    manifest: dict[str, Any]
    partition: int
    attempt: int

    @property
    def name(self) -> str:
        """The pod's name."""
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class Refusal:
    """What the API server answered a ``CreatePod`` it refused: the HTTP code and message."""

    code: int
    message: str


@dataclass(frozen=True)
class DeletePod:
    """Delete a pod; ``uid`` is the delete precondition, so a recreated namesake survives."""

    name: str
    uid: str
    reason: str


@dataclass(frozen=True)
class ReleaseWorker:
    """Release the worker still holding this pod's assignment, then drop the pod's finalizer.

    One action for both because the order matters: the ``kuzk.io/release-worker`` finalizer
    keeps the pod, and with it the assignment's identity (pod UID), until the release is done.
    The release is the guarded write of the worker protocol: a no-op when no worker on
    ``node`` holds ``pod_uid``. ``node`` is None for a pod that never reached a node; then only
    the finalizer is removed.
    """

    pod_name: str
    pod_uid: str
    node: str | None


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the ProofJob."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class DeleteJob:
    """Delete the ProofJob itself (ttlSecondsAfterFinished passed); GC removes its pods."""

    reason: str


Action = CreatePod | DeletePod | ReleaseWorker | Event | DeleteJob


@dataclass(frozen=True)
class Decision:
    """The outcome of one reconcile.

    ``status`` is the complete new ProofJob status. Every key of its objects (the status, its
    ``resolved`` and ``proof``) is present, with None for "unset", so a JSON merge patch clears
    what a replace would drop (the API server prunes nulls). List entries (partitions,
    conditions) leave unset fields out: a merge patch replaces a list whole.
    ``requeue_after`` is how many seconds until the job needs another look even if nothing
    changes (a deadline, a TTL, a deleting pod's grace period).
    """

    status: dict[str, Any]
    actions: list[Action] = field(default_factory=list)
    requeue_after: float | None = None

    def of_type(self, kind: type[T]) -> list[T]:
        """The actions of one type, in order."""
        return [action for action in self.actions if isinstance(action, kind)]

    @property
    def ttl_expired(self) -> bool:
        """Whether the job is finished and its ttlSecondsAfterFinished has passed."""
        return bool(self.of_type(DeleteJob))


def partition_event(type: Literal["Normal", "Warning"], reason: str, index: int, attempt: int,
                    text: str) -> Event:
    """An Event about one attempt of one partition: its message starts by naming them."""
    return Event(type, reason, f"partition {index} attempt {attempt} {text}")
