"""Whether this replica is paused by a peer: Kopf's peering rule, seen from kuzk's clock.

Kopf pauses a replica's watches while its peering object lists a live peer of higher (or the
same) priority, but it tells no handler, and kuzk's clock (``kuzk.contract.clock``) is kuzk's own: a
paused replica must stop its timers and syncs too. ``PeerWatch`` watches the same peering
object Kopf uses (one watch, no polling), applies the same rule with the same identity (the
one ``kuzk operator`` hands to Kopf) and calls ``on_change(paused)`` with its first answer
and whenever the answer flips.
A peer that dies silently stops counting when its record expires, as in Kopf.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kuzk.contract import api
from kuzk.contract.clock import SYSTEM, Clock, Timer
from kuzk.contract.retry import Backoff

log = logging.getLogger("kuzk.operator.peering")
GROUP, VERSION = "kopf.dev", "v1"
WATCH_TIMEOUT_S = 60
# A watch that broke lists and watches again after 2 s, however often it breaks.
PEERING_BACKOFF = Backoff(base=2.0, cap=2.0)


class PeeringError(Exception):
    """The peering object Kopf needs cannot be made."""


def ensure_peering(api_client: client.ApiClient, name: str, namespaces: Sequence[str]) -> None:
    """Create the peering object Kopf's replicas share (one per watched namespace, or one
    cluster-wide) where it is absent; raise ``PeeringError`` saying why one cannot be made."""
    custom = client.CustomObjectsApi(api_client)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "metadata": {"name": name}}
    scopes: list[str | None] = list(namespaces) or [None]
    for ns in scopes:
        try:
            if ns:
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, ns, "kopfpeerings", {**body, "kind": "KopfPeering"})
            else:
                custom.create_cluster_custom_object(
                    GROUP, VERSION, "clusterkopfpeerings", {**body, "kind": "ClusterKopfPeering"})
        except ApiException as e:
            if e.status == 409:  # exists: the next namespace may still lack its own
                continue
            details = api.error_status(e.body).get("details") or {}
            if e.status == 404 and ns and details.get("kind") == "namespaces":
                msg = f"cannot create peering object {name!r}: namespace {ns!r} does not exist"
                raise PeeringError(msg) from e
            if e.status == 404:
                msg = ("the kopf.dev peering CRDs are not installed:"
                       " run `kuzk crds | kubectl apply -f -`")
                raise PeeringError(msg) from e
            msg = f"cannot create peering object {name!r}: {e.reason}"
            raise PeeringError(msg) from e


@dataclass(frozen=True)
class Peering:
    """The peering this replica takes part in, as given to Kopf."""

    name: str
    identity: str
    priority: int
    namespaces: tuple[str, ...] = ()


def outranked(
    status: Mapping[str, Any], identity: str, priority: int, now: datetime
) -> tuple[bool, float | None]:
    """Kopf's rule on one peering object's status: paused while another live peer has a
    priority at least ours. Also returns the seconds until that answer can change because a
    blocking peer's record expires (None when no peer blocks)."""
    blocking: list[datetime] = []
    for peer, info in status.items():
        if peer == identity or not isinstance(info, Mapping):
            continue
        seen = info.get("lastseen")
        lastseen = api.parse_time(seen) if isinstance(seen, str) else now
        deadline = lastseen + timedelta(seconds=int(info.get("lifetime", 60)))
        if deadline > now and int(info.get("priority", 0)) >= priority:
            blocking.append(deadline)
    if not blocking:
        return False, None
    return True, max((min(blocking) - now).total_seconds(), 0.0)


class PeerWatch:
    """Watches the peering object(s) in a thread; calls ``on_change`` on the event loop."""

    def __init__(
        self, api_client: client.ApiClient, peering: Peering, on_change: Callable[[bool], None],
        clock: Clock = SYSTEM,
    ) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._clock = clock
        self._peering = peering
        self._on_change = on_change
        self._status: dict[str | None, Mapping[str, Any]] = {}
        self._paused: bool | None = None  # no answer yet
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: Timer | None = None
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        scopes: list[str | None] = list(self._peering.namespaces) or [None]
        for scope in scopes:
            thread = threading.Thread(
                target=self._watch, args=(scope,), name="kuzk-peering", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()

    # --- on the event loop -------------------------------------------------------------
    def seen(self, scope: str | None, status: Mapping[str, Any]) -> None:
        """Take what the watch of ``scope`` (a namespace, or None: cluster-wide) saw."""
        self._status[scope] = status
        self._evaluate()

    def _evaluate(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = self._clock.now()
        answers = [
            outranked(status, self._peering.identity, self._peering.priority, now)
            for status in self._status.values()
        ]
        paused = any(blocked for blocked, _ in answers)
        waits = [wait for _, wait in answers if wait is not None]
        if waits:
            self._timer = self._clock.call_later(min(waits) + 0.1, self._evaluate)
        if paused != self._paused:
            self._paused = paused
            self._on_change(paused)

    # --- in the watch thread -----------------------------------------------------------
    def _watch(self, namespace: str | None) -> None:
        name = self._peering.name
        if namespace is None:
            lister: Callable[..., Any] = self._custom.list_cluster_custom_object
            args: tuple[str, ...] = (GROUP, VERSION, "clusterkopfpeerings")
        else:
            lister = self._custom.list_namespaced_custom_object
            args = (GROUP, VERSION, namespace, "kopfpeerings")
        failures = 0
        while not self._stop.is_set():
            try:
                listing = lister(*args, field_selector=f"metadata.name={name}")
                failures = 0
                for item in listing.get("items", []):
                    self._deliver(namespace, item)
                version = listing["metadata"]["resourceVersion"]
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    lister, *args, field_selector=f"metadata.name={name}",
                    resource_version=version, timeout_seconds=WATCH_TIMEOUT_S,
                )
                for event in stream:
                    if self._stop.is_set():
                        return
                    body = event["object"]
                    self._deliver(namespace, {} if event["type"] == "DELETED" else body)
            except (ApiException, HTTPError, OSError, ValueError) as error:
                log.debug("peering watch of %s restarts: %s", name, error)
                failures += 1
                self._stop.wait(PEERING_BACKOFF.delay(failures))

    def _deliver(self, scope: str | None, body: Mapping[str, Any]) -> None:
        status = dict(body.get("status") or {})
        if self._loop is not None and not self._stop.is_set():
            self._loop.call_soon_threadsafe(self.seen, scope, status)
