"""A sync whose cache lacks a running partition's pod (a replica that has just resumed lists
the jobs again before the pods) reads that pod from the API server instead of taking it for
one that disappeared and starting the partition again."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kuzk.contract import api
from kuzk.operator.controller import Controller
from testenv.cluster import Cluster
from tests.integration.operator.conftest import (
    STANDIN_SETTINGS,
    bound_pod,
    proofjob,
    stored_job,
)


def test_a_running_pod_missing_from_the_cache_is_read_not_retried(
        prover_account: Cluster, namespace: str) -> None:
    cluster = prover_account
    job = stored_job(cluster, namespace, proofjob("stale", partitions=1))
    pod = bound_pod(cluster, namespace, job)  # never started: a pod the status shows running
    status = {"phase": "Running", "partitions": [
        {"index": 0, "state": "scheduled", "attempt": 1, "pod": pod["metadata"]["name"],
         "node": "nowhere"}]}
    custom = client.CustomObjectsApi(cluster.api)
    job = custom.patch_namespaced_custom_object_status(
        api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, "stale", {"status": status})
    events: list[Any] = []
    controller = Controller(cluster.api, STANDIN_SETTINGS, lambda _job, event: events.append(event))

    synced = controller.sync(job, [], [])  # the cache holds no pod of the job

    written = synced.job or job
    part = written["status"]["partitions"][0]
    assert (part["attempt"], part["state"]) == (1, "scheduled"), part
    assert not synced.created
    assert [e.reason for e in events if e.reason == "PartitionRetried"] == []
