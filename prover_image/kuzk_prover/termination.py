"""Writing the termination message: the one place the pod's result leaves the process.

The kubelet copies this file (at most 4096 bytes) into the pod's status when the container
ends. It must never be seen half-written, so the text goes to a temporary file in the same
directory and is renamed over the target. In a real pod the target is a file bind-mounted
by the kubelet and /dev is not writable by a non-root user, so the rename fails there; then the
whole text goes in one write() call, with SIGTERM blocked by the caller.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from kuzk.contract.pod import TERMINATION_MESSAGE_PATH

MAX_BYTES = 4096


class MessageTooLarge(ValueError):
    """The message would be cut by the kubelet."""


def message_path(env: dict[str, str] | os._Environ[str]) -> Path:
    """The path the env's TERMINATION_MESSAGE_PATH names (a test kubelet's), else the pod's
    (``kuzk.contract.pod.TERMINATION_MESSAGE_PATH``)."""
    return Path(env.get("TERMINATION_MESSAGE_PATH") or TERMINATION_MESSAGE_PATH)


def one_line(text: str, limit: int = 1024) -> str:
    """``text`` on one line, cut to ``limit`` characters: a failure reason for the message."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def brief(error: BaseException) -> str:
    """An exception on one line, with its type: what a log line or a pod's message shows."""
    text = one_line(str(error), limit=400)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def write_message(path: Path, text: str) -> None:
    """Replace the file at ``path`` with ``text`` as a whole, or raise OSError."""
    data = text.encode()
    if len(data) >= MAX_BYTES:
        msg = f"termination message is {len(data)} bytes, the limit is {MAX_BYTES}"
        raise MessageTooLarge(msg)
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError:
        _write_once(path, data)
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        _write_once(path, data)


def _write_once(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if os.write(fd, data) != len(data):
            msg = f"short write to {path}"
            raise OSError(msg)
    finally:
        os.close(fd)
