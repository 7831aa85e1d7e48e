"""The process kubelet's pod runner: ``PodRunner`` runs one pod's containers as local
processes to the end (restarts by ``restartPolicy`` with back-off, deletion with its grace
period) and reports the pod's status as a kubelet does; ``ContainerState`` is one container's
part of it. The environment it gives them is ``env.py``'s, the probes ``probes.py``'s, the
hostPath and claim volumes mounted for them ``mounts.py``'s: the pod waits in Pending until
they resolve, then its containers start."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.exceptions import ApiException

from testenv.env import PodEnvironment, expand
from testenv.gpus import AdmissionError
from testenv.kubeapi import now
from testenv.mounts import HostVolume, ProcessMounts
from testenv.probes import ContainerProbes

if TYPE_CHECKING:
    from testenv.kubelet import ProcessKubelet

log = logging.getLogger("kuzk.testenv.kubelet")

MESSAGE_LIMIT = 4096
FALLBACK_LOG_LINES = 80
FALLBACK_LOG_BYTES = 2048


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


class PodRunner(ContainerProbes, ProcessMounts, PodEnvironment, threading.Thread):
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
        # Set when a container exits or the pod is to be deleted: the run loop sleeps on it
        # instead of polling its processes (a node's hundreds of pods would wake it
        # thousands of times a second for nothing).
        self.changed = threading.Event()
        self.grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        self.containers: list[ContainerState] = [
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
        self.host_volumes: dict[str, HostVolume] = {}

    # --- control from the kubelet ------------------------------------------------------
    def request_delete(self, pod: dict[str, Any]) -> None:
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is not None:
            self.grace = float(grace)
        self.deleting.set()
        self.changed.set()

    def kill(self) -> None:
        self.killed.set()
        self.deleting.set()
        self.grace = 0
        self.changed.set()

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
                # The answer read as JSON, not as the client's models: decoding a pod into
                # them and back costs more CPU than the rest of the update.
                patched: Any = self.kubelet.through_outage(
                    what,
                    lambda: self.kubelet.core.patch_namespaced_pod_status(
                        self.name, self.namespace, {"status": self._status()},
                        _preload_content=False,
                    ),
                )
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
                if not (isinstance(e, ApiException) and e.status == 404):
                    log.warning("%s: %s", what, type(e).__name__)
                return
            self.pod = json.loads(patched.data)

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
        threading.Thread(target=self._await_exit, args=(c.proc,), daemon=True,
                         name=f"exit-{self.name}-{c.name}").start()
        threading.Thread(target=self._probe_loop, args=(c, c.proc), daemon=True).start()

    def _await_exit(self, proc: subprocess.Popen[bytes]) -> None:
        """Wake the run loop when the container's process exits (waitpid blocks without
        holding the GIL)."""
        proc.wait()
        self.changed.set()

    def _popen(self, c: ContainerState, env: dict[str, str]) -> subprocess.Popen[bytes]:
        argv = [expand(a, env) for a in (c.spec.get("command") or [])]
        argv += [expand(a, env) for a in (c.spec.get("args") or [])]
        if not argv:
            msg = "the process kubelet needs an explicit command (no image entrypoint)"
            raise ValueError(msg)
        argv, cwd = self._in_mount_namespace(c, env, argv, c.spec.get("workingDir") or
                                             str(self.dir))
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
        return bool(policy == "Always" or (policy == "OnFailure" and code != 0))

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
        except (AdmissionError, ApiException, ValueError) as e:
            self.phase, self.reason = "Failed", "UnexpectedAdmissionError"
            self.message = str(e) if not isinstance(e, ApiException) else (
                f"service account token: {e.status} {e.reason}")
            for c in self.containers:
                c.waiting = {"reason": "CreateContainerError", "message": self.message}
            self.push()
            return
        if not self._mount_volumes() or not self._pull_images():
            self._terminate()  # deleted while its volumes were awaited or its images pulled
            return
        with self.lock:
            for c in self.containers:
                self._spawn(c)
            self.phase = "Running"
        self.push()
        backoff: dict[str, float] = {}
        restart_at: dict[str, float] = {}
        while True:
            self.changed.clear()
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
            due = min(restart_at.values(), default=None)
            self.changed.wait(None if due is None else max(due - time.monotonic(), 0.0))
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
