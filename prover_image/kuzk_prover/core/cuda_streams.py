"""How the CuPy fast path moves words between host and device and orders its work: the
``Streams`` protocol ``cuda.DevicePipeline`` drives, ``CupyStreams`` on a GPU (one stream per
column, one for copies, pinned host memory) and ``HostStreams`` (every step in order, NumPy
arrays), with which the tests drive the very same pipeline without a GPU."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

COLUMNS = 3
"""a, b, c: one stream each."""


class Streams(Protocol):
    """Where the words live on the host and how device work is ordered; ``device_ms`` is
    the device time of the last prepared run, where it is measured."""

    device_ms: float | None

    def on(self, lane: int) -> AbstractContextManager[object]: ...
    def host_words(self, column: Any) -> np.ndarray: ...
    def host_empty(self, n: int) -> np.ndarray: ...
    def begin(self) -> None: ...
    def upload(self, dst: Any, src: np.ndarray, lane: int) -> None: ...
    def download(self, dst: np.ndarray, src: Any, lane: int) -> None: ...
    def mark(self, lane: int) -> object: ...
    def wait(self, lane: int, mark: object) -> None: ...
    def finish(self) -> None: ...
    def give_back(self) -> None: ...


class HostStreams:
    """Streams of a pipeline whose device arrays are NumPy arrays: every step runs in order."""

    device_ms: float | None = None

    def on(self, lane: int) -> AbstractContextManager[object]:
        return contextlib.nullcontext()

    def host_words(self, column: Any) -> np.ndarray:
        return np.array(column, dtype=np.uint32)

    def host_empty(self, n: int) -> np.ndarray:
        return np.empty(n, dtype=np.uint32)

    def begin(self) -> None:
        return None

    def upload(self, dst: Any, src: np.ndarray, lane: int) -> None:
        np.copyto(dst, src)

    def download(self, dst: np.ndarray, src: Any, lane: int) -> None:
        np.copyto(dst, src)

    def mark(self, lane: int) -> object:
        return None

    def wait(self, lane: int, mark: object) -> None:
        return None

    def finish(self) -> None:
        return None

    def give_back(self) -> None:
        return None


class CupyStreams:
    """One CUDA stream per column, one for the downloads; pinned host memory for the words.

    The streams are blocking ones, ordered with the legacy default stream that the array API's
    CuPy operations use. ``device_ms`` is the span, in CUDA events, of the last run's device
    work: from ``begin`` to the end of its last kernel or copy.
    """

    def __init__(self) -> None:
        import cupy
        import cupyx

        self._cupy = cupy
        self._cupyx = cupyx
        self.lanes = [cupy.cuda.Stream() for _ in range(COLUMNS)]
        self.copies = cupy.cuda.Stream()
        self._start: Any = None
        self.device_ms: float | None = None

    def on(self, lane: int) -> AbstractContextManager[object]:
        return self.lanes[lane]  # type: ignore[no-any-return]

    def host_words(self, column: Any) -> np.ndarray:
        words = self._cupyx.empty_pinned(column.shape, dtype=np.uint32)
        np.copyto(words, column, casting="unsafe")
        return words  # type: ignore[no-any-return]

    def host_empty(self, n: int) -> np.ndarray:
        return self._cupyx.empty_pinned((n,), dtype=np.uint32)  # type: ignore[no-any-return]

    def begin(self) -> None:
        self._start = self.lanes[0].record()

    def upload(self, dst: Any, src: np.ndarray, lane: int) -> None:
        dst.set(src, stream=self.lanes[lane])

    def download(self, dst: np.ndarray, src: Any, lane: int) -> None:
        self.copies.wait_event(self.lanes[lane].record())
        src.get(stream=self.copies, out=dst, blocking=False)

    def mark(self, lane: int) -> object:
        return self.lanes[lane].record()

    def wait(self, lane: int, mark: object) -> None:
        self.lanes[lane].wait_event(mark)

    def finish(self) -> None:
        first = self.lanes[0]
        for stream in (*self.lanes[1:], self.copies):
            first.wait_event(stream.record())
        stop = first.record()
        stop.synchronize()
        self.device_ms = float(self._cupy.cuda.get_elapsed_time(self._start, stop))

    def give_back(self) -> None:
        self._cupy.get_default_memory_pool().free_all_blocks()
