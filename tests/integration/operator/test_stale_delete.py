"""A pod delete carries the UID of the pod it was decided on. When a namesake has replaced
that pod by the time the delete arrives (a cache that has not seen the replacement), the API
server answers 409, the replacement is left alone, and the sync asks for another look soon;
that look, on the pod that exists, deletes that one."""

from __future__ import annotations

from kubernetes import client

from kuzk import api
from kuzk.controller import STALE_RESYNC_SECONDS, Controller
from kuzk.pods import PodSettings
from tests.integration.operator.conftest import apply_job, bound_pod, get_job, proofjob
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for

SETTINGS = PodSettings(image="kuzk-standin:test")


def test_a_delete_decided_on_a_replaced_pod_gets_409_and_the_sync_decides_again(
        prover_account: Cluster, namespace: str) -> None:
    cluster = prover_account
    apply_job(cluster, namespace, proofjob("stale", partitions=1))
    job = get_job(cluster, namespace, "stale")
    assert job is not None
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
    controller = Controller(cluster.api, SETTINGS, lambda _job, _event: None)

    synced = controller.sync(job, [decided_on], [])

    live = cluster.core.read_namespaced_pod(name, namespace)
    assert live.metadata.uid == replacement["metadata"]["uid"]
    assert live.metadata.deletion_timestamp is None
    assert synced.requeue_after is not None and synced.requeue_after <= STALE_RESYNC_SECONDS

    controller.sync(synced.job or job, [replacement], [])
    # (it stays terminating: no kubelet runs on its node to confirm the end)
    assert cluster.core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp
