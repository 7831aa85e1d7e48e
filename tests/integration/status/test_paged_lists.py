"""The status server's lists against the real API server: read in pages (``limit`` and
``continue``), each page is handed over as it comes, together they are the whole list, and the
watch goes on from the list's resourceVersion (an object created after the list arrives as an
event, none listed arrives twice)."""

from __future__ import annotations

import asyncio
from typing import Any

from kuzk.contract import api
from kuzk.contract.listwatch import KubeClient, list_in_pages_and_watch
from testenv.cluster import Cluster
from tests.integration.operator.conftest import apply_job, proofjob


class Recorder:
    """A ``PagedSink`` that keeps what it is handed, and wakes its reader on each of them."""

    def __init__(self) -> None:
        self.pages: list[list[str]] = []
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self.opened = asyncio.Event()
        self.changed = asyncio.Event()

    def page(self, items: list[dict[str, Any]]) -> None:
        self.pages.append([item["metadata"]["name"] for item in items])

    def listed(self, items: list[dict[str, Any]]) -> None:
        self.lists.append([item["metadata"]["name"] for item in items])

    def event(self, kind: str, item: dict[str, Any]) -> None:
        self.events.append((kind, item["metadata"]["name"]))
        self.changed.set()

    def connected(self) -> None:
        self.opened.set()

    def lost(self) -> None:
        raise AssertionError("the watch broke")


async def test_a_list_read_in_pages_is_handed_over_page_by_page_then_watched(
        kuzk_installed: Cluster, namespace: str) -> None:
    names = [f"job-{i}" for i in range(5)]
    for name in names:
        apply_job(kuzk_installed, namespace, proofjob(name))
    kube = KubeClient(kuzk_installed.api.configuration)
    sink = Recorder()
    path = f"/apis/{api.GROUP}/{api.VERSION}/namespaces/{namespace}/{api.PROOFJOB_PLURAL}"
    loop = asyncio.create_task(list_in_pages_and_watch(kube, path, {}, sink, asyncio.sleep,
                                                       limit=2))
    try:
        await asyncio.wait_for(sink.opened.wait(), 30)
        assert [len(page) for page in sink.pages] == [2, 2]
        assert [len(last) for last in sink.lists] == [1]
        assert sorted(n for page in (*sink.pages, *sink.lists) for n in page) == names
        apply_job(kuzk_installed, namespace, proofjob("job-late"))
        await asyncio.wait_for(sink.changed.wait(), 30)
        assert sink.events == [("ADDED", "job-late")]
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await kube.close()
