"""The operator's own streams (``operator.streams``), fed by hand: a list replaces what a stream
held (new and changed objects delivered, vanished ones delivered as DELETED, unchanged ones
not at all), events refile objects in the index the caches read, and the runtime hears
``on_listed`` once every stream has listed since it started, and runs no work before."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import orjson
from kubernetes import client

from kuzk.contract import api
from kuzk.contract.listwatch import WHOLE, KubeClient
from kuzk.operator.caches import POD_SHAPE, Caches, Index, pod_keys, worker_status_keys
from kuzk.operator.controller import Controller
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.runtime import Runtime
from kuzk.operator.streams import POD_SELECTOR, PODS, WORKERSTATUSES, Stream, Streams
from tests.unit.status.builders import gpu_workerstatus, worker


def pod(name: str, rv: str, node: str | None = None, job: str = "j") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv, "uid": name,
                         "labels": {api.LABEL_JOB: job}, "managedFields": [{"big": 1}]},
            "spec": {"nodeName": node} if node else {}}


def worker_status(name: str, rv: str = "1", node: str = "n1") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": rv},
            "spec": {"nodeName": node, "gpu": {"uuid": f"GPU-{name}"}}}


class Heard:
    """A receiver that records what the streams tell it."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str | None, str]] = []
        self.listed = 0

    def on_pod(self, event: str | None, pod: Mapping[str, Any]) -> None:
        self.events.append((PODS, event, pod["metadata"]["name"]))

    def on_worker_status(self, event: str | None, name: str, body: Mapping[str, Any]) -> None:
        self.events.append((WORKERSTATUSES, event, name))

    def on_listed(self, replay: Callable[[], None]) -> None:
        self.listed += 1


def pod_stream(heard: list[tuple[str, dict[str, Any]]]) -> tuple[Stream, Index]:
    index = Index(pod_keys)
    stream = Stream(PODS, "/api/v1/pods", {}, index, lambda kind, b: heard.append((kind, b)))
    return stream, index


def test_a_list_delivers_what_changed_and_what_vanished_and_nothing_else() -> None:
    heard: list[tuple[str, dict[str, Any]]] = []
    stream, index = pod_stream(heard)
    stream.listed([pod("a", "1"), pod("b", "1"), pod("c", "1")])
    assert [(k, b["metadata"]["name"]) for k, b in heard] == [
        ("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]
    heard.clear()

    stream.listed([pod("a", "1"), pod("b", "2", node="n1"), pod("d", "1")])

    assert [(k, b["metadata"]["name"]) for k, b in heard] == [
        ("DELETED", "c"), ("MODIFIED", "b"), ("ADDED", "d")]
    caches = Caches({}, index, {})
    assert sorted(p["metadata"]["name"] for p in caches.job_pods("ns", "j")) == ["a", "b", "d"]
    assert [p["metadata"]["name"] for p in caches.node_pods("n1")] == ["b"]
    assert caches.pod("ns", "c") is None
    assert "managedFields" not in (caches.pod("ns", "a") or {})["metadata"]


def test_events_refile_and_a_delete_leaves_no_key_behind() -> None:
    heard: list[tuple[str, dict[str, Any]]] = []
    stream, index = pod_stream(heard)
    stream.listed([])
    stream.event("ADDED", pod("a", "1"))
    stream.event("MODIFIED", pod("a", "2", node="n1"))
    caches = Caches({}, index, {})
    assert [p["metadata"]["resourceVersion"] for p in caches.job_pods("ns", "j")] == ["2"]
    assert caches.node_pods("n1")
    stream.event("DELETED", pod("a", "3", node="n1"))
    assert dict(index) == {}
    assert [(k, b["metadata"]["resourceVersion"]) for k, b in heard] == [
        ("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "3")]


def test_worker_statuses_are_filed_by_name_node_and_the_jobs_of_their_lanes() -> None:
    index = Index(worker_status_keys)
    stream = Stream(WORKERSTATUSES, "/x", {}, index, lambda *_: None)

    def at(version: str, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "metadata": {**body["metadata"], "resourceVersion": version}}

    busy = gpu_workerstatus("n1", worker("W0", "waiting", job="a", partition=0, uuid="GPU-0"))
    idle = gpu_workerstatus("n1", worker("W1", uuid="GPU-1"))
    other = gpu_workerstatus("n2", worker("W0", uuid="GPU-2"))
    stream.listed([at("1", busy), at("2", idle), at("3", other)])
    caches = Caches({}, {}, index)

    def names(found: list[dict[str, Any]]) -> list[str]:
        return sorted(w["metadata"]["name"] for w in found)

    name = busy["metadata"]["name"]
    assert (caches.worker_status(name) or {})["spec"]["gpu"]["uuid"] == "GPU-0"
    assert caches.worker_status("n9-gpu-0") is None
    assert names(caches.worker_statuses()) == names([busy, idle, other])
    assert names(caches.node_worker_statuses("n1")) == names([busy, idle])
    assert names(caches.job_worker_statuses("ns", "a")) == [name]
    assert caches.job_worker_statuses("ns", "b") == []
    # the lane leaves: the GPU is no longer the job's
    stream.listed([at("4", gpu_workerstatus("n1", worker("W0", uuid="GPU-0")))])
    assert caches.job_worker_statuses("ns", "a") == []
    assert names(caches.worker_statuses()) == [name]


def streams_of(receiver: Any, namespaces: tuple[str, ...] = ()) -> Streams:
    # Never started here: the streams are fed by hand, so no client is needed.
    return Streams(cast(KubeClient, None), receiver, pods=Index(pod_keys),
                   worker_statuses=Index(worker_status_keys), namespaces=namespaces)


def test_partition_pods_are_selected_by_the_labels_the_pod_builder_sets_per_namespace() -> None:
    streams = streams_of(Heard(), ("a", "b"))
    pods = [s for s in streams.streams if s.resource == PODS]
    assert [s.path for s in pods] == ["/api/v1/namespaces/a/pods", "/api/v1/namespaces/b/pods"]
    assert all(s.query == {"labelSelector": POD_SELECTOR} for s in pods)
    assert POD_SELECTOR == "app.kubernetes.io/managed-by=kuzk,kuzk.io/job"
    assert [s.path for s in streams_of(Heard()).streams if s.resource == PODS] == [
        "/api/v1/pods"]


def test_the_pod_streams_read_only_what_the_operator_reads_of_a_pod() -> None:
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
              "containerStatuses": [{"name": "prover", "state": {"running": {}}}]}
    meta = {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
            "creationTimestamp": "2026-12-07T08:00:00Z", "labels": {api.LABEL_JOB: "j"},
            "annotations": {"a": "b"}, "finalizers": [api.FINALIZER],
            "ownerReferences": [{"kind": "ProofJob", "name": "j", "uid": "ju"}],
            "deletionTimestamp": "2026-12-07T08:01:00Z", "deletionGracePeriodSeconds": 30}
    whole = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {**meta, "managedFields": [{"manager": "kubelet", "fieldsV1": {}}]},
             "spec": {"nodeName": "n1", "containers": [{"name": "prover", "env": []}]},
             "status": status}
    read = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "n1"},
            "status": status}
    assert POD_SHAPE.event(orjson.dumps({"type": "MODIFIED", "object": whole})) == {
        "type": "MODIFIED", "object": read}
    listing = {"metadata": {"resourceVersion": "9"}, "items": [whole, whole]}
    assert POD_SHAPE.listing(orjson.dumps(listing)) == {
        "metadata": {"resourceVersion": "9"}, "items": [read, read]}
    assert [s.shape for s in streams_of(Heard()).streams] == [POD_SHAPE, WHOLE]


def test_the_operator_streams_no_nodes() -> None:
    assert sorted(s.resource for s in streams_of(Heard()).streams) == [PODS, WORKERSTATUSES]


def test_the_runtime_hears_listed_once_every_stream_has_listed_and_again_after_a_stop() -> None:
    heard = Heard()
    streams = streams_of(heard, ("a", "b"))
    first, *rest = streams.streams
    first.listed([pod("p", "1")])
    first.listed([pod("p", "1")])  # a relist (410) of one stream is not every stream
    assert heard.listed == 0
    for stream in rest:
        stream.listed([])
    assert heard.listed == 1
    assert streams.listed
    first.listed([])  # a 410 relist later: no second announcement
    assert heard.listed == 1

    streams.stop()  # a peering pause
    assert not streams.listed
    for stream in streams.streams:
        stream.listed([])
    assert heard.listed == 2


def test_a_replay_delivers_everything_held() -> None:
    heard = Heard()
    streams = streams_of(heard)
    for stream in streams.streams:
        stream.listed({PODS: [pod("p", "1")], WORKERSTATUSES: [worker_status("n1-0")]
                       }[stream.resource])
    heard.events.clear()
    streams.replay()
    assert sorted(heard.events) == [(PODS, "ADDED", "p"), (WORKERSTATUSES, "ADDED", "n1-0")]


async def test_a_held_runtime_runs_nothing_until_the_streams_have_listed() -> None:
    job = {"metadata": {"namespace": "ns", "name": "j", "uid": "ju", "resourceVersion": "5"}}
    controller = Controller(client.ApiClient(), PodSettings(image="unused"), lambda *_: None)
    pods = Index(pod_keys)
    runtime = Runtime(controller, Caches({("ns", "j"): [job]}, pods, Index(worker_status_keys)))
    streams = Streams(cast(KubeClient, None), runtime, pods=pods,
                      worker_statuses=Index(worker_status_keys))
    runtime.hold()
    orphan = {**pod("orphan", "1"), "metadata": {**pod("orphan", "1")["metadata"],
                                                  "ownerReferences": []}}
    by_resource = {PODS: [orphan], WORKERSTATUSES: [worker_status("n1-0")]}
    for stream in streams.streams[:-1]:
        stream.listed(by_resource[stream.resource])
    runtime.on_job("ADDED", "ns", "j", "ju", "5")
    assert runtime.queue.tracked() == []

    streams.streams[-1].listed(by_resource[streams.streams[-1].resource])

    assert runtime.listed
    for key in (("job", "ns", "j"), ("sweep", "n1-0"), ("pod", "ns", "orphan")):
        assert runtime.queue.scheduled(key), key
    await runtime.close()


async def test_a_peering_pause_holds_the_runtime_until_the_next_lists() -> None:
    controller = Controller(client.ApiClient(), PodSettings(image="unused"), lambda *_: None)
    runtime = Runtime(controller, Caches({}, {}, {}))
    runtime.on_peering(True)
    runtime.on_worker_status("ADDED", "n1-0", worker_status("n1-0"))
    assert runtime.queue.tracked() == [] and not runtime.listed
    runtime.on_peering(False)
    runtime.on_worker_status("MODIFIED", "n1-0", worker_status("n1-0", rv="2"))
    assert runtime.queue.tracked() == []  # still held: the streams have not listed again
    runtime.on_listed(
        lambda: runtime.on_worker_status("ADDED", "n1-0", worker_status("n1-0", rv="2")))
    assert runtime.queue.scheduled(("sweep", "n1-0"))
    await runtime.close()


async def test_at_start_nothing_runs_until_kopfs_proofjob_index_is_complete_too() -> None:
    controller = Controller(client.ApiClient(), PodSettings(image="unused"), lambda *_: None)
    runtime = Runtime(controller, Caches({}, {}, {}))
    runtime.hold(jobs=True)
    runtime.on_listed(lambda: runtime.on_worker_status("ADDED", "n1-0", worker_status("n1-0")))
    assert runtime.queue.tracked() == []  # every pod would look orphaned to the sync
    runtime.on_jobs_indexed()
    assert runtime.queue.scheduled(("sweep", "n1-0"))
    await runtime.close()
