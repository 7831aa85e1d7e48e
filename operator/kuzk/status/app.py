"""The HTTP surface: ``/status``, ``/metrics``, the dashboard, ``/healthz`` and ``/readyz``.

``make_app`` builds the aiohttp application around a view; given a Kubernetes configuration it
also starts the watches that keep the view current (through ``cleanup_ctx``). No request calls
the API server: each reads the view, and ``/status`` answers from the document cached for the
current moment (304 when the client already has it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from kubernetes import client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE
from kuzk.contract.listwatch import KubeClient
from kuzk.status import metrics, query
from kuzk.status.view import StatusView
from kuzk.status.watches import Watches

STATIC = Path(__file__).parent / "static"
QUERY_LIMIT = 8 * 1024
# aiohttp refuses request lines over 8190 bytes with a bare 400; allow longer ones so a long
# query string gets the 414 that names the problem. A line over this one is refused before
# any handler runs, with the same JSON (``_Connection``).
LINE_LIMIT = 128 * 1024
ALLOWED_METHODS = ("GET", "HEAD")
COALESCED = 16 * 1024  # a body's bytes written with its headers (``_send``)
log = logging.getLogger("kuzk.status")


@dataclass(frozen=True)
class Source:
    """Where the view's objects come from: the API server, the namespaces to watch and the
    ledger's ConfigMap (namespace, name; ``kuzk.contract.ledger``)."""

    configuration: client.Configuration
    namespaces: Sequence[str] = field(default_factory=tuple)
    ledger: tuple[str, str] | None = None


VIEW = web.AppKey("view", StatusView)
REGISTRY = web.AppKey("registry", CollectorRegistry)
SOURCE = web.AppKey("source", Source)


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, "status": status, **extra}, status=status)


@web.middleware
async def guard(request: web.Request,
                handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> web.StreamResponse:
    """Method, query length and unknown paths, answered as JSON before any handler runs."""
    if request.method not in ALLOWED_METHODS:
        response = _error(405, f"method {request.method} is not allowed; use GET or HEAD")
        response.headers["Allow"] = ", ".join(ALLOWED_METHODS)
        return response
    if len(request.query_string.encode()) > QUERY_LIMIT:
        return _error(414, f"the query string is over {QUERY_LIMIT} bytes")
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return _error(404, f"no such path: {request.path}",
                      paths=["/", "/status", "/metrics", "/healthz", "/readyz"])


class _Connection(web.RequestHandler):
    """aiohttp's connection handler, answering a request its parser refuses (a request line
    over LINE_LIMIT, a header over aiohttp's field limit, a malformed request) in the JSON of
    every other error, logged on one line instead of with aiohttp's traceback."""

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None, message: str | None = None
                     ) -> web.StreamResponse:
        if status != 400 or request.writer.output_size > 0:
            return super().handle_error(request, status, exc, message)
        if isinstance(exc, LineTooLong) and exc.args[1:2] == (LINE_LIMIT,):
            response = _error(414, f"the query string is over {QUERY_LIMIT} bytes (the request"
                                   f" line is over {LINE_LIMIT})")
        elif isinstance(exc, LineTooLong):
            response = _error(431, f"a request header is over {exc.args[1]} bytes")
        else:
            reason = (str(message or exc).strip().splitlines() or ["unreadable"])[0]
            response = _error(400, f"malformed request: {reason}")
        log.info("refused a request from %s: %s", request.remote, response.text)
        response.force_close()
        return response


class _Server(web.Server):
    def __call__(self) -> web.RequestHandler:
        return _Connection(self, loop=self._loop, **self._kwargs)


class Runner(web.AppRunner):
    """``web.AppRunner`` whose connections are ``_Connection``s."""

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()
        return _Server(made.request_handler, request_factory=made.request_factory,
                       handler_cancellation=made.handler_cancellation, loop=made._loop,
                       **made._kwargs)


@functools.lru_cache(maxsize=1024)
def _parse(query_string: str) -> query.Query:
    """A query string's question: the same few strings come from every poller."""
    return query.parse(parse_qsl(query_string, keep_blank_values=True))


def _matches(header: str, etag: str) -> bool:
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or etag in tags


async def status(request: web.Request) -> web.StreamResponse:
    try:
        asked = _parse(request.query_string)
        answer = await request.app[VIEW].answer(asked)
    except query.BadParameter as bad:
        return _error(400, str(bad), parameter=bad.name)
    except query.Expired as expired:
        # As the API server answers a continue token whose snapshot is gone.
        return _error(410, "the listing changed since this continue token was issued: start "
                           "again without continue, or go on with this answer's continue "
                           "(pipelines that joined or left meanwhile may be missed)",
                      reason="Expired", parameter="continue", **{"continue": expired.token})
    headers = {"ETag": answer.etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
    if _matches(request.headers.get("If-None-Match", ""), answer.etag):
        return web.Response(status=304, headers=headers)
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        headers["Content-Encoding"] = "gzip"
        body = answer.gzipped
    elif answer.plain is not None:
        body = answer.plain
    else:  # a large answer is kept only as its gzip
        body = await asyncio.to_thread(lambda: answer.body)
    if len(body) <= COALESCED or request.method == "HEAD":  # a Response sends no body to HEAD
        return web.Response(body=body, content_type="application/json", headers=headers)
    return await _send(request, body, headers)


async def _send(request: web.Request, body: bytes, headers: dict[str, str]
                ) -> web.StreamResponse:
    """A large body, sent from the answer's own bytes: aiohttp joins the headers and the first
    write into one new buffer (a copy of the whole body, on this Python), so only its first
    ``COALESCED`` bytes go with the headers, and the rest as a view of the kept bytes (the
    transport copies only what the socket does not take at once)."""
    response = web.StreamResponse(headers=headers)
    response.content_type = "application/json"
    response.content_length = len(body)
    await response.prepare(request)
    view = memoryview(body)
    await response.write(view[:COALESCED])
    await response.write(view[COALESCED:])
    await response.write_eof()
    return response


async def prometheus(request: web.Request) -> web.Response:
    view = request.app[VIEW]
    if not view.ready:
        # Counters read before every first list is in (the ledger's included) would miss what
        # the objects not listed yet count, and go up later by what never happened then.
        waiting = ", ".join(sorted(name for name, w in view.watches.items() if not w.listed))
        return web.Response(status=503,
                            text=f"not ready: waiting for the first list of {waiting}\n")
    body = generate_latest(request.app[REGISTRY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def favicon(request: web.Request) -> web.Response:
    """No icon: an answer, so a browser's automatic request is not logged as a 404."""
    return web.Response(status=204)


async def readyz(request: web.Request) -> web.Response:
    view = request.app[VIEW]
    waiting = sorted(name for name, w in view.watches.items() if not w.listed)
    if view.ready:
        return web.json_response({"ready": True})
    return web.json_response({"ready": False, "waiting_for": waiting}, status=503)


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def _watching(app: web.Application) -> AsyncIterator[None]:
    source = app[SOURCE]
    kube = KubeClient(source.configuration)
    watches = Watches.start(kube, app[VIEW], list(source.namespaces), source.ledger)
    try:
        yield
    finally:
        await watches.stop()
        await kube.close()


def make_app(view: StatusView, source: Source | None = None) -> web.Application:
    """The status application over ``view``; with a ``source`` its watches feed the view."""
    app = web.Application(middlewares=[guard], handler_args={"max_line_size": LINE_LIMIT})
    app[VIEW] = view
    app[REGISTRY] = metrics.registry(view)
    app.router.add_get("/", index)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", prometheus)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_static("/static/", STATIC)
    if source is not None:
        app[SOURCE] = source
        app.cleanup_ctx.append(_watching)
    return app


def serve(source: Source, *, host: str, port: int, keep_finished: float,
          gpu_resource: str = DEFAULT_GPU_RESOURCE) -> None:
    """Run the status server until SIGINT or SIGTERM."""
    view = StatusView(keep_finished=keep_finished, gpu_resource=gpu_resource,
                      freeze_first_lists=True)
    log.info("serving on %s:%d", host, port)
    # What web.run_app does, with the Runner above: SIGINT and SIGTERM end the loop with
    # GracefulExit, and asyncio.run cancels _serve, whose cleanup stops the watches.
    with contextlib.suppress(web.GracefulExit, KeyboardInterrupt):
        asyncio.run(_serve(make_app(view, source), host, port))


async def _serve(app: web.Application, host: str, port: int) -> None:
    runner = Runner(app, access_log=None, keepalive_timeout=15, handle_signals=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
