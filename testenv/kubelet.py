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

A process's hostPath and PersistentVolumeClaim volumes are bind-mounted at their mountPaths
in a mount namespace of its own (``testenv/mounts.py``); its other files are not mounted,
and three things differ from a real kubelet: the termination-message file's path is given in
``TERMINATION_MESSAGE_PATH``, the ServiceAccount credentials come as ``KUBECONFIG`` instead
of the in-cluster token files, and each pod's temporary directory (a container's own
``/tmp``, not the host's shared one) is given in ``TMPDIR``. Each probe of a container runs
on its own schedule, as the kubelet's probe workers do: a slow exec probe does not hold back
the others.
Container restart back-off is 1 s doubling to 10 s (a real kubelet uses 10 s to 5 min).
A pod whose images are all in the local podman store, or served by a registry on this
machine's loopback (which it pulls them from with the pod's imagePullSecrets), runs as real
containers instead, with the real mounts and no such workarounds
(``testenv/containers.py``).

Like a real kubelet it rides out an API server outage: status updates, token requests and the
final delete try again until they get through (``ProcessKubelet.through_outage``), and the pod
watch relists, stopping the runners of pods deleted while it could not watch.

This module holds ``ProcessKubelet``: the nodes' registration and heartbeat, the pod watch
that starts and stops a runner per pod, and the GPUs each pod holds. The rest is in
``nodes.py`` (``NodeSpec``, the Node's status and lease), ``gpus.py`` (GPU UUIDs and
replicas), ``pods.py`` (``PodRunner``, one pod's containers as processes), ``env.py`` (the
containers' environment), ``probes.py`` (their probes) and ``kubeapi.py`` (timestamps).
Which failed calls are worth another try is kuzk's one rule, ``kuzk.contract.retry.is_transient``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kuzk.contract.retry import is_transient
from testenv.containers import ContainerRunner, runs_as_containers
from testenv.gpus import pick_replicas
from testenv.kubeapi import now
from testenv.nodes import (
    HEARTBEAT_SECONDS,
    NODE_STATUS_SECONDS,
    NodeSpec,
    node_status,
    register_node,
    renew_lease,
)
from testenv.pods import PodRunner

log = logging.getLogger("kuzk.testenv.kubelet")
T = TypeVar("T")


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
            register_node(self.core, spec, self.started)
            renew_lease(coord, spec)
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
                if not is_transient(error) or self.stopping.is_set():
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
    def _heartbeat(self) -> None:
        coord = client.CoordinationV1Api(self.api)
        reported = time.monotonic()
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            report = time.monotonic() - reported >= NODE_STATUS_SECONDS
            for spec in self.nodes.values():
                try:
                    renew_lease(coord, spec)
                    if report:
                        status = node_status(spec, self.started)
                        self.core.patch_node_status(spec.name, {"status": status})
                except Exception:  # the heartbeat must outlive a blip of the API server
                    log.exception("heartbeat of %s failed", spec.name)
            if report:
                reported = time.monotonic()

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


def _runner(kubelet: ProcessKubelet, pod: dict[str, Any]) -> PodRunner:
    """Containers for a pod whose images are all in the local podman store or on a loopback
    registry, else processes."""
    if runs_as_containers(pod):
        return ContainerRunner(kubelet, pod)
    return PodRunner(kubelet, pod)
