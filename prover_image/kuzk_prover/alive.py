"""The prover's sign of life, for its pod's probes, so that no write to the API server says
that a prover is alive.

A thread of the prover beats every ``PULSE_S`` seconds (``Pulse``): it notes the time and
touches a file. The partition pod's readiness and liveness probes ask the prover over HTTP
(``kuzk_prover.probes``, in the same process: the kubelet starts nothing for them), which
answers from the time of the last beat. ``kuzk-alive`` (``main``) reads the file instead: the
exec probe of a prover image that cannot answer over HTTP, a process started per probe (about
40 ms of CPU each), the costlier fallback. A prover that stops (SIGSTOP, a debugger) or hangs
with the interpreter held stops beating and answering: its pod turns not ready first (the
screen shows its GPU idle as "lane not live"), then its liveness probe has the kubelet kill
it, the pod fails, and the operator's finalizer release frees the GPU phase it held. The file
is in the container's temporary directory (``TMPDIR``, else ``/tmp``: the partition pod mounts
an emptyDir there, its root filesystem being read-only). This module imports only the
standard library and ``kuzk.contract.pod`` (which imports only the standard library): a probe
starts quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kuzk.contract.pod import FAILED_EXIT_CODE, INVALID_INPUT_EXIT_CODE, OK_EXIT_CODE

PULSE_S = 2.0
FILE_NAME = "kuzk-prover-alive"


def alive_file() -> Path:
    """Where the prover's pulse is, for the prover and its probes alike."""
    return Path(os.environ.get("TMPDIR") or "/tmp") / FILE_NAME


class Pulse:
    """Beats every ``every`` seconds from a daemon thread, from ``start`` until ``stop``
    (which removes the file), each time ``beating`` says so (by default always: the process
    that keeps the pulse is the prover): notes the time (``age``) and touches ``path``. A
    context manager."""

    def __init__(self, path: Path | None = None, every: float = PULSE_S) -> None:
        self.path = path or alive_file()
        self.every = every
        self.beating: Callable[[], bool] = lambda: True
        self._beat = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kuzk-pulse", daemon=True)

    def start(self) -> Pulse:
        self._touch()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def __enter__(self) -> Pulse:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def age(self) -> float:
        """Seconds since the last beat (the monotonic clock: a change of wall time is none)."""
        return time.monotonic() - self._beat

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.beating():
                self._touch()

    def _touch(self) -> None:
        self._beat = time.monotonic()
        # A file that cannot be written makes kuzk-alive fail, which says what is wrong in
        # the pod's events; the proof itself goes on until then.
        with contextlib.suppress(OSError):
            self.path.touch()


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, a debugger's stop), as its /proc stat
    says; False where it cannot be read (it is gone, or this is not Linux)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the command's name, which is in parentheses and may hold spaces.
    return stat.rpartition(")")[2].split()[0] in ("T", "t")


def age(path: Path, now: float | None = None) -> float | None:
    """Seconds since the pulse last touched ``path``; None when there is none."""
    try:
        touched = path.stat().st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - touched)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kuzk-alive",
        description=f"Exit {OK_EXIT_CODE} if the prover's pulse is fresh, {FAILED_EXIT_CODE} if"
                    " it is older than --within seconds or missing (a readiness or liveness"
                    " probe of a partition pod).")
    parser.add_argument("--within", type=float, required=True, metavar="SECONDS",
                        help="how old the pulse may be")
    parser.add_argument("--file", type=Path, default=None,
                        help="the pulse file (default: $TMPDIR or /tmp, then "
                             f"{FILE_NAME})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.within <= 0:
        print(f"kuzk-alive: --within must be more than 0 seconds, not {args.within:g}")
        return INVALID_INPUT_EXIT_CODE
    path = args.file or alive_file()
    seconds = age(path)
    if seconds is None:
        print(f"kuzk-alive: no pulse at {path}: the prover has not started or is gone")
        return FAILED_EXIT_CODE
    if seconds > args.within:
        print(f"kuzk-alive: the prover's pulse is {seconds:.1f} s old (limit {args.within:g}"
              " s): it is stuck")
        return FAILED_EXIT_CODE
    return OK_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
