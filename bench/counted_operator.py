"""``kuzk operator`` with its syncs and its Kopf watch events counted, for bench/fleet_scale.py.

Why: an operator that reads from caches makes no API call a benchmark could count syncs by,
and the API server's audit log records a watch once, when it starts, never the events it
delivers; so both counts come from inside. Every sync of a job asks the pure ``reconcile``
once: this wrapper counts the calls of ``operator.controller.reconcile``. Every event Kopf's watch
streams receive passes through ``kopf._cogs.clients.watching.infinite_watch`` (Kopf has no
public hook there): this wrapper counts them by resource, the objects of a stream's first list
apart from the events after it. Watch streams the operator runs itself, not through Kopf, are
not seen here; they are counted by the operator's own ``/metrics``. Then it hands over to the
real ``kuzk`` command; the operator is otherwise untouched. The counts are written, atomically,
as JSON (``{"syncs": n, "watch_events": {plural: n}, "listed": {plural: n}}``) to the file
named by ``KUZK_BENCH_COUNTS`` twice a second.

    KUZK_BENCH_COUNTS=/tmp/counts python bench/counted_operator.py operator [kuzk flags...]
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kopf._cogs.clients import watching

from kuzk import cli
from kuzk.operator import controller

lock = threading.Lock()  # syncs run in several threads
made = 0
events: Counter[str] = Counter()  # Kopf's watch events by resource plural
listed: Counter[str] = Counter()  # objects of the streams' lists
original = controller.reconcile
original_watch = watching.infinite_watch
CHANGES = ("ADDED", "MODIFIED", "DELETED")


def counted(*args: Any, **kwargs: Any) -> Any:
    global made
    with lock:
        made += 1
    return original(*args, **kwargs)


async def counted_watch(**kwargs: Any) -> AsyncIterator[Any]:
    """Kopf's stream of one resource, each raw event counted as it passes."""
    plural = str(kwargs["resource"].plural)
    async for event in original_watch(**kwargs):
        if isinstance(event, dict):
            kind = event.get("type")
            with lock:
                if kind in CHANGES:
                    events[plural] += 1
                elif kind is None:  # an object of the stream's list, not an event
                    listed[plural] += 1
        yield event


def report(path: Path, stop: threading.Event) -> None:
    tmp = path.with_suffix(".tmp")
    while not stop.wait(0.5):
        with lock:
            counts = {"syncs": made, "watch_events": dict(events), "listed": dict(listed)}
        tmp.write_text(json.dumps(counts))
        tmp.replace(path)


def main() -> int:
    target = os.environ.get("KUZK_BENCH_COUNTS")
    if not target:
        print("error: set KUZK_BENCH_COUNTS to the file that gets the counts", file=sys.stderr)
        return 2
    controller.reconcile = counted  # type: ignore[assignment]
    watching.infinite_watch = counted_watch
    threading.Thread(target=report, args=(Path(target), threading.Event()), daemon=True).start()
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
