"""Keeping the view current: for each resource, one list+watch loop (``kuzk.contract.listwatch``,
shared with the operator's streams) into the view. A watch that breaks resumes from the last
resourceVersion it saw; one the API server answers with 410 Gone lists again. Each of those
is one restart, counted per resource. Lists are read ``LIST_PAGE`` objects at a time, each
page handed to the view as it comes (``StatusView.page``): ten thousand ProofJobs are 37 MB of
JSON and 210 MB as Python objects, and the heap stays as large as the most it ever held.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from kuzk.contract import api
from kuzk.contract.listwatch import KubeClient, list_in_pages_and_watch, params
from kuzk.status.view import LEDGER, NODES, PODS, PROOFJOBS, WORKERSTATUSES, StatusView

POD_SELECTOR = f"{api.LABEL_MANAGED_BY}={api.MANAGER}"
LIST_PAGE = 500


@dataclass(frozen=True)
class Target:
    """One list+watch loop: a resource in one namespace, or across all of them."""

    resource: str
    path: str
    namespace: str | None = None
    selector: str | None = None
    fields: str | None = None

    @property
    def name(self) -> str:
        return f"{self.resource}@{self.namespace}" if self.namespace else self.resource


def targets(namespaces: list[str], ledger: tuple[str, str] | None = None) -> list[Target]:
    """ProofJobs and partition pods per namespace (or all); WorkerStatuses and Nodes; the
    ledger's ConfigMap when there is one."""

    def scoped(resource: str, plural: str, base: str, selector: str | None) -> list[Target]:
        if not namespaces:
            return [Target(resource, f"{base}/{plural}", None, selector)]
        return [Target(resource, f"{base}/namespaces/{ns}/{plural}", ns, selector)
                for ns in namespaces]

    return [
        *scoped(PROOFJOBS, api.PROOFJOB_PLURAL, api.API_PATH, None),
        Target(WORKERSTATUSES, api.WORKERSTATUSES_PATH),
        *scoped(PODS, "pods", "/api/v1", POD_SELECTOR),
        Target(NODES, "/api/v1/nodes"),
        *([Target(LEDGER, f"/api/v1/namespaces/{ledger[0]}/configmaps", ledger[0],
                  fields=f"metadata.name={ledger[1]}")] if ledger else []),
    ]


class _Into:
    """One target's loop, delivered into the view."""

    def __init__(self, view: StatusView, target: Target) -> None:
        self.view, self.target = view, target

    def page(self, items: list[dict[str, Any]]) -> None:
        self.view.page(self.target.name, items)

    def listed(self, items: list[dict[str, Any]]) -> None:
        self.view.listed(self.target.name, items, self.target.namespace)

    def event(self, kind: str, item: dict[str, Any]) -> None:
        self.view.event(self.target.name, kind, item)

    def connected(self) -> None:
        self.view.connected(self.target.name)

    def lost(self) -> None:
        self.view.lost(self.target.name)


async def keep_current(kube: KubeClient, view: StatusView, target: Target) -> None:
    """List, then watch, forever: resume on errors, relist on 410 Gone. The target must be
    registered with ``view.add_watch`` first (``Watches.start`` does)."""
    await list_in_pages_and_watch(kube, target.path, params(target.selector, target.fields),
                                  _Into(view, target), asyncio.sleep, target.name,
                                  limit=LIST_PAGE)


@dataclass
class Watches:
    """The running watch loops of one view."""

    tasks: list[asyncio.Task[None]]

    @classmethod
    def start(cls, kube: KubeClient, view: StatusView, namespaces: list[str],
              ledger: tuple[str, str] | None = None) -> Watches:
        chosen = targets(namespaces, ledger)
        for t in chosen:
            view.add_watch(t.name, t.resource)
        return cls([asyncio.create_task(keep_current(kube, view, t), name=f"watch {t.name}")
                    for t in chosen])

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
