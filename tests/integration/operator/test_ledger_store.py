"""kuzk.operator.ledger_store against the real API server: the first fold creates the ConfigMap, two
writers that each hold an old copy lose nothing to each other (the stale one gets 409 and
folds again), a fold repeated after it landed counts once, and a ConfigMap that holds no
ledger is refused by name rather than overwritten."""

from __future__ import annotations

import pytest
from kubernetes import client

from kuzk.contract import ledger
from kuzk.contract.ledger import Tally
from kuzk.operator.ledger_store import LedgerStore
from testenv.cluster import Cluster

NAME = "kuzk-ledger"


def _stale(n: int) -> Tally:
    return Tally(stale_writes_rejected=n)


def test_two_writers_lose_nothing_and_a_fold_counts_once(cluster: Cluster,
                                                          namespace: str) -> None:
    first = LedgerStore(cluster.api, namespace, NAME, set)
    second = LedgerStore(cluster.api, namespace, NAME, set)
    assert first.fold([("uid-a", _stale(1))]) == 1  # creates the ConfigMap
    assert second.fold([("uid-b", _stale(2))]) == 1  # reads it: second had no copy yet
    # first's copy is stale now: its write gets 409, it reads again and folds on top
    assert first.fold([("uid-c", _stale(4)), ("uid-a", _stale(1))]) == 1
    assert second.fold([("uid-b", _stale(2))]) == 0  # already folded: no write at all
    cm = client.CoreV1Api(cluster.api).read_namespaced_config_map(NAME, namespace)
    book = ledger.parse({"data": cm.data})
    assert book.tally.stale_writes_rejected == 7
    assert set(book.folded) == {"uid-a", "uid-b", "uid-c"}


def test_a_configmap_that_holds_no_ledger_is_not_overwritten(cluster: Cluster,
                                                            namespace: str) -> None:
    core = client.CoreV1Api(cluster.api)
    core.create_namespaced_config_map(namespace, {
        "metadata": {"name": NAME}, "data": {ledger.DATA_KEY: "someone else's"}})
    with pytest.raises(ValueError, match=f"ConfigMap {namespace}/{NAME}: .*not a kuzk ledger"):
        LedgerStore(cluster.api, namespace, NAME, set).fold([("uid-a", _stale(1))])
    assert core.read_namespaced_config_map(NAME, namespace).data == {
        ledger.DATA_KEY: "someone else's"}
