"""The partition pod manifest: the contract between the operator and any prover image.

This module is the contract's only writer, so the reconciler, the tests and a replacement
prover image all read one definition; the names both sides share (the env, the exit codes,
the termination message) are ``kuzk.contract.pod``'s.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kuzk.contract import api, filecoin, pod, proofjob
from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE

CONTAINER_NAME = "prover"
KERNEL_CACHE_VOLUME = "kernel-cache"
KERNEL_CACHE_DIR = "/var/cache/kuzk"
CUPY_CACHE_DIR = f"{KERNEL_CACHE_DIR}/cupy"
# The container's /tmp (its root filesystem is read-only): the prover's pulse file lives there.
TMP_VOLUME, TMP_DIR = "tmp", "/tmp"
# Whether the prover is alive is its pod's to say, not a write's: its pulse (a beat every 2 s,
# ``kuzk_prover.alive``) answered over HTTP on the pod's address (``kuzk_prover.probes``; the
# kubelet starts no process for it). Not ready once the pulse is 10 s old (two failures 5 s
# apart: the operator marks its lane not live). Killed once it is 30 s old: three failures
# 10 s apart, each waiting up to 10 s for an answer (a stopped prover gives none), then 5 s of
# grace, so that SIGKILL comes at most 65 s after a running prover stopped (55 s after the
# start of one that stops in its first 20 s), and the finalizer release frees the GPU phase
# it held. A live prover answers in microseconds and beats every 2 s, so only a pulse that
# stood still for 30 s, or three answers missing 10 s each, kill it: a busy CPU delays both
# by far less. The liveness probe starts 20 s after the container (``LIVE_AFTER_S``): a
# prover that has not answered by its third probe, 40 s after its start, is killed (its start
# takes seconds: importing kuzk-prover took 3.3-3.7 s on this project's two-core machine
# beside eight busy loops). No startup probe: it would give the same grace
# at the cost of one more update of every pod's status (its containers' ``started``), which
# the kubelet writes and every watcher of the pod, the operator first, reads.
PROBE_PORT_NAME = "alive"
EXEC_PROBES = "exec"
HTTP_PROBES = "http"
PROBE_KINDS = (HTTP_PROBES, EXEC_PROBES)
LIVE_AFTER_S = 20
READINESS_PROBE: dict[str, Any] = {
    "periodSeconds": 5,
    "timeoutSeconds": 5,
    "failureThreshold": 2,
}
LIVENESS_PROBE: dict[str, Any] = {
    "initialDelaySeconds": LIVE_AFTER_S,
    "periodSeconds": 10,
    "timeoutSeconds": 10,
    "failureThreshold": 3,
    "terminationGracePeriodSeconds": 5,
}
# The pulse's age each probe allows, in seconds.
READY_WITHIN_S, LIVE_WITHIN_S = 10, 30
# The Pod Security Standards' "restricted" level, which partition pods meet: they run as the
# image's non-root user with nothing writable but a kernel cache and /tmp.
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


@dataclass(frozen=True)
class PodSettings:
    """Operator-wide settings for partition pods (flags of ``kuzk operator``)."""

    image: str
    command: Sequence[str] = ("kuzk-prover",)
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    service_account_name: str = "kuzk-prover"
    # A node directory that keeps CuPy's compiled kernels for every prover pod of the node;
    # None keeps them in an emptyDir, for the pod's life only. Set by the administrator only:
    # a ProofJob cannot name a node path.
    kernel_cache_host_path: str | None = None
    # What a ProofJob may choose (an image entry ending in * is a prefix); empty: anything.
    allowed_images: tuple[str, ...] = ()
    allowed_priority_classes: tuple[str, ...] = ()
    # The format of the prover's log lines (kuzk.contract.logs), the operator's own.
    log_format: str = "text"
    # Secrets (of the ProofJob's namespace) the kubelet pulls the prover image with; empty:
    # none on the pod (the prover ServiceAccount's own, if any, then apply).
    image_pull_secrets: tuple[str, ...] = ()
    # How the kubelet asks whether the prover is alive: HTTP_PROBES (the prover or the lane
    # agent answers on the pod's address) or EXEC_PROBES (``kuzk-alive`` run in the container
    # for each probe: a process each time, for a prover image that cannot answer over HTTP).
    probes: str = HTTP_PROBES
    # The command of a real proof's partition pods (``spec.filecoin``): the real prover under
    # the lane agent, which reports its stages. A ProofJob cannot choose it.
    filecoin_command: Sequence[str] = filecoin.PROVER_COMMAND
    # The node directory holding filecoin-proofs' Groth16 parameters (paramfetch's layout),
    # mounted read-only into real proofs' pods; it must exist on the node (the pod waits with
    # a FailedMount Event until it does). Set by the administrator only.
    filecoin_parameters_host_path: str = filecoin.PARAMETERS_HOST_PATH

    def rejections(self, job: Mapping[str, Any]) -> list[str]:
        """Why the ProofJob's own choices are not allowed (the same messages as the chart's
        admission policy); empty when they are. Defaults the operator fills in always are."""
        prover = (job.get("spec") or {}).get("prover") or {}
        found = []
        image = prover.get("image")
        if image and self.allowed_images and not any(
                image.startswith(a[:-1]) if a.endswith("*") else image == a
                for a in self.allowed_images):
            found.append(f"spec.prover.image '{image}' is not allowed; allowed images:"
                         f" {', '.join(self.allowed_images)} (an entry ending in * is a prefix)")
        cls = prover.get("priorityClassName")
        if cls and self.allowed_priority_classes and cls not in self.allowed_priority_classes:
            found.append(f"spec.prover.priorityClassName '{cls}' is not allowed; allowed"
                         f" classes: {', '.join(self.allowed_priority_classes)}")
        return found


def pod_manifest(
    spec: proofjob.JobSpec, partition: int, attempt: int, settings: PodSettings
) -> dict[str, Any]:
    """The manifest of one partition attempt's pod for an already resolved job."""
    if not 0 <= partition < spec.partitions:
        msg = f"partition {partition} is outside 0..{spec.partitions - 1} of job {spec.name}"
        raise ValueError(msg)
    if attempt < 1:
        msg = f"attempt must be at least 1, got {attempt}"
        raise ValueError(msg)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": settings.service_account_name,
        "priorityClassName": spec.priority_class_name,
        "enableServiceLinks": False,
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "containers": [_container(spec, partition, attempt, settings)],
        "volumes": [kernel_cache_volume(settings), {"name": TMP_VOLUME, "emptyDir": {}}],
    }
    if spec.filecoin is not None:
        pod_spec["volumes"] += filecoin_volumes(spec.filecoin, settings)
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    if spec.node_selector is not None:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations is not None:
        pod_spec["tolerations"] = [dict(toleration) for toleration in spec.tolerations]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": api.pod_name(spec.name, partition, attempt),
            "namespace": spec.namespace,
            "labels": pod_labels(spec, partition, attempt),
            "ownerReferences": [
                {
                    "apiVersion": api.API_VERSION,
                    "kind": api.PROOFJOB_KIND,
                    "name": spec.name,
                    "uid": spec.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": [api.FINALIZER],
        },
        "spec": pod_spec,
    }


def pod_labels(spec: proofjob.JobSpec, partition: int, attempt: int) -> dict[str, str]:
    """The labels that identify a partition pod; the reconciler reads them back."""
    return {
        api.LABEL_NAME: api.PROVER_APP,
        api.LABEL_MANAGED_BY: api.MANAGER,
        api.LABEL_JOB: api.job_label_value(spec.name),
        api.LABEL_PARTITION: str(partition),
        api.LABEL_ATTEMPT: str(attempt),
        api.LABEL_PROOF_KIND: spec.proof_kind,
    }


def kernel_cache_volume(settings: PodSettings) -> dict[str, Any]:
    """Where CuPy keeps its compiled kernels: the node directory the operator names
    (compiled once per node), else an emptyDir (once per pod)."""
    host_path = settings.kernel_cache_host_path
    if host_path:
        source = {"hostPath": {"path": host_path, "type": "DirectoryOrCreate"}}
    else:
        source = {"emptyDir": {}}
    return {"name": KERNEL_CACHE_VOLUME, **source}


def filecoin_volumes(real: filecoin.FilecoinSpec, settings: PodSettings) -> list[dict[str, Any]]:
    """A real proof's volumes: the job's sectors (its claim) and the node's parameters, both
    mounted read-only."""
    return [
        {"name": filecoin.SECTORS_VOLUME,
         "persistentVolumeClaim": {"claimName": real.claim_name, "readOnly": True}},
        {"name": filecoin.PARAMETERS_VOLUME,
         "hostPath": {"path": settings.filecoin_parameters_host_path, "type": "Directory"}},
    ]


def probes(kind: str) -> dict[str, Any]:
    """The prover container's probes (``PROBE_KINDS``), with the port they ask on when they
    ask over HTTP."""
    if kind not in PROBE_KINDS:
        msg = f"probes must be one of {', '.join(PROBE_KINDS)}, not {kind!r}"
        raise ValueError(msg)

    def asking(within: int) -> dict[str, Any]:
        if kind == EXEC_PROBES:
            return {"exec": {"command": ["kuzk-alive", "--within", str(within)]}}
        return {"httpGet": {"path": f"{pod.ALIVE_PATH}?{pod.ALIVE_WITHIN}={within}",
                            "port": PROBE_PORT_NAME}}

    found: dict[str, Any] = {
        "readinessProbe": {**asking(READY_WITHIN_S), **READINESS_PROBE},
        "livenessProbe": {**asking(LIVE_WITHIN_S), **LIVENESS_PROBE},
    }
    if kind == HTTP_PROBES:
        found["ports"] = [{"name": PROBE_PORT_NAME, "containerPort": pod.ALIVE_PORT,
                           "protocol": "TCP"}]
    return found


def prover_input(spec: proofjob.JobSpec, partition: int) -> dict[str, Any]:
    """What ``pod.INPUT_ENV`` carries: everything a prover needs to rebuild a partition, and
    a real proof's inputs of this partition."""
    values: dict[str, Any] = {
        "sector": {"miner": spec.sector.miner, "number": spec.sector.number},
        "randomness": spec.randomness,
        "circuitLog2": spec.circuit_log2,
        "partitions": spec.partitions,
    }
    if spec.filecoin is not None:
        values[pod.FILECOIN_INPUT_KEY] = spec.filecoin.prover_input(
            spec.proof_kind, spec.sector.miner, spec.randomness, partition)
    return values


def _container(
    spec: proofjob.JobSpec, partition: int, attempt: int, settings: PodSettings
) -> dict[str, Any]:
    overrides = spec.resources
    limits = {settings.gpu_resource: "1", **(overrides.get("limits") or {})}
    requests = dict(overrides.get("requests") or {})
    if spec.filecoin is not None and "memory" not in requests and "memory" not in limits:
        # A real proof asks for its kind's memory, so a node runs no more than it holds.
        requests["memory"] = spec.filecoin.memory_request(spec.proof_kind)
    resources: dict[str, Any] = {"limits": limits}
    if requests:
        resources["requests"] = requests
    values = {
        pod.JOB_ENV: spec.name,
        pod.JOB_UID_ENV: spec.uid,
        pod.PARTITION_ENV: str(partition),
        pod.ATTEMPT_ENV: str(attempt),
        pod.PROOF_KIND_ENV: spec.proof_kind,
        pod.PRIORITY_CLASS_ENV: spec.priority_class_name,
        pod.INPUT_ENV: json.dumps(prover_input(spec, partition), sort_keys=True,
                                  separators=(",", ":")),
        pod.CUPY_CACHE_DIR_ENV: CUPY_CACHE_DIR,
        pod.LOG_FORMAT_ENV: settings.log_format,
    }
    mounts: list[dict[str, Any]] = [{"name": KERNEL_CACHE_VOLUME, "mountPath": KERNEL_CACHE_DIR},
              {"name": TMP_VOLUME, "mountPath": TMP_DIR}]
    command = settings.command
    if spec.filecoin is not None:
        values[pod.PARAMETER_CACHE_ENV] = filecoin.PARAMETERS_MOUNT
        mounts += [
            {"name": filecoin.SECTORS_VOLUME, "mountPath": filecoin.SECTORS_MOUNT,
             "readOnly": True},
            {"name": filecoin.PARAMETERS_VOLUME, "mountPath": filecoin.PARAMETERS_MOUNT,
             "readOnly": True},
        ]
        command = settings.filecoin_command
    fields = {
        pod.POD_NAME_ENV: "metadata.name",
        pod.POD_UID_ENV: "metadata.uid",
        pod.POD_NAMESPACE_ENV: "metadata.namespace",
        pod.NODE_NAME_ENV: "spec.nodeName",
        pod.POD_IP_ENV: "status.podIP",
    }
    env: list[dict[str, Any]] = [{"name": name, "value": value} for name, value in values.items()]
    env += [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in fields.items()
    ]
    return {
        "name": CONTAINER_NAME,
        "image": spec.image or settings.image,
        "command": list(command),
        "env": env,
        "resources": resources,
        "volumeMounts": mounts,
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
        **probes(settings.probes),
        "terminationMessagePath": pod.TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
