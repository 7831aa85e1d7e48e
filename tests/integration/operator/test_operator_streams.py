"""The operator's own streams of pods and WorkerStatuses (``kuzk.operator.streams``) on the test
control plane: only kuzk's partition pods arrive; no sync runs before every stream has
listed; a watch the API server answers 410 Gone (its watch cache restarted past the
resourceVersion) lists again; a replica paused by a higher-priority peer stops its streams
and lists again when it resumes."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
from collections.abc import Mapping
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from kuzk.contract import api
from kuzk.contract.listwatch import WHOLE, KubeClient, Shape
from kuzk.operator.streams import PODS, Streams
from testenv.cluster import Cluster
from testenv.controlplane import free_port
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    InProcessOperator,
    Plan,
    apply_job,
    get_job,
    proofjob,
    wait_job,
)

RESUMED = "Resuming operations after the pause"
PAUSED = "paused by a higher-priority peer"
LIFETIME = ("--peering-lifetime", "5")


def plain_pod(name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """A pod bound to a node no kubelet runs: it stays as created."""
    return {"metadata": {"name": name, "labels": dict(labels)},
            "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "none"}]}}


def streams_of(operator: InProcessOperator) -> Streams:
    streams = wait_for(lambda: operator.memo.get("streams"), 60, "the operator's streams")
    assert isinstance(streams, Streams)
    return streams


def pods_seen(operator: InProcessOperator) -> set[str]:
    streams = streams_of(operator)
    return operator.call(lambda: {name for s in streams.streams if s.resource == PODS
                                  for _, name in s.objects})


def test_only_kuzks_partition_pods_reach_the_operator(
        cluster: Cluster, namespace: str, inprocess_operator) -> None:
    operator: InProcessOperator = inprocess_operator()
    wait_for(lambda: operator.call(lambda: streams_of(operator).listed), 60, "the first lists")
    core = cluster.core
    core.create_namespaced_pod(namespace, plain_pod("unlabelled", {}))
    core.create_namespaced_pod(namespace, plain_pod(
        "managed-no-job", {api.LABEL_MANAGED_BY: api.MANAGER}))
    core.create_namespaced_pod(namespace, plain_pod(
        "other-manager", {api.LABEL_MANAGED_BY: "someone", api.LABEL_JOB: "x"}))
    # Created last: a watch delivers in resourceVersion order, so once this one has arrived
    # the others would have too.
    core.create_namespaced_pod(namespace, plain_pod(
        "partition", {api.LABEL_MANAGED_BY: api.MANAGER, api.LABEL_JOB: "gone"}))

    wait_for(lambda: "partition" in pods_seen(operator), 30, "the partition pod's event")
    assert pods_seen(operator) <= {"partition"}


@pytest.fixture
def held_pod_lists(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pod lists wait until the event returned is set (a slow first list, on a big fleet)."""
    release = threading.Event()
    real = KubeClient.list

    async def held(self: KubeClient, path: str, params: Mapping[str, str],
                   shape: Shape = WHOLE) -> dict[str, Any]:
        if path.endswith("/pods"):
            await asyncio.to_thread(release.wait, 120)
        return await real(self, path, params, shape)

    monkeypatch.setattr(KubeClient, "list", held)
    yield release
    release.set()


def test_no_sync_runs_before_every_stream_has_listed(
        cluster: Cluster, namespace: str, nodes, inprocess_operator, plan: Plan,
        held_pod_lists: threading.Event) -> None:
    nodes(1, gpus=2)
    operator: InProcessOperator = inprocess_operator()
    runtime = operator.runtime
    heard: list[str] = []
    on_job = runtime.on_job

    def recording(event: str | None, namespace: str, name: str, *args: Any) -> None:
        heard.append(name)
        on_job(event, namespace, name, *args)

    operator.call(lambda: setattr(runtime, "on_job", recording))
    apply_job(cluster, namespace, proofjob("early", partitions=1))
    wait_for(lambda: operator.call(lambda: "early" in heard), 60, "Kopf's event of the job")

    streams = streams_of(operator)
    assert operator.call(lambda: (streams.listed, runtime.listed)) == (False, False)
    assert operator.call(lambda: (runtime.queue.tracked(), runtime.queue.runs_total)) == ([], 0)
    assert not (get_job(cluster, namespace, "early") or {}).get("status")

    held_pod_lists.set()
    wait_job(cluster, namespace, "early", "Succeeded")  # the job's kick was the replay's
    assert operator.call(lambda: runtime.listed)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    try:
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except requests.RequestException:
        return {}
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def lists(port: int, resource: str) -> float:
    return scrape(port).get(("kuzk_operator_watch_lists_total", (("resource", resource),)), 0)


def events(port: int, resource: str) -> float:
    return sum(v for (name, labels), v in scrape(port).items()
               if name == "kuzk_operator_watch_events_total" and ("resource", resource) in labels)


def restarts(port: int, resource: str) -> float:
    return scrape(port).get(("kuzk_operator_watch_restarts_total", (("resource", resource),)), 0)


def answered_gone(log: str) -> set[str]:
    """The resources whose watch the log says was answered 410 Gone."""
    return set(re.findall(r"watch of (\w+)\S* broke \(410: [^\n]*relisting", log))


def test_a_watch_answered_410_gone_lists_again(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    port = free_port()
    operator = run_operator("--metrics-port", str(port))
    wait_for(lambda: all(lists(port, r) == 1 for r in ("pods", "workerstatuses")),
             60, "the first lists")
    apply_job(cluster, namespace, proofjob("before", partitions=1))
    wait_job(cluster, namespace, "before", "Succeeded")

    # A restarted API server's watch cache starts at the newest resourceVersion: a watch
    # resumed from an older one is answered 410 Gone ("too old resource version"); one whose
    # version is still current resumes. Which ones: the log says.
    with cluster.plane.apiserver_down():
        pass
    resources = ("pods", "workerstatuses")
    wait_for(lambda: all(restarts(port, r) >= 1 for r in resources), 60, "every watch broke")
    wait_for(lambda: answered_gone(operator.text()), 60, "a watch answered 410 Gone")

    def listed_again_where_gone() -> bool:
        gone = answered_gone(operator.text())
        return all((lists(port, r) >= 2) == (r in gone) for r in resources)

    # (each stream that was answered 410 listed again; each other one resumed without a list)
    wait_for(listed_again_where_gone, 60, "a list after each 410 Gone, and after nothing else")
    apply_job(cluster, namespace, proofjob("after", partitions=1))
    wait_job(cluster, namespace, "after", "Succeeded", timeout=120)
    assert "Traceback" not in operator.text()


def test_a_paused_replica_stops_its_streams_and_lists_again_on_resume(
        cluster: Cluster, namespace: str, nodes, run_operator, plan: Plan) -> None:
    nodes(1, gpus=2)
    port = free_port()
    low = run_operator("--priority", "10", "--metrics-port", str(port), *LIFETIME,
                       standalone=False)
    wait_for(lambda: RESUMED in low.text(), 60, "the low replica resumes alone")
    wait_for(lambda: lists(port, "pods") == 1, 60, "the low replica's first lists")

    high = run_operator("--priority", "20", *LIFETIME, standalone=False)
    wait_for(lambda: PAUSED in low.text(), 60, "the low replica pauses for the high one")
    seen = {r: events(port, r) for r in ("pods", "workerstatuses")}
    apply_job(cluster, namespace, proofjob("while-paused", partitions=2))
    wait_job(cluster, namespace, "while-paused", "Succeeded")
    # Its pods came and went, and their lanes moved the WorkerStatus: none reached low.
    assert {r: events(port, r) for r in seen} == seen
    assert lists(port, "pods") == 1

    high.stop(signal.SIGKILL)
    wait_for(lambda: low.text().count(RESUMED) >= 2, 60, "the low replica resumes")
    wait_for(lambda: all(lists(port, r) == 2 for r in ("pods", "workerstatuses")),
             60, "the low replica's streams listing again")
    apply_job(cluster, namespace, proofjob("after", partitions=2))
    wait_job(cluster, namespace, "after", "Succeeded", timeout=120)
    assert "Traceback" not in low.text() + high.text()
