"""The user's whole path, in order, through real helm, kubectl, HTTP and a real Prometheus:

1. ``helm install`` into a fresh namespace: both Deployments Available, every pod under its own
   ServiceAccount; a second release installs beside it without a name collision.
2. ``kubectl apply -f`` of every example (circuitLog2 lowered in edited copies): every job
   Succeeds; ``kubectl get pj`` and ``kubectl get ws`` print their columns; ``/status`` of each
   status-server replica agrees with the API objects.
3. A real Prometheus finds the replicas through kubernetes_sd_configs (role pod, a token with
   only the discovery grant) and their annotations, scrapes them at their pod IPs, and its
   answers (and the README's PromQL queries) agree with ``/status`` and the objects.
4. ``helm upgrade`` of the operator's log format while a job runs: the rollout finishes, the
   job completes with no partition proved twice, finished jobs are untouched.
5. RBAC is minimal: ``kubectl auth can-i`` denials and real calls with each ServiceAccount's
   token.
6. ``helm uninstall`` removes everything the chart made; no pod is left on the release
   finalizer, and a ProofJob left behind can still be deleted.

The steps share one release (a module fixture) and run in file order. Pods run in the process
kubelet as local processes, so the chart gets the local ``kuzk``/``kuzk-prover`` commands and
the status server listens on its pod's own address (every pod shares the host's network).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client, watch

from kuzk.contract import api, crds, ledger
from kuzk.contract.logs import KEYS
from testenv import prometheus
from testenv.cluster import Cluster
from testenv.kubelet import ProcessKubelet
from testenv.nodes import NodeSpec
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, get_job, job_pods, proofjob, wait_job

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kuzk"
EXAMPLES = ROOT / "examples"
BIN = Path(sys.executable).parent
RELEASE = "kz"
OPERATOR, STATUS = f"{RELEASE}-kuzk-operator", f"{RELEASE}-kuzk-status"
CIRCUIT_LOG2 = 10  # the examples' sizes would take hours on a CPU
INSTANCE = "app.kubernetes.io/instance"
# The release pulls through a private registry: every pod it makes names these Secrets (the
# process kubelet runs commands, so nothing is pulled; the pod specs carry them all the same).
PULL_SECRETS = ["regcred"]
PROVER_PULL_SECRETS = ["gpu-registry"]


@dataclass
class Release:
    cluster: Cluster
    namespace: str
    kubelet: ProcessKubelet
    workdir: Path
    finished: dict[str, Any] = field(default_factory=dict)


def chart_values(namespace: str) -> list[str]:
    """The process kubelet runs commands, not images: point the chart at the local CLIs."""
    return [
        "--set", "image.repository=kuzk", "--set", "image.tag=test",
        "--set-json", f"command={json.dumps([str(BIN / 'kuzk')])}",
        "--set-json", f"prover.command={json.dumps([str(BIN / 'kuzk-prover')])}",
        "--set", "operator.peeringLifetime=5",
        "--set-json", f"operator.watchNamespaces={json.dumps([namespace])}",
        "--set", "statusServer.listenAddress=$(POD_IP)",
        "--set", "statusServer.keepFinished=1h",
    ]


def helm(r: Release, *args: str) -> str:
    """Run helm; on failure, say what the release's pods were doing (status and log tails)."""
    out = r.cluster.helm(*args, check=False)
    if out.returncode == 0:
        return out.stdout
    report = [f"helm {' '.join(args)} exited {out.returncode}: {out.stderr.strip()}",
              r.cluster.kubectl("get", "pods,deployments", "-n", r.namespace, "-o", "wide",
                                check=False).stdout]
    for log in sorted(r.kubelet.workdir.glob(f"pods/{r.namespace}_*/*.log")):
        lines = log.read_text(errors="replace").splitlines()[-8:]
        report += [f"--- {log.parent.name}/{log.name}", *lines]
    raise AssertionError("\n".join(report))


def _drop_namespace(cluster: Cluster, namespace: str) -> None:
    for pod in cluster.core.list_namespaced_pod(namespace).items:
        if pod.metadata.finalizers:
            cluster.core.patch_namespaced_pod(pod.metadata.name, namespace,
                                              {"metadata": {"finalizers": None}})
    cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def release(kuzk_installed: Cluster, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Release]:
    cluster = kuzk_installed
    suffix = uuid.uuid4().hex[:5]
    namespace = f"e2e-{suffix}"
    cluster.kubectl("create", "namespace", namespace)
    specs = [NodeSpec(f"e2e-{suffix}-n{i}", gpus=2) for i in range(2)]
    with cluster.kubelet(specs) as kubelet:
        for spec in specs:
            cluster.kubectl("wait", "--for=condition=Ready", f"node/{spec.name}",
                            "--timeout=30s")
        yield Release(cluster, namespace, kubelet, tmp_path_factory.mktemp("e2e"))
        cluster.helm("uninstall", RELEASE, "-n", namespace, "--wait", check=False)
        _drop_namespace(cluster, namespace)


def status_pods(r: Release) -> list[client.V1Pod]:
    return [p for p in r.cluster.core.list_namespaced_pod(
        r.namespace, label_selector="app.kubernetes.io/name=kuzk-status-server").items
        if p.status.pod_ip and not p.metadata.deletion_timestamp]


def get_status(pod: client.V1Pod) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:9821/status", timeout=10) as resp:
        return dict(json.load(resp))


def jobs(r: Release) -> list[dict[str, Any]]:
    return list(client.CustomObjectsApi(r.cluster.api).list_namespaced_custom_object(
        api.GROUP, api.VERSION, r.namespace, api.PROOFJOB_PLURAL)["items"])


def workerstatuses(r: Release, *, ours: bool = True) -> list[dict[str, Any]]:
    items = client.CustomObjectsApi(r.cluster.api).list_cluster_custom_object(
        api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL)["items"]
    return [ws for ws in items if ws["spec"]["nodeName"] in r.kubelet.nodes or not ours]


def stale_writes(r: Release) -> int:
    """What the status server sums: staleWritesRejected over every WorkerStatus."""
    return sum((ws.get("status") or {}).get("staleWritesRejected", 0)
               for ws in workerstatuses(r, ours=False))


def completed_by_workers(r: Release) -> int:
    return sum(w.get("completed", 0) for ws in workerstatuses(r)
               for w in (ws.get("status") or {}).get("workers") or [])


def _names_json(names: list[str]) -> str:
    return json.dumps([{"name": name} for name in names])


def _pull_secrets(pod: client.V1Pod) -> list[str]:
    return [s.name for s in pod.spec.image_pull_secrets or []]


@contextlib.contextmanager
def _pods_seen(r: Release) -> Iterator[dict[str, list[str]]]:
    """The pull secrets of every pod that exists in the release's namespace while the block
    runs (a watch, so a hook's pod deleted before the block ends is seen too)."""
    seen: dict[str, list[str]] = {}
    stream = watch.Watch()
    listed = r.cluster.core.list_namespaced_pod(r.namespace)
    for pod in listed.items:
        seen[pod.metadata.name] = _pull_secrets(pod)

    def follow() -> None:
        # A watch the API server ends early (its connection dropped, or an ERROR event, whose
        # object is no pod) only leaves pods unseen, which the caller's wait on what it
        # expects to see reports. The client yields None for a blank line of the stream.
        with contextlib.suppress(urllib3.exceptions.ProtocolError):
            for event in stream.stream(r.cluster.core.list_namespaced_pod, r.namespace,
                                       resource_version=listed.metadata.resource_version,
                                       timeout_seconds=300):
                if event is None:
                    continue
                pod = event["object"]
                if event["type"] == "ERROR" or pod is None:
                    return
                seen[pod.metadata.name] = _pull_secrets(pod)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stream.stop()


# --- 1. install -----------------------------------------------------------------------------
def test_1_helm_install_runs_everything_under_its_own_service_account(release: Release) -> None:
    r = release
    out = helm(r, "install", RELEASE, str(CHART), "-n", r.namespace, "--wait",
               "--timeout", "180s", *chart_values(r.namespace),
               "--set-json", f"imagePullSecrets={_names_json(PULL_SECRETS)}",
               "--set-json", f"prover.imagePullSecrets={_names_json(PROVER_PULL_SECRETS)}")
    notes = out.split("NOTES:", 1)[1]
    assert f"kubectl apply -n {r.namespace} -f examples/snap-update.yaml" in notes
    assert f"kubectl get pj,ws -n {r.namespace}" in notes
    assert f"kubectl port-forward -n {r.namespace} svc/{STATUS} 9821:http" in notes
    apps = client.AppsV1Api(r.cluster.api)
    for name in (OPERATOR, STATUS):  # helm waited on the ReplicaSet; the Deployment follows
        wait_for(lambda n=name: apps.read_namespaced_deployment(
            n, r.namespace).status.available_replicas == 2, 30, f"{name} Available x2")
    pods = r.cluster.core.list_namespaced_pod(r.namespace, label_selector=f"{INSTANCE}=kz").items
    accounts = {p.metadata.labels["app.kubernetes.io/name"]: p.spec.service_account_name
                for p in pods}
    assert all(_pull_secrets(p) == PULL_SECRETS for p in pods)
    assert accounts == {"kuzk-operator": OPERATOR, "kuzk-status-server": STATUS}
    assert len(status_pods(r)) == 2

    # A second release in the same cluster: every cluster-wide name is its own.
    other = f"{r.namespace}-b"
    r.cluster.kubectl("create", "namespace", other)
    try:
        r.cluster.helm("install", "kz2", str(CHART), "-n", other, *chart_values(other),
                       "--set", "operator.replicas=1", "--set", "statusServer.replicas=1")
        cluster_wide = "clusterrole,clusterrolebinding,validatingadmissionpolicy," \
                       "validatingadmissionpolicybinding"
        for name in ("kz", "kz2"):
            got = r.cluster.kubectl("get", cluster_wide, "-l", f"{INSTANCE}={name}",
                                    "-o", "name").stdout.split()
            assert f"validatingadmissionpolicy.admissionregistration.k8s.io/" \
                   f"{name}-kuzk-prover-own-node" in got
            assert f"clusterrole.rbac.authorization.k8s.io/{name}-kuzk-status" in got
        r.cluster.helm("uninstall", "kz2", "-n", other, "--wait", "--timeout", "120s")
    finally:
        _drop_namespace(r.cluster, other)
    assert r.cluster.kubectl("get", "validatingadmissionpolicy",
                             "kz-kuzk-prover-own-node").returncode == 0


# --- 2. every example -----------------------------------------------------------------------
def _lowered_examples(r: Release) -> Path:
    out = r.workdir / "examples"
    out.mkdir()
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        doc["spec"]["circuitLog2"] = CIRCUIT_LOG2
        (out / path.name).write_text(yaml.safe_dump(doc))
    return out


def _printer_header(kind: str) -> list[str]:
    (crd,) = [c for c in crds.all_crds() if c["spec"]["names"]["kind"] == kind]
    cols = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    return ["NAME", *(c["name"].upper() for c in cols if not c.get("priority"))]


def _status_agrees(r: Release, pj: list[dict[str, Any]]) -> None:
    total = sum(j["status"]["succeeded"] for j in pj)
    stale = stale_writes(r)
    for pod in status_pods(r):
        status = get_status(pod)
        assert status["view"]["synced"] is True
        pipes = {p["job_id"]: p for p in status["pipelines"]}
        for j in pj:
            pipe = pipes[f"{r.namespace}/{j['metadata']['name']}"]
            assert pipe["phase"] == "Succeeded"
            assert pipe["partitions_done"] == pipe["total_partitions"] == j["status"]["succeeded"]
        assert status["counters"]["total_completed"] == total
        assert status["counters"]["stale_writes_rejected"] == stale
        ours = [w for w in status["gpu_workers"] if w["node"] in r.kubelet.nodes]
        assert len(ours) == 4
        assert {w["state"] for w in ours} == {"idle"}


def _one_log_format(r: Release) -> None:
    """The chart sets json: every line the operator, the status servers and the partition pods
    wrote is one JSON object whose first keys are the same."""
    logs = sorted(r.kubelet.workdir.glob(f"pods/{r.namespace}_*/*.log"))
    names = {log.parent.name.split("_", 1)[1] for log in logs}
    assert any(n.startswith(OPERATOR) for n in names), names
    assert any(n.startswith(STATUS) for n in names), names
    assert any("-p0-a1" in n for n in names), names
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            assert list(json.loads(line))[:4] == list(KEYS), (log.parent.name, line)


def _prometheus_agrees(r: Release, prom: prometheus.Prometheus, pj: list[dict[str, Any]]) -> None:
    ips = sorted(p.status.pod_ip for p in status_pods(r))
    # The operator's pods carry the scrape annotations of its own /metrics too.
    operator_ips = sorted(p.status.pod_ip for p in r.cluster.core.list_namespaced_pod(
        r.namespace, label_selector="app.kubernetes.io/name=kuzk-operator").items
        if p.status.pod_ip and not p.metadata.deletion_timestamp)
    assert len(operator_ips) == 2, operator_ips

    def targets_up() -> bool:
        up = sorted(t["labels"]["pod_ip"] for t in prom.targets() if t["health"] == "up")
        return up == sorted(ips + operator_ips)

    wait_for(targets_up, 60, f"Prometheus targets {ips} and {operator_ips} up", interval=0.5)
    assert (prom.value("count(kuzk_operator_paused == 0)") or 0) >= 1
    total = sum(j["status"]["succeeded"] for j in pj)
    stale = stale_writes(r)
    workers = {p.status.pod_ip: len(get_status(p)["gpu_workers"]) for p in status_pods(r)}
    # the job series' namespace is the ProofJobs', kept over the target's (honor_labels)
    by_namespace = {(s["metric"].get("namespace"), s["metric"].get("exported_namespace"))
                    for s in prom.query("kuzk_partitions_completed_total")}
    assert by_namespace == {(r.namespace, None)}, by_namespace
    expected = {
        "sum by (pod_ip) (kuzk_partitions_completed_total)": dict.fromkeys(ips, total),
        "sum by (pod_ip) (kuzk_gpu_workers)": workers,
        "sum by (pod_ip) (kuzk_stale_worker_writes_rejected_total)": dict.fromkeys(ips, stale),
    }
    for expr, want in expected.items():
        def agrees(expr: str = expr, want: dict[str, int] = want) -> bool:
            got = {s["metric"]["pod_ip"]: float(s["value"][1]) for s in prom.query(expr)}
            return got == want

        wait_for(agrees, 30, f"Prometheus {expr} == {want}", interval=0.5)

    # The README's four queries answer, and say what the objects say.
    busy, idle, durations, stale_query = re.findall(r"```promql\n(.*?)\n```",
                                                    (ROOT / "README.md").read_text(), re.S)
    def busy_by_node() -> dict[str, float] | None:  # a rate needs two scrapes
        got = {s["metric"]["node"]: float(s["value"][1]) for s in prom.query(busy)}
        return got if set(r.kubelet.nodes) <= got.keys() else None

    by_node = wait_for(busy_by_node, 30, "GPU busy fraction of our nodes", interval=0.5)
    assert all(0 <= v <= 1 for v in by_node.values()), by_node
    shares = {s["metric"]["reason"]: float(s["value"][1]) for s in prom.query(idle)}
    assert set(shares) <= {"no_lane", "cpu", "not_live"}, shares
    assert 0 < sum(shares.values()) <= 1.05, shares
    kinds = {s["metric"]["proof_kind"] for s in prom.query(durations)}
    assert kinds == {j["spec"]["proofKind"] for j in pj}
    (answer,) = prom.query(stale_query)
    assert float(answer["value"][1]) >= 0


def test_2_every_example_succeeds_and_status_agrees(release: Release) -> None:
    r = release
    r.cluster.kubectl("apply", "-n", r.namespace, "-f", str(_lowered_examples(r)))
    examples = [yaml.safe_load(p.read_text()) for p in EXAMPLES.glob("*.yaml")]
    names = sorted(e["metadata"]["name"] for e in examples)
    for e in examples:
        if e["spec"].get("suspend"):  # admitted later, as its comment says
            r.cluster.kubectl("patch", "pj", e["metadata"]["name"], "-n", r.namespace,
                              "--type", "merge", "-p", '{"spec":{"suspend":false}}')
    for name in names:
        wait_job(r.cluster, r.namespace, name, "Succeeded", timeout=300)
    pj = jobs(r)
    assert sorted(j["metadata"]["name"] for j in pj) == names
    assert completed_by_workers(r) == sum(j["status"]["succeeded"] for j in pj)

    got = r.cluster.kubectl("get", "pj", "-n", r.namespace).stdout.splitlines()
    assert got[0].split() == _printer_header(api.PROOFJOB_KIND)
    assert sorted(line.split()[0] for line in got[1:]) == names
    assert all(line.split()[4] == "Succeeded" for line in got[1:])
    ours = sorted(ws["metadata"]["name"] for ws in workerstatuses(r))
    got = r.cluster.kubectl("get", "ws", *ours).stdout.splitlines()
    assert got[0].split() == _printer_header(api.WORKERSTATUS_KIND)
    assert sorted(line.split()[0] for line in got[1:]) == ours
    assert {line.split()[1] for line in got[1:]} <= set(r.kubelet.nodes), "one per GPU"

    # Every partition pod pulls with the release's secrets and the prover's, in that order.
    for j in pj:
        pods = job_pods(r.cluster, r.namespace, j["metadata"]["name"])
        assert pods and all(_pull_secrets(p) == PULL_SECRETS + PROVER_PULL_SECRETS
                            for p in pods), [(p.metadata.name, _pull_secrets(p)) for p in pods]

    _status_agrees(r, pj)
    _one_log_format(r)
    r.finished = {j["metadata"]["name"]: (j["status"], sorted(
        p.metadata.name for p in job_pods(r.cluster, r.namespace, j["metadata"]["name"])))
        for j in pj}


# --- 3. Prometheus --------------------------------------------------------------------------
def test_3_prometheus_discovers_the_status_server_and_agrees(release: Release) -> None:
    r = release
    assert r.finished, "step 2 left no finished jobs"
    pj = jobs(r)
    r.cluster.kubectl("apply", "-f", "-",
                      input=yaml.safe_dump_all(prometheus.discovery_objects(r.namespace)))
    sa = prometheus.SERVICE_ACCOUNT
    assert _can(r, sa, "watch", "pods")
    assert not any(_can(r, sa, *check) for check in (("get", "secrets"), ("list", "nodes"),
                                                     ("create", "pods"),
                                                     ("list", "proofjobs.kuzk.io")))
    token = r.cluster.kubectl("create", "token", prometheus.SERVICE_ACCOUNT, "-n",
                              r.namespace).stdout.strip()
    (r.workdir / "prometheus-token").write_text(token)
    cfg = prometheus.config(api_server=r.cluster.plane.server,
                            ca_file=r.cluster.plane.pki.ca_cert,
                            token_file=r.workdir / "prometheus-token", namespace=r.namespace)
    with prometheus.Prometheus(r.workdir / "prometheus", cfg) as prom:
        _prometheus_agrees(r, prom, pj)


# --- 4. upgrade while a job runs ------------------------------------------------------------
def test_4_helm_upgrade_while_a_job_runs(release: Release) -> None:
    r = release
    assert r.finished, "step 2 left no finished jobs"
    before = completed_by_workers(r)
    apply_job(r.cluster, r.namespace, proofjob("during-upgrade", partitions=16, circuitLog2=20))

    def running() -> bool:
        st = (get_job(r.cluster, r.namespace, "during-upgrade") or {}).get("status") or {}
        return st.get("phase") == "Running" and st.get("succeeded", 0) >= 1

    wait_for(running, 120, "during-upgrade Running with a partition done", interval=0.2)
    helm(r, "upgrade", RELEASE, str(CHART), "-n", r.namespace, "--reuse-values",
         "--set", "operator.logFormat=text", "--wait", "--timeout", "180s")
    r.cluster.kubectl("rollout", "status", f"deployment/{OPERATOR}", "-n", r.namespace,
                      "--timeout=120s")
    job = get_job(r.cluster, r.namespace, "during-upgrade")
    assert job is not None
    assert job["status"]["phase"] == "Running", "the job ended before the rollout did"
    pods = r.cluster.core.list_namespaced_pod(r.namespace,
                                              label_selector=f"{INSTANCE}={RELEASE}").items
    operators = [p for p in pods if p.metadata.labels["app.kubernetes.io/name"] == "kuzk-operator"
                 and not p.metadata.deletion_timestamp]
    assert operators
    assert all("--log-format=text" in p.spec.containers[0].args for p in operators)

    job = wait_job(r.cluster, r.namespace, "during-upgrade", "Succeeded", timeout=300)
    retried = [p for p in job["status"]["partitions"] if p["attempt"] != 1]
    assert job["status"]["retries"] == 0 and not retried, f"retried during the upgrade: {retried}"
    proved = job_pods(r.cluster, r.namespace, "during-upgrade")
    assert sorted(int(p.metadata.labels[api.LABEL_PARTITION]) for p in proved) == list(range(16))
    wait_for(lambda: completed_by_workers(r) == before + 16, 30, "16 partitions counted once")
    for name, (status, pod_names) in r.finished.items():
        job = get_job(r.cluster, r.namespace, name)
        assert job is not None
        assert job["status"] == status, f"finished job {name} changed"
        assert sorted(p.metadata.name for p in job_pods(r.cluster, r.namespace, name)) \
            == pod_names


# --- 5. RBAC --------------------------------------------------------------------------------
def _can(r: Release, account: str, *args: str, namespace: str | None = None) -> bool:
    out = r.cluster.kubectl("auth", "can-i", *args, "-n", namespace or r.namespace,
                            f"--as=system:serviceaccount:{r.namespace}:{account}", check=False)
    return out.stdout.strip() == "yes"


def _as(r: Release, account: str, *args: str) -> str:
    token = r.cluster.kubectl("create", "token", account, "-n", r.namespace).stdout.strip()
    path = r.workdir / f"kubeconfig-{account}"
    path.write_text(yaml.safe_dump(r.cluster.plane.kubeconfig_for(account, {"token": token})))
    out = r.cluster.kubectl("--kubeconfig", str(path), *args, "-n", r.namespace, check=False)
    return out.stdout + out.stderr


def test_5_rbac_is_minimal(release: Release) -> None:
    r = release
    assert _can(r, OPERATOR, "create", "pods")
    # The release watches r.namespace only: what the operator may do to namespaced objects
    # is granted there and nowhere else.
    for verb, resource in (("create", "pods"), ("delete", "pods"), ("patch", "proofjobs.kuzk.io"),
                           ("create", "events"), ("list", "pods")):
        assert _can(r, OPERATOR, verb, resource), (verb, resource)
        assert not _can(r, OPERATOR, verb, resource, namespace="default"), (verb, resource)
    assert not _can(r, OPERATOR, "get", "secrets")
    assert not _can(r, OPERATOR, "list", "secrets")
    for verb in ("get", "list", "watch"):
        for resource in ("proofjobs.kuzk.io", "workerstatuses.kuzk.io", "pods", "nodes"):
            assert _can(r, STATUS, verb, resource), (verb, resource)
        # it reads ProofJobs and pods of the watched namespace only
        for resource in ("proofjobs.kuzk.io", "pods"):
            assert not _can(r, STATUS, verb, resource, namespace="default"), (verb, resource)
    for verb in ("create", "update", "patch", "delete"):
        for resource in ("proofjobs.kuzk.io", "workerstatuses.kuzk.io", "pods", "nodes",
                         "configmaps", "events"):
            assert not _can(r, STATUS, verb, resource), (verb, resource)
        assert not _can(r, STATUS, verb, "workerstatuses.kuzk.io", "--subresource=status")
    assert not _can(r, STATUS, "get", "secrets")
    assert not _can(r, "kuzk-prover", "get", "proofjobs.kuzk.io")
    assert not _can(r, "kuzk-prover", "list", "pods")

    name = next(iter(r.finished))
    assert "Forbidden" in _as(r, OPERATOR, "get", "secrets")
    assert name in _as(r, STATUS, "get", "pj", name)
    assert "Forbidden" in _as(r, STATUS, "label", "pj", name, "touched=yes")
    assert "Forbidden" in _as(r, STATUS, "delete", "pod", status_pods(r)[0].metadata.name)
    assert "Forbidden" in _as(r, "kuzk-prover", "get", "pj", name)
    # Kubernetes' own roles carry ProofJobs: a namespace editor may create them, a viewer
    # only read them (the aggregation controller fills the roles in a moment).
    editor, viewer = f"editor-{r.namespace}", f"viewer-{r.namespace}"
    for user, role in ((editor, "edit"), (viewer, "view")):
        r.cluster.kubectl("create", "rolebinding", user, f"--clusterrole={role}",
                          f"--user={user}", "-n", r.namespace)

    def can(user: str, verb: str) -> bool:
        out = r.cluster.kubectl("auth", "can-i", verb, "proofjobs.kuzk.io", "-n", r.namespace,
                                f"--as={user}", check=False)
        return out.stdout.strip() == "yes"

    wait_for(lambda: can(editor, "create") and can(viewer, "list"), 30,
             "the built-in roles aggregating the chart's")
    assert can(editor, "delete") and not can(viewer, "create") and not can(viewer, "delete")
    job = get_job(r.cluster, r.namespace, name)
    assert job is not None and "touched" not in (job["metadata"].get("labels") or {})

    # The ledger, and no other ConfigMap: the operator may replace it, the status server read
    # it; a finished job deleted stays counted on every replica.
    ledger_cm = f"configmaps/{RELEASE}-kuzk-ledger"
    assert _can(r, OPERATOR, "update", ledger_cm)
    assert not _can(r, OPERATOR, "update", "configmaps/other")
    assert _can(r, STATUS, "watch", ledger_cm)
    assert not _can(r, STATUS, "get", "configmaps/other")
    before = [get_status(p)["counters"]["total_completed"] for p in status_pods(r)]
    r.cluster.kubectl("delete", "pj", name, "-n", r.namespace, "--wait=true")

    def folded() -> bool:
        found = r.cluster.core.list_namespaced_config_map(
            r.namespace, field_selector=f"metadata.name={RELEASE}-kuzk-ledger").items
        return any(job["metadata"]["uid"] in ledger.parse({"data": cm.data}).folded
                   for cm in found)

    wait_for(folded, 30, "the operator folding the deleted job into the ledger")
    wait_for(lambda: not any(p["job_id"] == f"{r.namespace}/{name}"
                             for pod in status_pods(r) for p in get_status(pod)["pipelines"]),
             30, "the deleted job gone from /status")
    assert [get_status(p)["counters"]["total_completed"] for p in status_pods(r)] == before


# --- 6. uninstall ---------------------------------------------------------------------------
def test_6_helm_uninstall_removes_what_the_chart_made(release: Release) -> None:
    r = release
    manifest = r.cluster.helm("get", "manifest", RELEASE, "-n", r.namespace).stdout
    made = [(d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", r.namespace))
            for d in yaml.safe_load_all(manifest) if d]
    assert len(made) > 10
    # A namespace the release does not watch: its ProofJob is not the release's to run.
    foreign_ns = f"{r.namespace}-foreign"
    r.cluster.kubectl("create", "namespace", foreign_ns)
    apply_job(r.cluster, foreign_ns, proofjob("elsewhere", partitions=1))
    # Pods that cannot be scheduled: they carry the release finalizer and would stay
    # undeletable once the operator is gone, but for the uninstall hook.
    apply_job(r.cluster, r.namespace,
              proofjob("stuck", partitions=2, prover={"nodeSelector": {"kuzk.io/none": "x"}}))
    wait_for(lambda: len(job_pods(r.cluster, r.namespace, "stuck")) == 2, 60, "pending pods")
    assert all(api.FINALIZER in (p.metadata.finalizers or [])
               for p in job_pods(r.cluster, r.namespace, "stuck"))

    elsewhere = get_job(r.cluster, foreign_ns, "elsewhere")
    assert elsewhere is not None and not elsewhere.get("status")
    assert job_pods(r.cluster, foreign_ns, "elsewhere") == []
    # Another tool's pod there, with kuzk's label and finalizer: the uninstall must not
    # touch it.
    r.cluster.core.create_namespaced_pod(foreign_ns, {
        "metadata": {"name": "foreign", "labels": {api.LABEL_MANAGED_BY: api.MANAGER},
                     "finalizers": [api.FINALIZER]},
        "spec": {"nodeSelector": {"kuzk.io/none": "x"},
                 "containers": [{"name": "c", "image": "kuzk-standin:test"}]}})

    with _pods_seen(r) as seen:
        helm(r, "uninstall", RELEASE, "-n", r.namespace, "--wait", "--timeout", "120s")

        def hook() -> list[list[str]]:
            return [secrets for name, secrets in list(seen.items())
                    if name.startswith(f"{RELEASE}-kuzk-release-finalizers-")]

        wait_for(lambda: bool(hook()), 30, "the uninstall hook's pod seen")
    assert all(secrets == PULL_SECRETS for secrets in hook()), seen
    try:
        foreign = r.cluster.core.read_namespaced_pod("foreign", foreign_ns)
        assert foreign.metadata.finalizers == [api.FINALIZER]
    finally:
        r.cluster.core.patch_namespaced_pod("foreign", foreign_ns,
                                            {"metadata": {"finalizers": None}})
        _drop_namespace(r.cluster, foreign_ns)
    for kind, name, ns in made:
        out = r.cluster.kubectl("get", kind, name, "-n", ns, check=False)
        assert out.returncode != 0 and "NotFound" in out.stderr, (kind, name, out.stdout)
    wait_for(lambda: not r.cluster.core.list_namespaced_pod(
        r.namespace, label_selector=f"{INSTANCE}={RELEASE}").items, 60, "release pods gone")
    left = [p.metadata.name for p in r.cluster.core.list_namespaced_pod(r.namespace).items
            if api.FINALIZER in (p.metadata.finalizers or [])]
    assert left == []
    r.cluster.kubectl("delete", "pj", "stuck", "-n", r.namespace, "--wait=true", "--timeout=60s")
    wait_for(lambda: not job_pods(r.cluster, r.namespace, "stuck"), 60, "stuck pods gone")
    assert get_job(r.cluster, r.namespace, "stuck") is None
    assert r.cluster.kubectl("get", "crd", "proofjobs.kuzk.io").returncode == 0
