"""kuzk's Kopf handlers are watch handlers and indices only, which is what lets the operator
skip Kopf's diff base (``kuzk.operator.handlers.NoDiffBase``): a create, update, resume or delete
handler, or a daemon or timer, would need it (and would put a finalizer on the objects).
And Kopf watches ProofJobs (and the ProofJob CRD, whose first event says the ProofJob index is
complete) only: pods, WorkerStatuses and Nodes are the operator's own streams'
(``kuzk.operator.streams``), so Kopf neither watches nor writes them."""

from __future__ import annotations

import kopf

from kuzk.contract import api
from kuzk.operator import handlers


def test_kuzk_registers_no_handler_that_needs_a_diff_base() -> None:
    registry = kopf.get_default_registry()
    assert handlers.kuzk_jobs in [h.fn for h in registry._indexing.get_all_handlers()]
    assert registry._watching.get_all_handlers()
    assert not registry._changing.get_all_handlers()
    assert not registry._spawning.get_all_handlers()


def test_no_diff_base_keeps_and_writes_nothing() -> None:
    storage = handlers.NoDiffBase()
    body = kopf.Body({"metadata": {"name": "n", "labels": {"a": "b"}}, "spec": {"x": 1}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=kopf.BodyEssence())
    assert not patch


def test_kopf_watches_and_indexes_proofjobs_only() -> None:
    registry = kopf.get_default_registry()
    handlers_ = [*registry._watching.get_all_handlers(), *registry._indexing.get_all_handlers()]
    assert {(h.selector.group, h.selector.any_name) for h in handlers_ if h.selector} == {
        (api.GROUP, api.PROOFJOB_PLURAL),
        ("apiextensions.k8s.io", "customresourcedefinitions")}
