"""A process kubelet: GPU nodes whose pods run as local processes.

It registers nodes with ``nvidia.com/gpu`` capacity (each GPU as ``NodeSpec.replicas``
time-slicing replicas, handed out least-loaded GPU first) and keeps them Ready, watches the pods
that kube-scheduler binds to them and runs each container's ``command`` + ``args`` as a
process in this Python environment, with the pod's env (values, downward API, ConfigMap and
Secret keys, ``$(VAR)`` expansion), its own 127.x.y.z address, fake GPU UUIDs in
``NVIDIA_VISIBLE_DEVICES`` and a kubeconfig holding a token for the pod's ServiceAccount,
requested bound to the Pod as a real kubelet does (so RBAC and the node-name claim are real).
It reports pod status as a kubelet does, runs probes, restarts containers by
``restartPolicy`` and honours deletion (SIGTERM, grace period, SIGKILL, then delete with
grace 0 so that the API server applies finalizers).

Three things differ from a real kubelet because a process cannot have files mounted at fixed
paths: the termination-message file's path is given in ``TERMINATION_MESSAGE_PATH``, the
ServiceAccount credentials come as ``KUBECONFIG`` instead of the in-cluster token files, and
each pod's temporary directory (a container's own ``/tmp``, not the host's shared one) is
given in ``TMPDIR``. Each probe of a container runs on its own schedule, as the kubelet's
probe workers do: a slow exec probe does not hold back the others.
Container restart back-off is 1 s doubling to 10 s (a real kubelet uses 10 s to 5 min).
A pod whose images are all in the local podman store, or served by a registry on this
machine's loopback (which it pulls them from with the pod's imagePullSecrets), runs as real
containers instead, with the real mounts and no such workarounds
(``testenv/containers.py``).

Like a real kubelet it rides out an API server outage: status updates, token requests and the
final delete try again until they get through (``ProcessKubelet.through_outage``), and the pod
watch relists, stopping the runners of pods deleted while it could not watch.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

log = logging.getLogger("kuzk.testenv.kubelet")
T = TypeVar("T")

GPU_RESOURCE = "nvidia.com/gpu"
HEARTBEAT_SECONDS = 10.0
# A real kubelet reports its node's status at least every 5 min, and at once when it differs
# from what is stored; this one reports every minute, so a node the node lifecycle controller
# marked NotReady (leases that lapsed while the API server was away) comes back.
NODE_STATUS_SECONDS = 60.0
MESSAGE_LIMIT = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: defined names are replaced, ``$$`` escapes ``$``,
    undefined references stay as written."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR.sub(sub, value)


def transient(error: BaseException) -> bool:
    """An API call that may succeed later: no connection, or a 5xx or 429 answer."""
    if isinstance(error, ApiException):
        code = int(error.status or 0)
        return code in (0, 429) or code >= 500
    return isinstance(error, urllib3.exceptions.HTTPError | OSError)


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.gpu{index}.kuzk-testenv"))


@dataclass
class NodeSpec:
    """A GPU node. With ``replicas`` N > 1 each physical GPU is advertised as N schedulable
    ``nvidia.com/gpu`` (the NVIDIA device plugin's time-slicing), and labelled as the GPU
    feature discovery labels a time-sliced node."""

    name: str
    gpus: int = 2
    cpu: str = "16"
    memory: str = "64Gi"
    pods: str = "110"
    labels: dict[str, str] = field(default_factory=dict)
    replicas: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1:
            msg = f"node {self.name}: replicas must be at least 1, not {self.replicas}"
            raise ValueError(msg)

    def gpu_uuids(self) -> list[str]:
        return [gpu_uuid(self.name, i) for i in range(self.gpus)]

    def gpu_labels(self) -> dict[str, str]:
        return {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(self.gpus),
            "nvidia.com/gpu.replicas": str(self.replicas),
            "nvidia.com/gpu.sharing-strategy": "time-slicing" if self.replicas > 1 else "none",
        }


def pick_replicas(
    uuids: list[str], in_use: Mapping[str, int], replicas: int, count: int
) -> list[str] | None:
    """``count`` GPU replicas for one pod, least-loaded GPU first (the device plugin's
    ``distributed`` policy; ties by GPU index), as the physical GPU UUID of each; None when
    fewer than ``count`` are free."""
    load = {uuid_: in_use.get(uuid_, 0) for uuid_ in uuids}
    picked: list[str] = []
    for _ in range(count):
        free = [u for u in uuids if load[u] < replicas]
        if not free:
            return None
        best = min(free, key=lambda u: (load[u], uuids.index(u)))
        load[best] += 1
        picked.append(best)
    return picked


class _Addresses:
    """Hands out one loopback address per pod (127.1.0.1 and up). Each kubelet starts at a
    random point, so that test sessions sharing a machine's loopback (pods that bind the same
    port on their own address) rarely meet."""

    def __init__(self) -> None:
        self._next = 1 + 256 * random.randrange(16384)
        self._lock = threading.Lock()

    def take(self) -> str:
        with self._lock:
            n = self._next
            self._next += 1
        return f"127.{1 + n // 65536}.{(n // 256) % 256}.{n % 256}"


class ProcessKubelet:
    """Runs the pods bound to ``nodes``. Start with ``start()``, end with ``stop()``."""

    def __init__(
        self,
        api: client.ApiClient,
        nodes: list[NodeSpec],
        workdir: Path,
        *,
        server: str,
        ca_cert: Path,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.nodes = {n.name: n for n in nodes}
        self.workdir = workdir
        self.server = server
        self.ca_cert = ca_cert
        self.addresses = _Addresses()
        self.runners: dict[str, PodRunner] = {}
        # UIDs whose runner has ended. A lagging watch can deliver a pod's old "Running" event
        # after its runner finished; a kubelet never starts the same pod twice.
        self.ended: set[str] = set()
        # node -> pod UID -> the physical GPU UUIDs of the replicas it holds
        self.gpus_in_use: dict[str, dict[str, list[str]]] = {n.name: {} for n in nodes}
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.started = now()

    # --- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        coord = client.CoordinationV1Api(self.api)
        for spec in self.nodes.values():
            self._register(spec)
            self._renew_lease(coord, spec)
        for target in (self._watch_pods, self._heartbeat):
            t = threading.Thread(target=target, name=f"kubelet-{target.__name__}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self, *, delete_nodes: bool = True) -> None:
        self.stopping.set()
        with self.lock:
            runners = list(self.runners.values())
        for r in runners:
            r.kill()
        for r in runners:
            r.join(timeout=15)
        if delete_nodes:
            self._release_pods()
            for name in self.nodes:
                with contextlib.suppress(ApiException):
                    self.core.delete_node(name)

    def _release_pods(self) -> None:
        """Force-delete what is still bound to these nodes, so no pod outlives its kubelet."""
        for name in self.nodes:
            try:
                pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
            except ApiException:
                continue
            for pod in pods.items:
                md = pod.metadata
                with contextlib.suppress(ApiException):
                    if md.finalizers:
                        self.core.patch_namespaced_pod(
                            md.name, md.namespace, {"metadata": {"finalizers": None}}
                        )
                    self.core.delete_namespaced_pod(md.name, md.namespace, grace_period_seconds=0)

    def through_outage(self, what: str, call: Callable[[], T]) -> T:
        """``call()``, tried again with backoff (0.2 s doubling to 2 s) for as long as it
        fails transiently, as a kubelet's status manager does; an error that is not
        transient, or any error once the kubelet stops, is raised."""
        delay, failures = 0.2, 0
        while True:
            try:
                result = call()
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
                if not transient(error) or self.stopping.is_set():
                    raise
                if failures == 0:
                    log.warning("%s: %s; trying again", what, type(error).__name__)
                failures += 1
            else:
                if failures:
                    log.info("%s went through after %d failed tries", what, failures)
                return result
            self.stopping.wait(delay)
            delay = min(delay * 2, 2.0)

    # --- nodes -------------------------------------------------------------------------
    def _node_status(self, spec: NodeSpec) -> dict[str, Any]:
        resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": spec.pods,
                     GPU_RESOURCE: str(spec.gpus * spec.replicas), "ephemeral-storage": "100Gi"}
        t = now()
        cond = [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "process kubelet is posting ready status"},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
        ]
        for c in cond:
            c.update(lastHeartbeatTime=t, lastTransitionTime=self.started)
        return {
            "capacity": resources,
            "allocatable": resources,
            "conditions": cond,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                          {"type": "Hostname", "address": spec.name}],
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux", "osImage": "kuzk testenv",
                "kernelVersion": os.uname().release, "kubeletVersion": "process-kubelet",
                "kubeProxyVersion": "", "containerRuntimeVersion": "process://1",
                "machineID": spec.name, "systemUUID": spec.name, "bootID": spec.name,
            },
        }

    def _register(self, spec: NodeSpec) -> None:
        labels = {
            "kubernetes.io/hostname": spec.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **spec.gpu_labels(),
            **spec.labels,
        }
        body = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": spec.name, "labels": labels}}
        try:
            self.core.create_node(body)
        except ApiException as e:
            if e.status != 409:
                raise
            self.core.patch_node(spec.name, {"metadata": {"labels": labels}})
        self.core.patch_node_status(spec.name, {"status": self._node_status(spec)})

    def _heartbeat(self) -> None:
        coord = client.CoordinationV1Api(self.api)
        reported = time.monotonic()
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            report = time.monotonic() - reported >= NODE_STATUS_SECONDS
            for spec in self.nodes.values():
                try:
                    self._renew_lease(coord, spec)
                    if report:
                        self.core.patch_node_status(spec.name, {"status": self._node_status(spec)})
                except Exception:  # the heartbeat must outlive a blip of the API server
                    log.exception("heartbeat of %s failed", spec.name)
            if report:
                reported = time.monotonic()

    @staticmethod
    def _renew_lease(coord: client.CoordinationV1Api, spec: NodeSpec) -> None:
        renew = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            coord.patch_namespaced_lease(spec.name, "kube-node-lease",
                                         {"spec": {"renewTime": renew}})
        except ApiException as e:
            if e.status != 404:
                raise
            coord.create_namespaced_lease("kube-node-lease", {
                "metadata": {"name": spec.name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": spec.name, "leaseDurationSeconds": 40,
                         "renewTime": renew},
            })

    # --- pods --------------------------------------------------------------------------
    def _watch_pods(self) -> None:
        while not self.stopping.is_set():
            try:
                pods = self.core.list_pod_for_all_namespaces()
                listed: set[str] = set()
                for pod in pods.items:
                    listed.add(pod.metadata.uid)
                    self._on_pod(self.api.sanitize_for_serialization(pod))
                self._kill_unlisted(listed)
                rv = pods.metadata.resource_version
                w = watch.Watch()
                for ev in w.stream(self.core.list_pod_for_all_namespaces, resource_version=rv,
                                   timeout_seconds=30, _request_timeout=40):
                    if self.stopping.is_set():
                        w.stop()
                        break
                    obj = ev["raw_object"]
                    if ev["type"] == "DELETED":
                        self._on_deleted(obj)
                    elif ev["type"] in ("ADDED", "MODIFIED"):
                        self._on_pod(obj)
            except Exception:  # relist after any watch failure (expired RV, API restart)
                if not self.stopping.is_set():
                    log.debug("pod watch restarted", exc_info=True)
                    self.stopping.wait(0.5)

    def _on_pod(self, pod: dict[str, Any]) -> None:
        node = pod.get("spec", {}).get("nodeName")
        if node not in self.nodes:
            return
        uid = pod["metadata"]["uid"]
        with self.lock:
            runner = self.runners.get(uid)
            if runner is None:
                if uid in self.ended or pod.get("status", {}).get("phase") in (
                    "Succeeded", "Failed"
                ):
                    if pod["metadata"].get("deletionTimestamp"):
                        self._finish_delete(pod)
                    return
                if self.stopping.is_set():
                    return
                runner = _runner(self, pod)
                self.runners[uid] = runner
                runner.start()
        if pod["metadata"].get("deletionTimestamp"):
            runner.request_delete(pod)

    def _kill_unlisted(self, listed: set[str]) -> None:
        """Stop the runners of pods that are gone: deleted while the watch was down, so no
        DELETED event will ever come for them."""
        with self.lock:
            gone = [r for uid, r in self.runners.items() if uid not in listed]
        for runner in gone:
            log.info("pod %s/%s is gone from the API server; stopping it", runner.namespace,
                     runner.name)
            runner.kill()

    def _on_deleted(self, pod: dict[str, Any]) -> None:
        with self.lock:
            runner = self.runners.get(pod["metadata"]["uid"])
        if runner is not None:
            runner.kill()

    def _finish_delete(self, pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError, OSError):
            self.through_outage(f"delete of {md['namespace']}/{md['name']}", lambda: (
                self.core.delete_namespaced_pod(
                    md["name"], md["namespace"], grace_period_seconds=0,
                    body=client.V1DeleteOptions(
                        grace_period_seconds=0,
                        preconditions=client.V1Preconditions(uid=md["uid"]),
                    ),
                )
            ))

    def forget(self, uid: str) -> None:
        with self.lock:
            self.runners.pop(uid, None)
            self.ended.add(uid)

    # --- GPUs --------------------------------------------------------------------------
    def allocate_gpus(self, node: str, uid: str, count: int) -> list[str] | None:
        """``count`` replicas for pod ``uid``, least-loaded GPU first; the distinct physical
        GPU UUIDs they are on (the container's NVIDIA_VISIBLE_DEVICES), or None."""
        with self.lock:
            held = self.gpus_in_use[node]
            spec = self.nodes[node]
            load = Counter(g for gpus in held.values() for g in gpus)
            picked = pick_replicas(spec.gpu_uuids(), load, spec.replicas, count)
            if picked is None:
                return None
            held[uid] = picked
            return list(dict.fromkeys(picked))

    def release_gpus(self, node: str, uid: str) -> None:
        with self.lock:
            self.gpus_in_use[node].pop(uid, None)


def _requested_gpus(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod["spec"].get("containers", []):
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(
            GPU_RESOURCE
        )
        total += int(value or 0)
    return total


@dataclass
class ContainerState:
    spec: dict[str, Any]
    log: Path
    message_file: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    terminated: dict[str, Any] | None = None
    last_terminated: dict[str, Any] | None = None
    waiting: dict[str, Any] | None = None
    killed_by_liveness: bool = False

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def status(self) -> dict[str, Any]:
        if self.terminated is not None:
            state: dict[str, Any] = {"terminated": self.terminated}
        elif self.proc is not None:
            state = {"running": {"startedAt": self.started_at}}
        else:
            state = {"waiting": self.waiting or {"reason": "ContainerCreating"}}
        out = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "containerID": f"process://{self.proc.pid}" if self.proc else "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": {"terminated": self.last_terminated} if self.last_terminated else {},
        }
        return out


class PodRunner(threading.Thread):
    """Runs one pod's containers to the end, then reports the terminal status."""

    def __init__(self, kubelet: ProcessKubelet, pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        super().__init__(name=f"pod-{md['namespace']}/{md['name']}", daemon=True)
        self.kubelet = kubelet
        self.pod = pod
        self.uid: str = md["uid"]
        self.name: str = md["name"]
        self.namespace: str = md["namespace"]
        self.node: str = pod["spec"]["nodeName"]
        self.dir = kubelet.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid[:8]}"
        self.ip = kubelet.addresses.take()
        self.start_time = now()
        self.lock = threading.RLock()
        self.push_lock = threading.Lock()  # one status update at a time, the newest last
        self.deleting = threading.Event()
        self.killed = threading.Event()
        self.grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        self.containers = [
            ContainerState(
                c,
                self.dir / f"{c['name']}.log",
                self.dir / f"{c['name']}.termination-log",
            )
            for c in pod["spec"].get("containers", [])
        ]
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.gpus: list[str] = []
        self.base_env: dict[str, str] = {}

    # --- control from the kubelet ------------------------------------------------------
    def request_delete(self, pod: dict[str, Any]) -> None:
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is not None:
            self.grace = float(grace)
        self.deleting.set()

    def kill(self) -> None:
        self.killed.set()
        self.deleting.set()
        self.grace = 0

    # --- status ------------------------------------------------------------------------
    def _conditions(self) -> list[dict[str, Any]]:
        t = now()
        all_ready = bool(self.containers) and all(c.ready for c in self.containers)
        started = self.phase != "Pending" or any(c.proc for c in self.containers)
        existing = {c["type"]: c for c in self.pod.get("status", {}).get("conditions") or []}
        want = {
            "PodReadyToStartContainers": started,
            "Initialized": True,
            "ContainersReady": all_ready,
            "Ready": all_ready,
        }
        out = []
        for ctype, ok in want.items():
            status = "True" if ok else "False"
            prev = existing.get(ctype)
            # A condition first reported dates from the pod's start, as the kubelet's first
            # status of a pod (sent before its containers start) does.
            ltt = (self.start_time if prev is None
                   else prev["lastTransitionTime"] if prev.get("status") == status else t)
            cond = {"type": ctype, "status": status, "lastTransitionTime": ltt}
            if not ok and ctype in ("ContainersReady", "Ready"):
                cond["reason"] = "PodCompleted" if self.phase in ("Succeeded", "Failed") else (
                    "ContainersNotReady")
            out.append(cond)
        return out

    def _status(self) -> dict[str, Any]:
        with self.lock:
            return {
                "phase": self.phase,
                "conditions": self._conditions(),
                "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}],
                "podIP": self.ip,
                "podIPs": [{"ip": self.ip}],
                "startTime": self.start_time,
                "containerStatuses": [c.status() for c in self.containers],
                "reason": self.reason,
                "message": self.message,
            }

    def push(self) -> None:
        """Report the pod's status, trying again through an API outage; every try sends the
        status as it is then, so the last update to land is the newest."""
        what = f"status of {self.namespace}/{self.name}"
        with self.push_lock:
            try:
                patched = self.kubelet.through_outage(
                    what,
                    lambda: self.kubelet.core.patch_namespaced_pod_status(
                        self.name, self.namespace, {"status": self._status()}
                    ),
                )
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
                if not (isinstance(e, ApiException) and e.status == 404):
                    log.warning("%s: %s", what, type(e).__name__)
                return
            self.pod = self.kubelet.api.sanitize_for_serialization(patched)

    # --- environment -------------------------------------------------------------------
    def _field(self, path: str) -> str:
        md, spec = self.pod["metadata"], self.pod["spec"]
        simple = {
            "metadata.name": md["name"],
            "metadata.namespace": md["namespace"],
            "metadata.uid": md["uid"],
            "spec.nodeName": spec.get("nodeName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
            "status.podIP": self.ip,
            "status.podIPs": self.ip,
            "status.hostIP": "127.0.0.1",
            "status.hostIPs": "127.0.0.1",
        }
        if path in simple:
            return simple[path]
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return str((md.get(m.group(1)) or {}).get(m.group(2), ""))
        msg = f"unsupported fieldRef {path!r}"
        raise ValueError(msg)

    def _key_ref(self, kind: str, ref: dict[str, Any]) -> str | None:
        try:
            core, what = self.kubelet.core, f"{kind} {self.namespace}/{ref['name']}"
            if kind == "configMapKeyRef":
                cm = self.kubelet.through_outage(
                    what, lambda: core.read_namespaced_config_map(ref["name"], self.namespace)
                )
                data = cm.data
            else:
                raw = self.kubelet.through_outage(
                    what, lambda: core.read_namespaced_secret(ref["name"], self.namespace)
                ).data
                data = {k: base64.b64decode(v).decode() for k, v in (raw or {}).items()}
        except ApiException:
            data = None
        value = (data or {}).get(ref["key"])
        if value is None and not ref.get("optional"):
            msg = f"{kind} {ref.get('name')}/{ref.get('key')} not found"
            raise ValueError(msg)
        return value

    def _resource_ref(self, container: dict[str, Any], ref: dict[str, Any]) -> str:
        kind, _, name = ref["resource"].partition(".")
        value = ((container.get("resources") or {}).get(kind) or {}).get(name, "0")
        return str(value)

    def _env(self, c: ContainerState) -> dict[str, str]:
        env = dict(self.base_env)
        env["TERMINATION_MESSAGE_PATH"] = str(c.message_file)
        for item in c.spec.get("env") or []:
            name = item["name"]
            if "value" in item:
                env[name] = expand(str(item.get("value") or ""), env)
                continue
            src = item.get("valueFrom") or {}
            if "fieldRef" in src:
                env[name] = self._field(src["fieldRef"]["fieldPath"])
            elif "resourceFieldRef" in src:
                env[name] = self._resource_ref(c.spec, src["resourceFieldRef"])
            else:
                for kind in ("configMapKeyRef", "secretKeyRef"):
                    if kind in src:
                        value = self._key_ref(kind, src[kind])
                        if value is not None:
                            env[name] = value
            if name not in env:
                env[name] = ""
        return env

    def _service_account_kubeconfig(self) -> Path | None:
        spec = self.pod["spec"]
        if spec.get("automountServiceAccountToken") is False:
            return None
        sa = spec.get("serviceAccountName") or "default"
        req = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=3600,
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=self.name, uid=self.uid
                ),
            )
        )
        token = self.kubelet.through_outage(
            f"token for {self.namespace}/{sa}",
            lambda: self.kubelet.core.create_namespaced_service_account_token(
                sa, self.namespace, req
            ),
        ).status.token
        path = self.dir / "kubeconfig"
        kc = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "in-cluster", "cluster": {
                "server": self.kubelet.server,
                "certificate-authority": str(self.kubelet.ca_cert)}}],
            "users": [{"name": f"system:serviceaccount:{self.namespace}:{sa}",
                       "user": {"token": token}}],
            "contexts": [{"name": "in-cluster", "context": {
                "cluster": "in-cluster", "namespace": self.namespace,
                "user": f"system:serviceaccount:{self.namespace}:{sa}"}}],
            "current-context": "in-cluster",
        }
        path.write_text(yaml.safe_dump(kc))
        path.chmod(0o600)
        return path

    def _prepare(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "PYTEST"))}
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["HOSTNAME"] = self.name
        tmp = self.dir / "tmp"
        tmp.mkdir(exist_ok=True)
        env["TMPDIR"] = str(tmp)
        gpus = _requested_gpus(self.pod)
        if gpus:
            got = self.kubelet.allocate_gpus(self.node, self.uid, gpus)
            if got is None:
                msg = f"Allocate failed: requested {gpus} {GPU_RESOURCE}, none free on {self.node}"
                raise _AdmissionError(msg)
            self.gpus = got
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(got)
        kubeconfig = self._service_account_kubeconfig()
        if kubeconfig:
            env["KUBECONFIG"] = str(kubeconfig)
        self.base_env = env

    # --- running -----------------------------------------------------------------------
    def _pull_images(self) -> bool:
        """Make the containers' images present; False if the pod is deleted first. Processes
        need none."""
        return True

    def _spawn(self, c: ContainerState) -> None:
        c.message_file.write_bytes(b"")
        c.terminated = None
        c.ready = False
        c.started = False
        c.killed_by_liveness = False
        try:
            c.proc = self._popen(c, self._env(c))
        except (OSError, ValueError) as e:
            c.proc = None
            c.terminated = {
                "exitCode": 128, "reason": "StartError", "message": f"failed to start: {e}",
                "startedAt": now(), "finishedAt": now(),
            }
            return
        c.started_at = now()
        if not c.spec.get("startupProbe"):
            c.started = True
        if not c.spec.get("readinessProbe"):
            c.ready = True
        threading.Thread(target=self._probe_loop, args=(c, c.proc), daemon=True).start()

    def _popen(self, c: ContainerState, env: dict[str, str]) -> subprocess.Popen[bytes]:
        argv = [expand(a, env) for a in (c.spec.get("command") or [])]
        argv += [expand(a, env) for a in (c.spec.get("args") or [])]
        if not argv:
            msg = "the process kubelet needs an explicit command (no image entrypoint)"
            raise ValueError(msg)
        cwd = c.spec.get("workingDir") or str(self.dir)
        with c.log.open("ab") as out:
            return subprocess.Popen(
                argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def _message(self, c: ContainerState, exit_code: int) -> str:
        try:
            text = c.message_file.read_bytes()[:MESSAGE_LIMIT].decode(errors="replace")
        except FileNotFoundError:
            text = ""
        if not text and exit_code != 0 and (
            c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError"
        ):
            try:
                lines = c.log.read_bytes().decode(errors="replace").splitlines()
            except FileNotFoundError:
                lines = []
            text = "\n".join(lines[-FALLBACK_LOG_LINES:])[-FALLBACK_LOG_BYTES:]
        return text

    def _reap(self, c: ContainerState) -> bool:
        """Record a container's exit; True if it has exited."""
        if c.proc is None or c.proc.poll() is None:
            return False
        code = c.proc.returncode
        code = 128 - code if code < 0 else code
        term: dict[str, Any] = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.started_at,
            "finishedAt": now(),
            "containerID": f"process://{c.proc.pid}",
        }
        message = self._message(c, code)
        if message:
            term["message"] = message
        c.terminated = term
        c.proc = None
        c.ready = False
        return True

    def _signal(self, c: ContainerState, sig: int) -> None:
        if c.proc is not None and c.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.proc.pid, sig)

    def _stop_container(self, c: ContainerState, grace: float) -> None:
        proc = c.proc  # the run loop may reap it (c.proc = None) while this waits
        self._signal(c, signal.SIGTERM)
        if proc is None:
            return
        try:
            proc.wait(timeout=max(grace, 0))
        except subprocess.TimeoutExpired:
            self._signal(c, signal.SIGKILL)
            proc.wait()

    def _should_restart(self, c: ContainerState) -> bool:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        code = (c.terminated or {}).get("exitCode", 0)
        return policy == "Always" or (policy == "OnFailure" and code != 0)

    def run(self) -> None:
        try:
            self._run()
        except Exception:
            log.exception("pod %s/%s", self.namespace, self.name)
        finally:
            self.kubelet.release_gpus(self.node, self.uid)
            self.kubelet.forget(self.uid)

    def _run(self) -> None:
        try:
            self._prepare()
        except (_AdmissionError, ApiException, ValueError) as e:
            self.phase, self.reason = "Failed", "UnexpectedAdmissionError"
            self.message = str(e) if not isinstance(e, ApiException) else (
                f"service account token: {e.status} {e.reason}")
            for c in self.containers:
                c.waiting = {"reason": "CreateContainerError", "message": self.message}
            self.push()
            return
        if not self._pull_images():
            self._terminate()  # deleted while its images were pulled
            return
        with self.lock:
            for c in self.containers:
                self._spawn(c)
            self.phase = "Running"
        self.push()
        backoff: dict[str, float] = {}
        restart_at: dict[str, float] = {}
        while True:
            changed = False
            with self.lock:
                for c in self.containers:
                    if self._reap(c):
                        changed = True
                        if not self.deleting.is_set() and self._should_restart(c):
                            delay = backoff.get(c.name, 1.0)
                            backoff[c.name] = min(delay * 2, 10.0)
                            restart_at[c.name] = time.monotonic() + delay
                            c.waiting = {"reason": "CrashLoopBackOff",
                                         "message": f"back-off {delay:.0f}s restarting"}
                    due = restart_at.get(c.name)
                    if due is not None and time.monotonic() >= due and not self.deleting.is_set():
                        del restart_at[c.name]
                        c.last_terminated = c.terminated
                        c.restart_count += 1
                        self._spawn(c)
                        changed = True
                running = any(c.proc is not None for c in self.containers)
            if changed:
                self.push()
            if self.deleting.is_set():
                self._terminate()
                return
            if not running and not restart_at:
                break
            self.deleting.wait(0.1)
        self._finish()

    def _finish(self) -> None:
        # Free the GPUs before the terminal status is visible: the scheduler may bind the next
        # pod to them as soon as it sees this one finished.
        self.kubelet.release_gpus(self.node, self.uid)
        codes = [(c.terminated or {}).get("exitCode", 1) for c in self.containers]
        self.phase = "Succeeded" if all(code == 0 for code in codes) else "Failed"
        self.push()

    def _terminate(self) -> None:
        grace = 0.0 if self.killed.is_set() else self.grace
        with self.lock:
            containers = list(self.containers)
        stoppers = [threading.Thread(target=self._stop_container, args=(c, grace)) for c in
                    containers]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join()
        with self.lock:
            for c in containers:
                self._reap(c)
                if c.terminated is None:
                    c.terminated = {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                    "message": "the container was never started",
                                    "startedAt": None, "finishedAt": now()}
        if self.killed.is_set() and self.kubelet.stopping.is_set():
            return
        self._finish()
        self.kubelet._finish_delete(self.pod)

    # --- probes ------------------------------------------------------------------------
    def _probe_once(self, c: ContainerState, probe: dict[str, Any]) -> bool:
        timeout = float(probe.get("timeoutSeconds", 1))
        if "exec" in probe:
            try:
                r = subprocess.run(probe["exec"]["command"], env=self._env(c), timeout=timeout,
                                   capture_output=True, cwd=str(self.dir))
            except (OSError, subprocess.TimeoutExpired):
                return False
            return r.returncode == 0
        if "httpGet" in probe:
            h = probe["httpGet"]
            port = self._port(c, h["port"])
            host = h.get("host") or self.ip
            url = f"{h.get('scheme', 'HTTP').lower()}://{host}:{port}{h.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=timeout) as r:
                    return 200 <= r.status < 400
            except urllib.error.HTTPError as e:
                return 200 <= e.code < 400
            except (urllib.error.URLError, OSError):
                return False
        if "tcpSocket" in probe:
            t = probe["tcpSocket"]
            try:
                with socket.create_connection(
                    (t.get("host") or self.ip, self._port(c, t["port"])), timeout=timeout
                ):
                    return True
            except OSError:
                return False
        return True

    def _port(self, c: ContainerState, port: int | str) -> int:
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in c.spec.get("ports") or []:
            if p.get("name") == port:
                return int(p["containerPort"])
        msg = f"named port {port!r} not found in container {c.name}"
        raise ValueError(msg)

    def _probe_loop(self, c: ContainerState, proc: subprocess.Popen[bytes]) -> None:
        """A worker per probe of the container, like the kubelet's prober workers."""
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            if c.spec.get(kind):
                threading.Thread(target=self._probe_worker, args=(c, proc, kind, c.spec[kind]),
                                 name=f"probe-{self.name}-{kind}", daemon=True).start()

    def _probe_worker(self, c: ContainerState, proc: subprocess.Popen[bytes], kind: str,
                      probe: dict[str, Any]) -> None:
        counter = [0, 0]  # successes, failures in a row
        t0 = time.monotonic()
        last = -1e9
        while proc.poll() is None and not self.deleting.is_set():
            t = time.monotonic()
            due = (c.started != (kind == "startupProbe")
                   and t - t0 >= float(probe.get("initialDelaySeconds", 0))
                   and t - last >= float(probe.get("periodSeconds", 10)))
            if due:
                last = t
                self._apply_probe(c, proc, kind, probe, counter)
            if kind == "startupProbe" and c.started:
                return
            self.deleting.wait(0.05)

    def _apply_probe(self, c: ContainerState, proc: subprocess.Popen[bytes], kind: str,
                     probe: dict[str, Any], counter: list[int]) -> None:
        try:
            ok = self._probe_once(c, probe)
        except ValueError:
            ok = False
        if ok:
            counter[0], counter[1] = counter[0] + 1, 0
        else:
            counter[0], counter[1] = 0, counter[1] + 1
        success = counter[0] >= int(probe.get("successThreshold", 1))
        failure = counter[1] >= int(probe.get("failureThreshold", 3))
        if kind == "startupProbe" and success:
            with self.lock:
                c.started = True
                if not c.spec.get("readinessProbe"):
                    c.ready = True
            self.push()
        elif kind == "readinessProbe" and (success or failure):
            want = success
            if c.ready != want:
                with self.lock:
                    c.ready = want
                self.push()
        elif kind in ("livenessProbe", "startupProbe") and failure and proc.poll() is None:
            log.info("%s/%s container %s failed %s, killing", self.namespace, self.name,
                     c.name, kind)
            c.killed_by_liveness = True
            grace = probe.get("terminationGracePeriodSeconds", self.grace)
            threading.Thread(target=self._stop_container, args=(c, float(grace)),
                             daemon=True).start()
            counter[1] = 0


def _runner(kubelet: ProcessKubelet, pod: dict[str, Any]) -> PodRunner:
    """Containers for a pod whose images are all in the local podman store or on a loopback
    registry, else processes."""
    from testenv import containers  # it builds on PodRunner, so it imports this module

    if containers.runs_as_containers(pod):
        return containers.ContainerRunner(kubelet, pod)
    return PodRunner(kubelet, pod)


class _AdmissionError(Exception):
    """The kubelet cannot admit the pod (for example no free GPU)."""
