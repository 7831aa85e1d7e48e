"""Startup, liveness and readiness probes of a pod's containers: ``exec`` (a process with the
container's environment), ``httpGet`` and ``tcpSocket`` to the pod's address. Each probe of a
container runs on its own schedule, as the kubelet's probe workers do: a slow exec probe does
not hold back the others, and a worker sleeps until its probe is due. A container that a probe
has killed gets the kubelet's ``Killing`` Event. ``ContainerProbes`` is the part of
``PodRunner`` that runs them."""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testenv.pods import ContainerState

log = logging.getLogger("kuzk.testenv.kubelet")
# The reason of the Event the kubelet posts when a probe has it kill a container (its words).
KILLING = "Killing"
# The kubelet does not verify an HTTPS probe's certificate.
_UNVERIFIED = ssl.create_default_context()
_UNVERIFIED.check_hostname = False
_UNVERIFIED.verify_mode = ssl.CERT_NONE


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
        def _post_event(self, kind: str, reason: str, message: str,
                        field_path: str | None = None) -> str | None: ...
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
            # As the kubelet asks: straight to the pod, no proxy, no redirect followed.
            connection = (http.client.HTTPSConnection(
                host, port, timeout=timeout, context=_UNVERIFIED)
                if h.get("scheme", "HTTP").upper() == "HTTPS"
                else http.client.HTTPConnection(host, port, timeout=timeout))
            try:
                connection.request("GET", h.get("path", "/"), headers={
                    "User-Agent": "kube-probe/1.31", "Accept": "*/*"})
                return 200 <= connection.getresponse().status < 400
            except (http.client.HTTPException, OSError):
                return False
            finally:
                connection.close()
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
        """A worker per probe of the container, like the kubelet's prober workers: the startup
        probe's first, the liveness and readiness probes' once it has succeeded."""
        if c.spec.get("startupProbe"):
            self._start_worker(c, proc, "startupProbe")
            return
        for kind in ("livenessProbe", "readinessProbe"):
            if c.spec.get(kind):
                self._start_worker(c, proc, kind)

    def _start_worker(self, c: ContainerState, proc: subprocess.Popen[bytes], kind: str) -> None:
        threading.Thread(target=self._probe_worker, args=(c, proc, kind, c.spec[kind]),
                         name=f"probe-{self.name}-{kind}", daemon=True).start()

    def _probe_worker(self, c: ContainerState, proc: subprocess.Popen[bytes], kind: str,
                      probe: dict[str, Any]) -> None:
        """Probes every ``periodSeconds`` (from the start of one probe to the next) after
        ``initialDelaySeconds``, sleeping in between: a node's hundreds of probe workers cost
        nothing while they wait. Ends with the container, or with the startup probe's success
        (which starts the liveness and readiness workers)."""
        counter = [0, 0]  # successes, failures in a row
        due = time.monotonic() + float(probe.get("initialDelaySeconds", 0))
        while proc.poll() is None and not self.deleting.is_set():
            wait = due - time.monotonic()
            if wait > 0:
                self.deleting.wait(wait)
                continue
            due = time.monotonic() + float(probe.get("periodSeconds", 10))
            self._apply_probe(c, proc, kind, probe, counter)
            if kind == "startupProbe" and c.started:
                for then in ("livenessProbe", "readinessProbe"):
                    if c.spec.get(then) and proc.poll() is None:
                        self._start_worker(c, proc, then)
                return

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
        elif (kind in ("livenessProbe", "startupProbe") and failure and proc.poll() is None
              and not c.killed_by_liveness):
            log.info("%s/%s container %s failed %s, killing", self.namespace, self.name,
                     c.name, kind)
            c.killed_by_liveness = True
            probe_name = "liveness" if kind == "livenessProbe" else "startup"
            self._post_event("Normal", KILLING, f"Container {c.name} failed {probe_name}"
                             " probe, will be restarted", f"spec.containers{{{c.name}}}")
            grace = probe.get("terminationGracePeriodSeconds", self.grace)
            threading.Thread(target=self._stop_container, args=(c, float(grace)),
                             daemon=True).start()
            counter[1] = 0
