"""A list and a watch of one collection in a thread, for the benchmarks that time what a
watch sees (bench/fleet_scale.py, bench/proofjob_vs_job.py)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

Obj = dict[str, Any]


class Follow(threading.Thread):
    """A list and a watch of one collection, read raw in a thread, that goes on watching from
    the last resourceVersion when a watch ends and lists again after 410 Gone (objects listed
    then are delivered as ADDED). ``on_event(type, object, arrival)`` sees each event;
    arrival is ``time.monotonic()`` when its bytes came in. ``relists`` counts the lists
    after the first: events missed meanwhile arrive late."""

    def __init__(self, what: str, request: Callable[..., Any],
                 on_event: Callable[[str, Obj, float], None]) -> None:
        super().__init__(name=f"follow {what}", daemon=True)
        self.what, self.request, self.on_event = what, request, on_event
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.relists = 0
        self._closed = False
        self._response: Any = None

    def run(self) -> None:
        rv: str | None = None
        try:
            while not self._closed:
                if rv is None:
                    listing = json.loads(self.request(_preload_content=False).data)
                    rv = str(listing["metadata"]["resourceVersion"])
                    if self.ready.is_set():
                        self.relists += 1
                    arrival = time.monotonic()
                    for item in listing.get("items") or []:
                        self.on_event("ADDED", item, arrival)
                rv = self._watch(rv)
        except Exception as e:  # reported to the waiting thread, which raises it
            if not self._closed:
                self.error = e
        finally:
            self.ready.set()

    def _watch(self, rv: str) -> str | None:
        """One watch request from ``rv``; the last resourceVersion seen (None: list again)."""
        self._response = self.request(
            watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=300,
            _preload_content=False, _request_timeout=(10, 330))
        self.ready.set()
        pending = b""
        for chunk in self._response.stream(amt=None, decode_content=False):
            arrival = time.monotonic()
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    if event["object"].get("code") == 410:
                        return None
                    msg = f"watch {self.what} failed: {event['object']}"
                    raise RuntimeError(msg)
                rv = str(event["object"]["metadata"]["resourceVersion"])
                if event["type"] != "BOOKMARK":
                    self.on_event(event["type"], event["object"], arrival)
        return rv

    def close(self) -> None:
        self._closed = True
        if self._response is not None:
            with contextlib.suppress(Exception):
                self._response.shutdown()
            with contextlib.suppress(Exception):
                self._response.release_conn()


def start_all(streams: list[Follow], timeout: float = 30) -> None:
    """Start each stream and wait until every one is watching; raise if one did not open."""
    for stream in streams:
        stream.start()
    for stream in streams:
        if not stream.ready.wait(timeout) or stream.error:
            msg = f"watch {stream.what} did not open: {stream.error}"
            raise RuntimeError(msg)
