"""Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on 127.0.0.1.

Every component gets free ports, its own log file and is waited on through its health
endpoint, never a sleep. ``stop()`` ends every process it started (SIGTERM, then SIGKILL), so
no stray process outlives a test session; ``atexit`` covers an interpreter that exits early.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testenv import binaries, pki

CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
    "node-lifecycle-controller",
    "resourcequota-controller",
    # Binds claims to volumes. The API server puts a protection finalizer on every claim and
    # volume; without the two protection controllers neither (nor its namespace) is ever
    # deleted.
    "persistentvolume-binder-controller",
    "persistentvolumeclaim-protection-controller",
    "persistentvolume-protection-controller",
)


class StartError(RuntimeError):
    """A component did not become healthy; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM,
               grace: float = 10) -> None:
    """End a process started with ``start_new_session``, and its children: ``sig``, then
    SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    health_url: str
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class ControlPlane:
    """One control plane. Use as a context manager or call start()/stop()."""

    workdir: Path | None = None
    with_scheduler: bool = True
    with_controller_manager: bool = True
    # An audit policy (audit.k8s.io/v1 Policy as a dict): kube-apiserver then writes JSON
    # audit events to ``audit_log`` (benchmarks count a client's requests from it).
    audit_policy: dict[str, object] | None = None
    # API priority and fairness, on in a real cluster: off for the tests, whose few clients
    # never queue; on for the fleet benchmark, whose hundreds of clients (kubelets, provers,
    # controllers) a real API server classifies into priority levels, each with its share.
    fairness: bool = False
    components: list[Component] = field(default_factory=list)
    server: str = ""
    kubeconfig: Path = Path()
    _owns_workdir: bool = False

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- start -------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> None:
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="kuzk-testenv-"))
            self._owns_workdir = True
        wd = self.workdir
        certs = pki.create(wd / "pki")
        self.pki = certs
        bins = {n: binaries.find(n) for n in ("etcd", "kube-apiserver")}
        etcd_client, etcd_peer, api_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{api_port}"
        self.kubeconfig = wd / "admin.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(self.admin_kubeconfig()))
        atexit.register(self.stop)

        etcd = Component(
            "etcd",
            [
                str(bins["etcd"]),
                f"--data-dir={wd / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
                "--quota-backend-bytes=4294967296",
            ],
            wd / "etcd.log",
            f"http://127.0.0.1:{etcd_client}/health",
        )
        apiserver = Component(
            "kube-apiserver",
            [
                str(bins["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{etcd_client}",
                f"--secure-port={api_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--cert-dir={wd / 'apiserver-certs'}",
                f"--tls-cert-file={certs.serving_cert}",
                f"--tls-private-key-file={certs.serving_key}",
                f"--client-ca-file={certs.ca_cert}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={certs.sa_pub}",
                f"--service-account-signing-key-file={certs.sa_key}",
                f"--service-cluster-ip-range={pki.SERVICE_IP.rsplit('.', 1)[0]}.0/24",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                f"--enable-priority-and-fairness={str(self.fairness).lower()}",
                # Lets the tests' ``nodes`` fixture keep a namespace's pods on that test's
                # nodes (the namespace's scheduler.alpha.kubernetes.io/node-selector).
                "--enable-admission-plugins=PodNodeSelector",
                "--v=1",
                *self._audit_flags(),
            ],
            wd / "kube-apiserver.log",
            f"{self.server}/readyz",
        )
        self.components = [etcd, apiserver]
        deadline = time.monotonic() + timeout
        self._launch(etcd, deadline)
        self._launch(apiserver, deadline)
        later: list[Component] = []
        if self.with_controller_manager:
            later.append(self._kcm(free_port()))
        if self.with_scheduler:
            later.append(self._scheduler(free_port()))
        for comp in later:
            self.components.append(comp)
            self._spawn(comp)
        for comp in later:
            self._wait(comp, deadline)

    @property
    def audit_log(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "audit.log"

    def _audit_flags(self) -> list[str]:
        if self.audit_policy is None:
            return []
        assert self.workdir is not None
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(self.audit_policy))
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=4096",  # MB; not rotated during a run, so one file holds all
        ]

    def _kcm(self, port: int) -> Component:
        return self._control_loop("kube-controller-manager", "kcm", port, [
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca_cert}",
            "--use-service-account-credentials=false",
            "--concurrent-gc-syncs=5",
            "--node-monitor-period=1s",
            # Every controller shares one client here; at the default 20 requests/s the
            # namespace and garbage collectors of a test's teardown delay the next test's
            # node lifecycle (the not-ready taint stays) and Job syncs.
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--terminated-pod-gc-threshold=1000",
            # A claim made before its volume is bound at the binder's next resync of every
            # claim (15 s by default), not when the volume is made.
            "--pvclaimbinder-sync-period=2s",
        ])

    def _scheduler(self, port: int) -> Component:
        return self._control_loop("kube-scheduler", "scheduler", port, [])

    def _control_loop(self, name: str, short: str, port: int, extra: list[str]) -> Component:
        """kube-controller-manager or kube-scheduler: admin kubeconfig, no leader election,
        health on a free port of 127.0.0.1."""
        assert self.workdir is not None
        kc = str(self.kubeconfig)
        return Component(
            name,
            [
                str(binaries.find(name)),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / (short + '-certs')}",
                *extra,
                "--v=1",
            ],
            self.workdir / f"{name}.log",
            f"https://127.0.0.1:{port}/healthz",
        )

    def _spawn(self, comp: Component) -> None:
        with comp.log.open("ab") as log:
            comp.proc = subprocess.Popen(
                comp.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _launch(self, comp: Component, deadline: float) -> None:
        self._spawn(comp)
        self._wait(comp, deadline)

    def _healthy(self, comp: Component) -> bool:
        ctx = None
        if comp.health_url.startswith("https"):
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # kcm/scheduler serve self-signed certs
            ctx.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        try:
            with urllib.request.urlopen(comp.health_url, timeout=2, context=ctx) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    def _wait(self, comp: Component, deadline: float) -> None:
        assert comp.proc is not None
        delay = 0.05
        while time.monotonic() < deadline:
            if comp.proc.poll() is not None:
                msg = (
                    f"{comp.name} exited with {comp.proc.returncode} during start; "
                    f"last lines of {comp.log}:\n{tail(comp.log)}"
                )
                self.stop()
                raise StartError(msg)
            if self._healthy(comp):
                return
            time.sleep(delay)  # polling interval of a condition wait, not synchronisation
            delay = min(delay * 1.5, 0.5)
        msg = (
            f"{comp.name} not healthy at {comp.health_url}; "
            f"last lines of {comp.log}:\n{tail(comp.log)}"
        )
        self.stop()
        raise StartError(msg)

    # --- faults ------------------------------------------------------------------------
    def component(self, name: str) -> Component:
        for comp in self.components:
            if comp.name == name:
                return comp
        msg = f"no component {name!r} in this control plane"
        raise KeyError(msg)

    @contextlib.contextmanager
    def apiserver_down(self, timeout: float = 60.0) -> Iterator[None]:
        """Stop kube-apiserver (SIGTERM, as a rolling restart does) for the body of the
        ``with``, then start it again on the same port and wait until it is ready. Clients
        see refused connections meanwhile; etcd keeps every object.

        kube-controller-manager and kube-scheduler are restarted once it is back: their
        informers otherwise resume after a backoff of up to a minute, so a later test's node
        stayed tainted not-ready, or its pod unscheduled (or bound to a deleted node), for that
        long. What is tested here is kuzk's and the kubelet's ride through the outage, not
        those components'."""
        comp = self.component("kube-apiserver")
        assert comp.proc is not None
        stop_group(comp.proc)
        try:
            yield
        finally:
            self._spawn(comp)
            deadline = time.monotonic() + timeout
            self._wait(comp, deadline)
            loops = [c for c in self.components
                     if c.name in ("kube-controller-manager", "kube-scheduler")]
            for loop in loops:
                if loop.proc is not None:
                    stop_group(loop.proc)
                self._spawn(loop)
            for loop in loops:
                self._wait(loop, deadline)

    # --- kubeconfigs -------------------------------------------------------------------
    def admin_kubeconfig(self) -> dict[str, object]:
        return self.kubeconfig_for(
            "kuzk-admin",
            {
                "client-certificate": str(self.pki.admin_cert),
                "client-key": str(self.pki.admin_key),
            },
        )

    def kubeconfig_for(self, user: str, credentials: dict[str, str]) -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "kuzk-testenv",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki.ca_cert),
                    },
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {"name": "kuzk-testenv", "context": {"cluster": "kuzk-testenv", "user": user}}
            ],
            "current-context": "kuzk-testenv",
        }

    # --- stop --------------------------------------------------------------------------
    def stop(self) -> None:
        for comp in reversed(self.components):
            if comp.proc is not None:
                stop_group(comp.proc)
        keep = os.environ.get("KUZK_KEEP_TESTENV")
        if self._owns_workdir and self.workdir is not None and not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.components = []
