"""A pod delete carries the UID of the pod it was decided on. When a namesake has replaced
that pod by the time the delete arrives (a cache that has not seen the replacement), the API
server answers 409, the replacement is left alone, and the sync asks for another look soon;
that look, on the pod that exists, deletes that one. A ProofJob's delete for its TTL carries
the UID and the resourceVersion it was decided on, so a job changed since is not deleted on an
old decision."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from kubernetes import client

from kuzk.contract import api
from kuzk.operator.controller import STALE_RESYNC_SECONDS, Controller
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import (
    STANDIN_SETTINGS,
    bound_pod,
    get_job,
    proofjob,
    stored_job,
)


def test_a_delete_decided_on_a_replaced_pod_gets_409_and_the_sync_decides_again(
        prover_account: Cluster, namespace: str) -> None:
    cluster = prover_account
    job = stored_job(cluster, namespace, proofjob("stale", partitions=1))
    decided_on = bound_pod(cluster, namespace, job, finalizer=False)
    name = decided_on["metadata"]["name"]
    cluster.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    wait_for(lambda: not cluster.core.list_namespaced_pod(
        namespace, field_selector=f"metadata.name={name}").items, 30, "the first pod gone")
    replacement = bound_pod(cluster, namespace, job, finalizer=False)
    # The job is suspended: its live pods are to be deleted. The cache still shows the first.
    custom = client.CustomObjectsApi(cluster.api)
    job = custom.patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, "stale",
        {"spec": {"suspend": True}})
    controller = Controller(cluster.api, STANDIN_SETTINGS, lambda _job, _event: None)

    synced = controller.sync(job, [decided_on], [])

    live = cluster.core.read_namespaced_pod(name, namespace)
    assert live.metadata.uid == replacement["metadata"]["uid"]
    assert live.metadata.deletion_timestamp is None
    assert synced.requeue_after is not None and synced.requeue_after <= STALE_RESYNC_SECONDS

    controller.sync(synced.job or job, [replacement], [])
    # (it stays terminating: no kubelet runs on its node to confirm the end)
    assert cluster.core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp


def test_a_ttl_delete_decided_on_a_changed_job_gets_409_and_the_sync_decides_again(
        prover_account: Cluster, namespace: str) -> None:
    cluster = prover_account
    job = stored_job(cluster, namespace, proofjob(
        "expiring", partitions=1, ttlSecondsAfterFinished=60,
        prover={"image": "elsewhere/prover:1"}))
    # An image the operator does not allow: the job fails at once, with no pod.
    allowing = replace(STANDIN_SETTINGS, allowed_images=(STANDIN_SETTINGS.image,))
    controller = Controller(cluster.api, allowing, lambda _job, _event: None)
    started = datetime.now(UTC)
    failed = controller.sync(job, [], [], now=started).job
    assert failed is not None and failed["status"]["phase"] == "Failed"
    assert not cluster.core.list_namespaced_pod(namespace).items
    # Someone changes the job after the copy the cache holds (a label, a TTL raised).
    custom = client.CustomObjectsApi(cluster.api)
    custom.patch_namespaced_custom_object(
        api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL, "expiring",
        {"metadata": {"labels": {"kept": "yes"}}})
    past_ttl = started + timedelta(seconds=120)

    synced = controller.sync(failed, [], [], now=past_ttl)

    assert get_job(cluster, namespace, "expiring") is not None, "deleted on an old decision"
    assert synced.requeue_after is not None and synced.requeue_after <= STALE_RESYNC_SECONDS
    fresh = get_job(cluster, namespace, "expiring")
    assert fresh is not None
    controller.sync(fresh, [], [], now=past_ttl)
    wait_for(lambda: get_job(cluster, namespace, "expiring") is None, 30, "the job deleted")
