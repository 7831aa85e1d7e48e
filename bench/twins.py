"""The batch/v1 Indexed Job that is a ProofJob's twin, for benchmarks that race the two.

Why: a benchmark comparing kuzk's operator with the Job controller is only fair if both run
identical pods. The twin's pod template comes from kuzk's own pod builder
(``kuzk.operator.decide.pods.pod_manifest``): same command, image, env, GPU limit, ServiceAccount
and PriorityClass; only what a Job cannot know before it exists is taken from the Job's pods
instead: ``KUZK_PARTITION`` from the completion index and ``KUZK_JOB_UID`` from the Job
controller's ``controller-uid`` label. The labels naming a job, partition and attempt, the
finalizer and the owner reference stay off the twin (the Job controller owns its pods).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kuzk.contract import api
from kuzk.contract.proofjob import resolve
from kuzk.operator.decide.pods import PodSettings, pod_manifest

COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
CONTROLLER_UID = "metadata.labels['batch.kubernetes.io/controller-uid']"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
FROM_THE_JOB = {"KUZK_PARTITION": COMPLETION_INDEX, "KUZK_JOB_UID": CONTROLLER_UID}
PER_PARTITION = (api.LABEL_JOB, api.LABEL_PARTITION, api.LABEL_ATTEMPT)


def proofjob(name: str, proof_kind: str, *, partitions: int | None = None,
             deadline_s: int | None = None) -> dict[str, Any]:
    """A ProofJob manifest of ``proof_kind`` (partitions by kind unless given)."""
    spec: dict[str, Any] = {"proofKind": proof_kind, "sector": {"miner": 1234, "number": 5678}}
    if partitions is not None:
        spec["partitions"] = partitions
    if deadline_s is not None:
        spec["activeDeadlineSeconds"] = deadline_s
    return {"apiVersion": api.API_VERSION, "kind": api.PROOFJOB_KIND,
            "metadata": {"name": name}, "spec": spec}


def indexed_job(proof_job: Mapping[str, Any], namespace: str,
                settings: PodSettings) -> dict[str, Any]:
    """The Indexed Job twin of ``proof_job`` (a manifest) in ``namespace``."""
    as_stored = copy.deepcopy(dict(proof_job))
    as_stored["metadata"] = {**as_stored["metadata"], "namespace": namespace,
                             "uid": "set-from-the-job"}
    spec = resolve(as_stored)
    pod = pod_manifest(resolve(as_stored), 0, 1, settings)
    pod_spec = copy.deepcopy(pod["spec"])
    for container in pod_spec["containers"]:
        container["env"] = [
            {"name": e["name"], "valueFrom": {"fieldRef": {"fieldPath": FROM_THE_JOB[e["name"]]}}}
            if e["name"] in FROM_THE_JOB else e
            for e in container["env"]
        ]
    # The builder's labels but the job's and partition's: the Job controller adds its own.
    # Managed-by kuzk, the operator's worker sweep counts the twin's pods as live.
    labels = {k: v for k, v in pod["metadata"]["labels"].items() if k not in PER_PARTITION}
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.partitions,
        "parallelism": spec.partitions,
        "backoffLimitPerIndex": spec.backoff_limit_per_partition,
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": spec.name, "namespace": namespace}, "spec": job_spec}
