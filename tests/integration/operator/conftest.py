"""Operator fixtures: ``run_operator`` to start ``kuzk operator`` processes (with the stand-in
prover unless told otherwise), ``inprocess_operator`` to run the same handlers inside the test
process (so a test reaches the runtime and its client's transport), ``prover_account`` (the
prover's ServiceAccount bound to its ClusterRole) and ``plan`` (the folder that steers the
stand-in)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import kopf
import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.config import kube_config

from kuzk.contract import api
from kuzk.contract.proofjob import resolve
from kuzk.operator import startup
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from kuzk.operator.runtime import Runtime
from testenv.cluster import Cluster
from testenv.controlplane import stop_group
from testenv.waiting import wait_for

STANDIN = Path(__file__).parent / "standin.py"
# The partition pods of these tests, which run the stand-in prover.
STANDIN_SETTINGS = PodSettings(image="kuzk-standin:test")
T = TypeVar("T")


@dataclass
class Plan:
    """Steers the stand-in prover: what each partition attempt does."""

    dir: Path

    def set(self, **entries: dict[str, Any]) -> None:
        """``plan.set(**{"3:1": {"exit": 1}, "*": {"hold": True}})``"""
        (self.dir / "plan.json").write_text(json.dumps(entries))

    def go(self, pod: str = "all") -> None:
        (self.dir / "go").mkdir(exist_ok=True)
        (self.dir / "go" / pod).touch()

    def stage(self, pod: str, stage: str) -> None:
        """Move a holding stand-in that claimed its worker to ``stage``."""
        (self.dir / "stage").mkdir(exist_ok=True)
        tmp = self.dir / "stage" / f".{pod}.tmp"
        tmp.write_text(stage)
        tmp.rename(self.dir / "stage" / pod)

    def records(self, folder: str) -> list[dict[str, Any]]:
        path = self.dir / folder
        if not path.exists():
            return []
        return [json.loads(p.read_text()) for p in path.iterdir() if not p.name.startswith(".")]

    def started(self) -> list[str]:
        return sorted(r["pod"] for r in self.records("started"))


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    (tmp_path / "plan").mkdir()
    return Plan(tmp_path / "plan")


@dataclass
class OperatorProcess:
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_group(self.proc, sig, grace=20)

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def prover_account(kuzk_installed: Cluster, namespace: str) -> Iterator[Cluster]:
    """The ``kuzk-prover`` ServiceAccount in the test's namespace, bound to its ClusterRole."""
    cluster = kuzk_installed
    with contextlib.suppress(ApiException):
        cluster.core.create_namespaced_service_account(
            namespace, {"metadata": {"name": "kuzk-prover"}})
    rbac = client.RbacAuthorizationV1Api(cluster.api)
    binding = f"kuzk-prover-{namespace}"
    rbac.create_cluster_role_binding({
        "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "kuzk-prover"},
        "subjects": [{"kind": "ServiceAccount", "name": "kuzk-prover", "namespace": namespace}],
    })
    yield cluster
    rbac.delete_cluster_role_binding(binding)


def standin_command(plan: Plan) -> list[str]:
    return [sys.executable, str(STANDIN), str(plan.dir)]


@pytest.fixture
def run_operator(prover_account: Cluster, namespace: str, plan: Plan,
                 tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    cluster = prover_account
    started: list[OperatorProcess] = []

    def start(*extra: str, standalone: bool = True, namespaced: bool = True,
              scope_to: str | None = None, env: dict[str, str] | None = None
              ) -> OperatorProcess:
        """``scope_to``: the namespace it handles, if not the test's; ``env``: added to the
        cluster's (a KUBECONFIG of another identity, say)."""
        log = tmp_path / f"operator-{len(started)}.log"
        scope = (["--namespace", scope_to or namespace] if namespaced
                 else ["--all-namespaces"])
        argv = [
            sys.executable, "-m", "kuzk.cli", "operator", *scope,
            "--prover-command", json.dumps(standin_command(plan)),
            "--prover-image", STANDIN_SETTINGS.image,
            *(["--standalone"] if standalone else []), *extra,
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, env={**cluster.env(), **(env or {})}, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        op = OperatorProcess(proc, log)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()


@dataclass
class InProcessOperator:
    """kuzk's handlers run by ``kopf.operator`` on an event loop in a thread of the test."""

    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    memo: kopf.Memo
    stop_flag: threading.Event

    @property
    def runtime(self) -> Runtime:
        runtime = wait_for(lambda: self.memo.get("runtime"), 60, "the operator's startup")
        assert isinstance(runtime, Runtime)
        return runtime

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the operator's loop (where its state lives) and return its result."""
        async def run() -> T:
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def stop(self) -> None:
        self.stop_flag.set()
        self.thread.join(timeout=60)


@pytest.fixture
def inprocess_operator(
    prover_account: Cluster, namespace: str, plan: Plan, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[], InProcessOperator]]:
    """Start the operator inside the test process (standalone, the test's namespace, the
    stand-in prover), so a test can reach its runtime and its client's transport."""
    # The kubernetes client reads KUBECONFIG once, at import: point its default there.
    monkeypatch.setenv("KUBECONFIG", str(prover_account.plane.kubeconfig))
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION",
                        str(prover_account.plane.kubeconfig))
    started: list[InProcessOperator] = []

    def start() -> InProcessOperator:
        memo = startup.configure(replace(STANDIN_SETTINGS, command=tuple(standin_command(plan))),
                                 namespaces=(namespace,))
        loop, stop_flag = asyncio.new_event_loop(), threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(kopf.operator(
                standalone=True, namespaces=[namespace], memo=memo, stop_flag=stop_flag))
            loop.close()

        thread = threading.Thread(target=main, name="kuzk-operator", daemon=True)
        thread.start()
        op = InProcessOperator(loop, thread, memo, stop_flag)
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
    started.clear()


def proofjob(name: str, kind: str = "snap-update", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.PROOFJOB_KIND,
        "metadata": {"name": name},
        "spec": {"proofKind": kind, "sector": {"miner": 1234, "number": 5678}, **spec},
    }


def apply_job(cluster: Cluster, namespace: str, job: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(job))


def stored_job(cluster: Cluster, namespace: str, job: dict[str, Any]) -> dict[str, Any]:
    """``apply_job``, then the job as the API server stores it."""
    apply_job(cluster, namespace, job)
    stored = get_job(cluster, namespace, job["metadata"]["name"])
    assert stored is not None
    return stored


def get_job(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def wait_job(cluster: Cluster, namespace: str, name: str, phase: str,
             timeout: float = 120) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job = get_job(cluster, namespace, name)
        return job if job and (job.get("status") or {}).get("phase") == phase else None

    try:
        return wait_for(check, timeout, f"ProofJob {namespace}/{name} {phase}", interval=0.2)
    except TimeoutError as e:
        status = (get_job(cluster, namespace, name) or {}).get("status") or {}
        parts = [(p["index"], p["state"], p["attempt"], p.get("message"))
                 for p in status.get("partitions") or []]
        msg = f"{e}; phase {status.get('phase')}, partitions {parts}"
        raise TimeoutError(msg) from e


def bound_pod(cluster: Cluster, namespace: str, job: dict[str, Any], *,
              finalizer: bool = True) -> dict[str, Any]:
    """Partition 0's first pod of ``job`` as the operator would make it, created bound to a
    node no kubelet runs (live, never started), as the API server returned it; without its
    finalizer a delete removes it at once."""
    manifest = pod_manifest(resolve(job), 0, 1, STANDIN_SETTINGS)
    if not finalizer:
        manifest["metadata"].pop("finalizers", None)
    manifest["spec"]["nodeName"] = "nowhere"
    created = cluster.core.create_namespaced_pod(namespace, manifest)
    return dict(cluster.api.sanitize_for_serialization(created))


def condition(job: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in job.get("status", {}).get("conditions") or []:
        if c["type"] == ctype:
            return dict(c)
    return None


def job_pods(cluster: Cluster, namespace: str, name: str) -> list[client.V1Pod]:
    return list(cluster.core.list_namespaced_pod(
        namespace, label_selector=f"{api.LABEL_JOB}={api.job_label_value(name)}").items)
