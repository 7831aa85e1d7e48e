"""The status server's lists against the real API server: read in pages (``limit`` and
``continue``), they are the whole list, with the list's resourceVersion for the watch to start
from, and without the managedFields the view never reads."""

from __future__ import annotations

import pytest

from kuzk.contract import api
from kuzk.status import watches
from kuzk.status.watches import PagedClient
from testenv.cluster import Cluster
from tests.integration.operator.conftest import apply_job, proofjob


async def test_a_list_read_in_pages_is_the_whole_list(
        kuzk_installed: Cluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"job-{i}" for i in range(5)]
    for name in names:
        apply_job(kuzk_installed, namespace, proofjob(name))
    monkeypatch.setattr(watches, "LIST_PAGE", 2)  # three pages
    kube = PagedClient(kuzk_installed.api.configuration)
    try:
        path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/{api.PROOFJOB_PLURAL}"
        listing = await kube.list(path, {})
    finally:
        await kube.close()
    assert sorted(item["metadata"]["name"] for item in listing["items"]) == names
    assert all("managedFields" not in item["metadata"] for item in listing["items"])
    assert listing["metadata"]["resourceVersion"]
    assert "continue" not in listing["metadata"]
