"""``kuzk operator`` with its syncs counted, for bench/fleet_scale.py's "LISTs per sync".

Why: an operator that reads from caches makes no API call a benchmark could count syncs by,
so the count comes from inside: every sync of a job asks the pure ``reconcile`` once, and this
wrapper counts the calls of ``kuzk.controller.reconcile`` before it hands over to the real
``kuzk`` command. The operator is otherwise untouched. The count is written, atomically,
to the file named by ``KUZK_BENCH_SYNCS`` twice a second.

    KUZK_BENCH_SYNCS=/tmp/syncs python bench/counted_operator.py operator [kuzk flags...]
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from kuzk import cli, controller

lock = threading.Lock()  # syncs run in several threads
made = 0
original = controller.reconcile


def counted(*args: Any, **kwargs: Any) -> Any:
    global made
    with lock:
        made += 1
    return original(*args, **kwargs)


def report(path: Path, stop: threading.Event) -> None:
    tmp = path.with_suffix(".tmp")
    while not stop.wait(0.5):
        tmp.write_text(str(made))
        tmp.replace(path)


def main() -> int:
    target = os.environ.get("KUZK_BENCH_SYNCS")
    if not target:
        print("error: set KUZK_BENCH_SYNCS to the file that gets the count", file=sys.stderr)
        return 2
    controller.reconcile = counted  # type: ignore[assignment]
    threading.Thread(target=report, args=(Path(target), threading.Event()), daemon=True).start()
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
