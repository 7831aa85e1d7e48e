"""The operator keeps one WorkerStatus per GPU node, owned by the Node, so the garbage
collector removes it with the node."""

from __future__ import annotations

import json

from kubernetes import client
from kubernetes.client.rest import ApiException

from kuzk import api
from kuzk.logs import KEYS
from tests.testenv.cluster import Cluster
from tests.testenv.waiting import wait_for


def _ws(cluster: Cluster, name: str) -> dict | None:
    try:
        return dict(client.CustomObjectsApi(cluster.api).get_cluster_custom_object(
            api.GROUP, api.VERSION, api.WORKERSTATUS_PLURAL, name))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def test_worker_status_per_gpu_node_follows_the_node(cluster: Cluster, nodes,
                                                     run_operator) -> None:
    kubelet = nodes(2, gpus=2)
    operator = run_operator("--log-format", "json", namespaced=False)
    names = sorted(kubelet.nodes)
    objs = [wait_for(lambda n=n: _ws(cluster, n), 60, f"WorkerStatus {n}") for n in names]
    for name, ws in zip(names, objs, strict=True):
        assert ws["spec"]["nodeName"] == name
        (owner,) = ws["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("Node", name)
        assert owner["uid"] == cluster.core.read_node(name).metadata.uid
    table = cluster.kubectl("get", "ws", names[0]).stdout.splitlines()
    assert table[0].split() == ["NAME", "NODE", "PROVING", "WORKERS", "LANES", "AGE"]

    cluster.core.delete_node(names[0])
    wait_for(lambda: _ws(cluster, names[0]) is None, 60, "WorkerStatus collected with node")
    assert _ws(cluster, names[1]) is not None

    lines = operator.text().splitlines()
    assert lines
    records = [json.loads(line) for line in lines]
    assert all(list(r)[:4] == list(KEYS) for r in records), records[:3]
