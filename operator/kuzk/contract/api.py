"""The kuzk API surface shared by the operator, the CRDs and the status server.

Names, label keys, the vocabulary of the status fields (job phases, partition states, worker
stages and outcomes, timestamps), the names of a partition's pods and what a pod's labels and
conditions say live here, once, so the CRD descriptions, the pod builder, the reconciler, the
worker protocol and the status server cannot disagree; so do the proof kinds and what each
implies (``PROOF_KINDS``). A ProofJob's own model (its spec and its resolution) is
``kuzk.contract.proofjob``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

GROUP = "kuzk.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

PROOFJOB_KIND = "ProofJob"
PROOFJOB_PLURAL = "proofjobs"
PROOFJOB_SINGULAR = "proofjob"
PROOFJOB_SHORT_NAME = "pj"
WORKERSTATUS_KIND = "WorkerStatus"
WORKERSTATUS_PLURAL = "workerstatuses"
WORKERSTATUS_SINGULAR = "workerstatus"
WORKERSTATUS_SHORT_NAME = "ws"
CATEGORY = "kuzk"
# The API server's paths of kuzk's resources.
API_PATH = f"/apis/{API_VERSION}"
WORKERSTATUSES_PATH = f"{API_PATH}/{WORKERSTATUS_PLURAL}"


def proofjob_path(namespace: str, name: str) -> str:
    """The API server's path of ProofJob ``namespace/name``."""
    return f"{API_PATH}/namespaces/{namespace}/{PROOFJOB_PLURAL}/{name}"


def pods_path(namespace: str, name: str = "") -> str:
    """The API server's path of namespace ``namespace``'s pods, or of pod ``name`` there."""
    return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")

FINALIZER = "kuzk.io/release-worker"

# --- the vocabulary of the status fields, one name for each word ----------------------------
# A ProofJob's ``status.phase``.
PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED, PHASE_FAILED, PHASE_SUSPENDED = (
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Suspended",
)
PHASES = (PHASE_PENDING, PHASE_RUNNING, PHASE_SUCCEEDED, PHASE_FAILED, PHASE_SUSPENDED)
FINISHED_PHASES = (PHASE_SUCCEEDED, PHASE_FAILED)
# A partition's ``state`` in the job's status, in the order a partition moves through it; the
# four middle ones are also the ``stage`` of its lane on its GPU. ``committing`` is the CPU
# work after the GPU phase: a partition is shown ``gpu`` only while its lane holds the GPU.
PENDING, SCHEDULED, SYNTHESIZING, SYNTH_DONE, GPU, COMMITTING, DONE, FAILED = (
    "pending",
    "scheduled",
    "synthesizing",
    "synth_done",
    "gpu",
    "committing",
    "done",
    "failed",
)
STATES = (PENDING, SCHEDULED, SYNTHESIZING, SYNTH_DONE, GPU, COMMITTING, DONE, FAILED)
STARTED_STATES = (SCHEDULED, SYNTHESIZING, SYNTH_DONE, GPU, COMMITTING)
TERMINAL_STATES = (DONE, FAILED)
WORKER_STAGES = (SYNTHESIZING, SYNTH_DONE, GPU, COMMITTING)
# How a worker's pod ended, as its release records it ("lost": the sweep found it gone).
WorkerOutcome = Literal["succeeded", "failed", "disrupted", "lost"]

LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB = "kuzk.io/job"
LABEL_PARTITION = "kuzk.io/partition"
LABEL_ATTEMPT = "kuzk.io/attempt"
LABEL_PROOF_KIND = "kuzk.io/proof-kind"
PROVER_APP = "kuzk-prover"
MANAGER = "kuzk"


# Kubernetes names: pods (and our label values) must stay valid DNS labels.
DNS_LABEL_MAX = 63
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN_MAX = 253
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_NAME_HASH_CHARS = 8


def is_dns_label(text: str) -> bool:
    """Whether ``text`` is a DNS-1123 label (a namespace's name, a pod's)."""
    return len(text) <= DNS_LABEL_MAX and _DNS_LABEL.fullmatch(text) is not None


def is_dns_subdomain(text: str) -> bool:
    """Whether ``text`` is a DNS-1123 subdomain (a ConfigMap's name)."""
    return len(text) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(text) is not None


def version() -> str:
    """kuzk's version, as installed (the package metadata), for --version and build info.
    ``importlib.metadata`` is imported here, not with the module: the stage names are read
    by every short-lived ``kuzk-lane`` call, which has no use for it."""
    import importlib.metadata

    try:
        return importlib.metadata.version("kuzk")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class KindDefaults:
    """What a proof kind implies when the spec does not say (the CRD says so too)."""

    partitions: int
    circuit_log2: int
    priority_class_name: str
    active_deadline_seconds: int | None


PROOF_KINDS: Mapping[str, KindDefaults] = MappingProxyType(
    {
        "winning-post": KindDefaults(1, 22, "kuzk-critical", 25),
        "window-post": KindDefaults(1, 27, "kuzk-high", 30 * 60),
        "snap-update": KindDefaults(16, 23, "kuzk-normal", None),
        "porep-c2": KindDefaults(10, 24, "kuzk-normal", None),
    }
)


def pod_name(job_name: str, partition: int, attempt: int) -> str:
    """The deterministic name of one partition attempt's pod: ``<job>-p<index>-a<attempt>``.

    When that is not a valid DNS label (too long, or the job name has dots) the job part is
    cut and suffixed with a hash of the full job name, so names stay unique and readable.
    """
    suffix = f"-p{partition}-a{attempt}"
    plain = job_name + suffix
    if is_dns_label(plain):
        return plain
    return _hashed(job_name, DNS_LABEL_MAX - len(suffix)) + suffix


def job_label_value(job_name: str) -> str:
    """The ``kuzk.io/job`` label value: the job's name, hashed down when over 63 characters."""
    if len(job_name) <= DNS_LABEL_MAX:
        return job_name
    return _hashed(job_name, DNS_LABEL_MAX)


def pod_partition(pod: Mapping[str, Any]) -> tuple[int, int] | None:
    """The (partition, attempt) a partition pod's labels name, or None when they name none:
    the one rule, for the operator and the status server, of which partition attempt a pod
    runs (which job's it is: its controller, ``observe.controller_of``)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    partition, attempt = labels.get(LABEL_PARTITION, ""), labels.get(LABEL_ATTEMPT, "")
    if not (partition.isdigit() and attempt.isdigit()) or int(attempt) < 1:
        return None
    return int(partition), int(attempt)


def pod_not_live_since(pod: Mapping[str, Any]) -> datetime | None:
    """Since when a running partition pod is not live: its Ready condition turned False after
    its containers started (its prover's readiness probe fails: it is stuck, and its liveness
    probe will soon have it killed; or its node stopped reporting). None while it is live,
    before it is first ready (a pod starting is not a stuck one), and once it has ended (its
    finalizer release frees its lane then). The one rule, for the operator's marks on lanes
    (``kuzk.contract.workerstatus.decisions.decide_sweep``) and every reader of them."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    ready = next((c for c in status.get("conditions") or []
                  if isinstance(c, Mapping) and c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "False":
        return None
    since = as_timestamp(ready.get("lastTransitionTime"))
    started = [as_timestamp(((c.get("state") or {}).get("running") or {}).get("startedAt"))
               for c in status.get("containerStatuses") or [] if isinstance(c, Mapping)]
    known = [t for t in started if t is not None]
    if since is None or not known or since <= max(known):
        return None
    return datetime.fromtimestamp(since, UTC)


def error_status(body: str | bytes | None) -> Mapping[str, Any]:
    """The API server's Status in the body of an error answer; {} when the body holds none."""
    try:
        status = json.loads(body or "{}")
    except ValueError:
        return {}
    return status if isinstance(status, Mapping) else {}


def format_time(moment: datetime, *, millis: bool = False) -> str:
    """An RFC 3339 UTC timestamp with a ``Z``: at the second precision of metav1.Time, or
    with ``millis`` at millisecond precision (WorkerStatus times, where busy stages show
    tenths of a second)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return (text[:-3] if millis else text[:-7]) + "Z"


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 timestamp as written by the API server."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def as_int(value: Any) -> int | None:
    """An integer field of a stored object; None where it is absent or not an integer."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_timestamp(value: Any) -> float | None:
    """A timestamp field of a stored object in seconds since the epoch; None where it is
    absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value).timestamp()
    except ValueError:
        return None


def _hashed(name: str, limit: int) -> str:
    digest = hashlib.sha256(name.encode()).hexdigest()[:_NAME_HASH_CHARS]
    keep = limit - len(digest) - 1
    prefix = re.sub(r"[^a-z0-9-]", "-", name[:keep]).strip("-")
    return f"{prefix}-{digest}" if prefix else digest


