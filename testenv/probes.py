"""Startup, liveness and readiness probes of a pod's containers: ``exec`` (a process with the
container's environment), ``httpGet`` and ``tcpSocket`` to the pod's address. Each probe of a
container runs on its own schedule, as the kubelet's probe workers do: a slow exec probe does
not hold back the others. ``ContainerProbes`` is the part of ``PodRunner`` that runs them."""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testenv.pods import ContainerState

log = logging.getLogger("kuzk.testenv.kubelet")


class ContainerProbes:
    """Runs the probes of a ``PodRunner``'s containers and acts on their results: a container
    is started and ready by them, or stopped when its liveness or startup probe fails."""

    name: str
    namespace: str
    dir: Path
    ip: str
    grace: float
    lock: threading.RLock
    deleting: threading.Event

    if TYPE_CHECKING:
        def _env(self, c: ContainerState) -> dict[str, str]: ...
        def push(self) -> None: ...
        def _stop_container(self, c: ContainerState, grace: float) -> None: ...

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
