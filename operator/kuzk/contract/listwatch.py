"""List, then watch from that resourceVersion: the one list+watch loop of the operator's
streams (``kuzk.operator.streams``) and the status server's view (``kuzk.status.watches``).

A watch asks for bookmarks, so a quiet resource still moves its resourceVersion on. A watch
that breaks (connection refused, the API server restarting, a read timeout, the server
ending it) resumes from the last resourceVersion it saw; one the API server answers with 410
Gone (the version is too old, compacted away) lists again. Each break is one restart, told
to the sink. A sink that takes a list in pages (``PagedSink``, ``list_in_pages_and_watch``)
gets each page as it is read, so a large list is never held whole. A loop reads each object
whole, or, given a ``Shape``, only the fields a reader names. The API client is a small
aiohttp one, sharing the caller's event loop; its credentials come from the kubernetes
client's own configuration loaders (kubeconfig, exec plugins, in-cluster tokens). It only
reads.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import orjson
from kubernetes import client

from kuzk.contract.retry import Backoff

log = logging.getLogger("kuzk.contract.listwatch")

WATCH_TIMEOUT_S = 300
# A broken watch resumes (or lists again) after 0.2 s, doubling to 2 s while it keeps breaking.
WATCH_BACKOFF = Backoff(base=0.2, cap=2.0)
GONE = 410
Body = dict[str, Any]


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


@dataclass(frozen=True)
class Shape:
    """How a loop decodes what it reads: a watch event's line (``event``) and a list's answer
    (``listing``), each into plain JSON. ``WHOLE`` keeps everything; a reader that needs a few
    fields of large objects decodes with msgspec and a TypedDict of those fields
    (``kuzk.operator.caches.POD_SHAPE``), which reads past the rest without building it: a
    partition pod's managedFields and container specs are two thirds of its bytes. An ERROR
    event is always read whole (its Status says why the watch ended)."""

    event: Callable[[bytes], Any]
    listing: Callable[[bytes], Any]


WHOLE = Shape(orjson.loads, orjson.loads)


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

    async def list(self, path: str, params: Mapping[str, str],
                   shape: Shape = WHOLE) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=60, sock_connect=10)
        async with self.session.get(self.host + path, params=params, headers=self._headers(),
                                    timeout=timeout) as response:
            if response.status != 200:
                raise ApiError(response.status, (await response.text())[:300])
            data: dict[str, Any] = shape.listing(await response.read())
            return data

    async def watch(self, path: str, params: Mapping[str, str], timeout_s: int,
                    opened: Callable[[], None],
                    shape: Shape = WHOLE) -> AsyncIterator[dict[str, Any]]:
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
                        # decoding the events was a third of the operator's CPU: orjson, or
                        # only what a Shape names
                        event: dict[str, Any] = shape.event(line)
                        yield orjson.loads(line) if event.get("type") == "ERROR" else event

    async def close(self) -> None:
        await self.session.close()


class Sink(Protocol):
    """Where one list+watch loop delivers what it reads."""

    def listed(self, items: list[Body]) -> None:
        """A full list arrived (or, to a ``PagedSink``, its last page): it replaces everything
        of the loop's scope."""

    def event(self, kind: str, item: Body) -> None:
        """A watch event: ADDED, MODIFIED or DELETED (bookmarks are not delivered)."""

    def connected(self) -> None:
        """The API server accepted a watch."""

    def lost(self) -> None:
        """The loop broke; it will resume or list again (a list it was reading in pages is
        read again from its first page)."""


class PagedSink(Sink, Protocol):
    """A sink that takes a list page by page: ``page`` for each page but the last, which
    ``listed`` brings; together they are the list."""

    def page(self, items: list[Body]) -> None:
        """A page of a list that goes on."""


def params(selector: str | None = None, fields: str | None = None) -> dict[str, str]:
    """A list's and watch's query for a label and a field selector (None: none)."""
    return {**({"labelSelector": selector} if selector else {}),
            **({"fieldSelector": fields} if fields else {})}


def _version(listing: Body) -> str:
    return str((listing.get("metadata") or {}).get("resourceVersion", ""))


async def list_and_watch(kube: KubeClient, path: str, query: Mapping[str, str], sink: Sink,
                         wait: Callable[[float], Awaitable[None]], name: str = "",
                         shape: Shape = WHOLE) -> None:
    """List, then watch, until cancelled: resume on errors, list again on 410 Gone. ``wait``
    sleeps between tries (``WATCH_BACKOFF``); ``shape`` decodes what is read."""

    async def whole() -> str:
        listing = await kube.list(path, query, shape)
        sink.listed(listing.get("items") or [])
        return _version(listing)

    await _follow(kube, path, query, sink, wait, name or path, whole, shape)


async def list_in_pages_and_watch(kube: KubeClient, path: str, query: Mapping[str, str],
                                  sink: PagedSink, wait: Callable[[float], Awaitable[None]],
                                  name: str = "", *, limit: int) -> None:
    """``list_and_watch``, each list read ``limit`` objects at a time (``limit`` and
    ``continue``: one consistent list, as the API server pages it) and handed to ``sink`` page
    by page. A ``continue`` token that expires between two pages (410) starts the list again."""

    async def in_pages() -> str:
        listing = await kube.list(path, {**query, "limit": str(limit)})
        version = _version(listing)
        while token := (listing.get("metadata") or {}).get("continue"):
            sink.page(listing.get("items") or [])
            listing = await kube.list(path, {**query, "limit": str(limit), "continue": token})
        sink.listed(listing.get("items") or [])
        return version

    await _follow(kube, path, query, sink, wait, name or path, in_pages, WHOLE)


async def _follow(kube: KubeClient, path: str, query: Mapping[str, str], sink: Sink,
                  wait: Callable[[float], Awaitable[None]], name: str,
                  read_list: Callable[[], Awaitable[str]], shape: Shape) -> None:
    """The loop: ``read_list`` lists into the sink and answers the list's resourceVersion."""
    version: str | None = None
    failures = 0
    while True:
        try:
            if version is None:
                version = await read_list()
            timeout_s = random.randint(WATCH_TIMEOUT_S, WATCH_TIMEOUT_S * 6 // 5)
            async for event in kube.watch(path, {**query, "resourceVersion": version},
                                          timeout_s, sink.connected, shape):
                failures = 0
                kind, item = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise ApiError(int(item.get("code") or 500), str(item.get("message")))
                version = str((item.get("metadata") or {}).get("resourceVersion") or version)
                if kind != "BOOKMARK":
                    sink.event(str(kind), item)
        except asyncio.CancelledError:
            raise
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            if isinstance(error, ApiError) and error.status == GONE:
                version = None
            sink.lost()
            failures += 1
            delay = WATCH_BACKOFF.delay(failures)
            log.warning("watch of %s broke (%s); %s in %.1f s", name, error,
                        "relisting" if version is None else "resuming", delay)
            await wait(delay)
