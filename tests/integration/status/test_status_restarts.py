"""Restarts: with kube-apiserver stopped and started mid-run the watches resume and /status
catches up within 10 s, counted in kuzk_watch_restarts_total; a restarted status server
rebuilds the same pipelines from its lists. ProofJobs here are written directly (spec, then
status through the status subresource), as the operator would."""

from __future__ import annotations

from typing import Any

import requests
from kubernetes import client

from kuzk.contract import api
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import proofjob
from tests.integration.status.server import StatusServer


def create(custom: client.CustomObjectsApi, namespace: str, name: str, states: list[str]) -> None:
    custom.create_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL,
                                           proofjob(name, partitions=len(states)))
    set_states(custom, namespace, name, states)


def set_states(custom: client.CustomObjectsApi, namespace: str, name: str,
               states: list[str]) -> None:
    status = {"phase": "Running", "partitionCount": len(states),
              "partitions": [{"index": i, "state": s, "attempt": 1}
                             for i, s in enumerate(states)]}
    custom.patch_namespaced_custom_object_status(api.GROUP, api.VERSION, namespace,
                                                 api.PROOFJOB_PLURAL, name, {"status": status})


def shown(server: StatusServer, namespace: str) -> dict[str, list[str]]:
    try:
        doc = server.status(namespace=namespace)
    except requests.RequestException:
        return {}
    return {p["name"]: [q["state"] for q in p["partitions"]] for p in doc["pipelines"]}


def restarts(server: StatusServer, resource: str) -> float:
    return server.metrics()[("kuzk_watch_restarts_total", (("resource", resource),))]


def test_watches_resume_after_the_apiserver_restarts(cluster: Cluster, namespace: str,
                                                     status_server) -> None:
    custom = client.CustomObjectsApi(cluster.api)
    server: StatusServer = status_server()
    create(custom, namespace, "before", ["committing", "pending"])
    wait_for(lambda: shown(server, namespace) == {"before": ["committing", "pending"]}, 10,
             "the first job in /status")
    # (a control plane just started may answer a first watch 429 while its cache fills)
    resources = ("proofjobs", "workerstatuses", "pods", "nodes")
    before = {resource: restarts(server, resource) for resource in resources}

    with cluster.plane.apiserver_down():
        lost: dict[str, Any] = wait_for(
            lambda: (d := server.status())["view"]["synced"] is False and d, 30,
            "/status saying the view is not synced")
        assert server.get("/healthz").status_code == 200
        assert lost["pipelines"][0]["name"] == "before"  # the last known state stays served
    set_states(custom, namespace, "before", ["done", "committing"])
    create(custom, namespace, "after", ["pending"])
    expected = {"before": ["done", "committing"], "after": ["pending"]}
    wait_for(lambda: shown(server, namespace) == expected, 10,
             "/status catching up after the restart")
    doc = wait_for(lambda: (d := server.status())["view"]["synced"] and d, 10,
                   "the view synced again")
    assert doc["view"]["watch_restarts"] >= 4
    for resource in resources:
        assert restarts(server, resource) >= before[resource] + 1, resource


def test_a_restarted_server_rebuilds_the_same_pipelines(cluster: Cluster, namespace: str,
                                                        status_server) -> None:
    custom = client.CustomObjectsApi(cluster.api)
    first: StatusServer = status_server()
    made = {f"job-{i}": states for i, states in
            enumerate([["done", "committing"], ["pending"], ["synthesizing", "failed"]])}
    for name, states in made.items():
        create(custom, namespace, name, states)
    # every job as its status says, not only created (its status is a second write)
    wait_for(lambda: shown(first, namespace) == made, 10, "three jobs in /status")
    before = first.status(namespace=namespace)
    first.stop()
    second: StatusServer = status_server()
    after = second.status(namespace=namespace)
    assert after["view"]["synced"] is True
    fields = ("job_id", "uid", "phase", "total_partitions", "partitions_done",
              "partitions_failed", "resource_version")
    assert [{f: p[f] for f in fields} for p in after["pipelines"]] == [
        {f: p[f] for f in fields} for p in before["pipelines"]]
    assert [[q["state"] for q in p["partitions"]] for p in after["pipelines"]] == [
        [q["state"] for q in p["partitions"]] for p in before["pipelines"]]
    # The counters count what the objects show finished (and the ledger, when there is one,
    # what deleted ones showed): the same after a restart. (Stale writes are summed over
    # every node's WorkerStatus, which other tests' workers may change meanwhile.)
    assert before["counters"]["total_completed"] == 1 and before["counters"]["total_failed"] == 1
    assert {k: v for k, v in after["counters"].items() if k != "stale_writes_rejected"} == \
        {k: v for k, v in before["counters"].items() if k != "stale_writes_rejected"}
