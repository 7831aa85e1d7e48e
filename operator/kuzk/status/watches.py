"""Keeping the view current: for each resource, list, then watch from that resourceVersion.

A watch that breaks (connection refused, the API server restarting, a read timeout) resumes
from the last resourceVersion it saw; one the API server answers with 410 Gone (the version
is too old) lists again. Each of those is one restart, counted per resource. The API client is
a small aiohttp one, sharing the loop with the HTTP server; its credentials come from the
kubernetes client's own configuration loaders (kubeconfig, exec plugins, in-cluster tokens).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes import client

from kuzk import api
from kuzk.status.view import LEDGER, NODES, PODS, PROOFJOBS, WORKERSTATUSES, StatusView

log = logging.getLogger("kuzk.status.watches")

WATCH_TIMEOUT_S = 300
BACKOFF_FIRST_S, BACKOFF_CAP_S = 0.2, 2.0
POD_SELECTOR = f"{api.LABEL_MANAGED_BY}={api.MANAGER}"
GONE = 410


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class KubeClient:
    """GET-only access to the API server: lists and watch streams."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        self._ssl: ssl.SSLContext | bool = False
        if self.host.startswith("https"):
            context = ssl.create_default_context(
                cafile=configuration.ssl_ca_cert, cadata=configuration.ca_cert_data
            )
            if configuration.cert_file:
                context.load_cert_chain(configuration.cert_file, configuration.key_file)
            if not configuration.verify_ssl:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self._ssl = context
        self.session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0),
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        # A kubeconfig's loader keeps the token under "authorization", the in-cluster
        # loader under "BearerToken" (and refreshes it from the mounted file on this call).
        token = self.configuration.get_api_key_with_prefix(
            "BearerToken"
        ) or self.configuration.get_api_key_with_prefix("authorization")
        if token:
            headers["Authorization"] = token
        return headers

    async def list(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=60, sock_connect=10)
        async with self.session.get(self.host + path, params=params, headers=self._headers(),
                                    timeout=timeout) as response:
            if response.status != 200:
                raise ApiError(response.status, (await response.text())[:300])
            data: dict[str, Any] = await response.json(content_type=None)
            return data

    async def watch(self, path: str, params: Mapping[str, str], timeout_s: int,
                    opened: Callable[[], None]) -> AsyncIterator[dict[str, Any]]:
        """Yield the events of one watch request until the server ends it; ``opened`` is
        called once the API server has accepted the watch."""
        query = {**params, "watch": "1", "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout_s)}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_s + 30)
        async with self.session.get(self.host + path, params=query, headers=self._headers(),
                                    timeout=timeout) as response:
            if response.status != 200:
                raise ApiError(response.status, (await response.text())[:300])
            opened()
            buffer = b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)

    async def close(self) -> None:
        await self.session.close()


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
    crd = f"/apis/{api.GROUP}/{api.VERSION}"

    def scoped(resource: str, plural: str, base: str, selector: str | None) -> list[Target]:
        if not namespaces:
            return [Target(resource, f"{base}/{plural}", None, selector)]
        return [Target(resource, f"{base}/namespaces/{ns}/{plural}", ns, selector)
                for ns in namespaces]

    return [
        *scoped(PROOFJOBS, api.PROOFJOB_PLURAL, crd, None),
        Target(WORKERSTATUSES, f"{crd}/{api.WORKERSTATUS_PLURAL}"),
        *scoped(PODS, "pods", "/api/v1", POD_SELECTOR),
        Target(NODES, "/api/v1/nodes"),
        *([Target(LEDGER, f"/api/v1/namespaces/{ledger[0]}/configmaps", ledger[0],
                  fields=f"metadata.name={ledger[1]}")] if ledger else []),
    ]


async def keep_current(kube: KubeClient, view: StatusView, target: Target) -> None:
    """List, then watch, forever: resume on errors, relist on 410 Gone. The target must be
    registered with ``view.add_watch`` first (``Watches.start`` does)."""
    params = {**({"labelSelector": target.selector} if target.selector else {}),
              **({"fieldSelector": target.fields} if target.fields else {})}
    version: str | None = None
    delay = BACKOFF_FIRST_S
    while True:
        try:
            if version is None:
                listing = await kube.list(target.path, params)
                version = str((listing.get("metadata") or {}).get("resourceVersion", ""))
                view.listed(target.name, listing.get("items") or [], target.namespace)
            timeout_s = random.randint(WATCH_TIMEOUT_S, WATCH_TIMEOUT_S * 6 // 5)
            query = {**params, "resourceVersion": version}
            async for event in kube.watch(target.path, query, timeout_s,
                                          lambda: view.connected(target.name)):
                delay = BACKOFF_FIRST_S
                kind, item = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(int(item.get("code") or 500), str(item.get("message")))
                version = str((item.get("metadata") or {}).get("resourceVersion") or version)
                if kind != "BOOKMARK":
                    view.event(target.name, str(kind), item)
        except asyncio.CancelledError:
            raise
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            if isinstance(error, ApiError) and error.status == GONE:
                version = None
            view.lost(target.name)
            log.warning("watch of %s broke (%s); %s in %.1f s", target.name, error,
                        "relisting" if version is None else "resuming", delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_CAP_S)


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
