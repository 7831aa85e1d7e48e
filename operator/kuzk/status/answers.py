"""The answers of one view: its moments, made one at a time, and each query's answer per moment.

A moment (``fragments.Moment``) is made in a thread from what the view prepares on the event
loop (``Source.prepare``: the fields besides ``pipelines``, and only the jobs whose line
changed), when the revision moved on or ``refresh`` seconds passed. While one is made,
requests get the last one if only time moved on or it is younger than ``max_stale``, so a
change delays nobody. Each query's answer (its body and gzip, assembled in a thread) is made
once per moment, and the answers of the current moment are kept within ``CACHE_BYTES``; the
ETag names an answer, so ``If-None-Match`` costs nothing.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from kuzk.status import fragments
from kuzk.status.aggregate import Snapshot, Sync
from kuzk.status.fragments import Moment, Stale, Template
from kuzk.status.query import Expired, Query

# Answers kept (their gzip, and their bodies up to PLAIN_KEPT): the whole document of ten
# thousand jobs is 27 MB, 1 MB gzipped; a page of a hundred jobs and 512 GPUs, 1 MB and 50 kB.
CACHE_BYTES = 32 * 1024 * 1024
PLAIN_KEPT = 2 * 1024 * 1024
GZIP_LEVEL = 6
GZIP_WBITS = 31  # zlib's gzip container
PIECES_PACKED = 4096  # pieces compressed at a time: a few hundred kB


@dataclass(frozen=True)
class Preparation:
    """What a moment is made of (``fragments.moment``'s arguments)."""

    revision: int
    now: float
    snap: Snapshot
    sync: Sync
    kept: dict[str, Template]
    stale: dict[str, Stale]


class Source(Protocol):
    """The view, as its answers read it."""

    revision: int
    keep_finished: float
    max_stale: float
    refresh: float
    instance: str

    @property
    def clock(self) -> Callable[[], float]: ...

    def prepare(self, templates: Mapping[str, Template], revision: int) -> Preparation: ...


@dataclass(frozen=True)
class Answer:
    """A query's answer as of one moment (``serial``): its gzip, and its body where that is
    small (``PLAIN_KEPT``); a larger one is kept only as its gzip."""

    etag: str
    gzipped: bytes
    plain: bytes | None
    serial: int

    @property
    def body(self) -> bytes:
        return self.plain if self.plain is not None else gzip.decompress(self.gzipped)

    @property
    def size(self) -> int:
        return len(self.gzipped) + len(self.plain or b"")


Made = tuple[bytes, bytes | None]  # an answer's gzip, and its body where it is small


def _assemble(m: Moment, q: Query) -> Made:
    """An answer's gzip, compressed as its pieces come (a large body is never joined whole),
    and its body where it is small."""
    pieces = fragments.assemble(m, q)
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    packed = [packer.compress(b"".join(pieces[at:at + PIECES_PACKED]))
              for at in range(0, len(pieces), PIECES_PACKED)]
    packed.append(packer.flush())
    small = sum(map(len, pieces)) <= PLAIN_KEPT
    return b"".join(packed), b"".join(pieces) if small else None


def _next(p: Preparation, serial: int, keep_finished: float,
          asked: list[Query]) -> tuple[Moment, list[tuple[Query, Made]]]:
    """A new moment and its answers to ``asked`` (those that still hold: a page of a listing
    that changed is left to its next request, which learns it expired)."""
    m = fragments.moment(serial, p.revision, p.now, keep_finished, p.snap, p.sync, p.kept,
                         p.stale)
    made = []
    for q in asked:
        try:
            made.append((q, _assemble(m, q)))
        except Expired:
            continue
    return m, made


class Answers:
    def __init__(self, source: Source) -> None:
        self.source = source
        self.moment: Moment | None = None
        self._making: asyncio.Task[Moment] | None = None
        self._kept: OrderedDict[Query, Answer] = OrderedDict()
        self._asked: set[Query] = set()  # the kept answers served in this moment
        self._assembling: dict[tuple[Query, int], asyncio.Task[Made]] = {}
        self._made = 0

    async def answer(self, q: Query) -> Answer:
        """The answer to ``q``, from the current moment (``moment_now``), assembled once per
        moment. Raises ``query.Expired`` for a ``continue`` token of another listing."""
        m = await self.moment_now()
        cached = self._kept.get(q)
        if cached is None or cached.serial != m.serial:
            task = self._assembling.get((q, m.serial))
            if task is None:
                task = asyncio.create_task(asyncio.to_thread(_assemble, m, q),
                                           name=f"answer {q}")
                self._assembling[(q, m.serial)] = task
                task.add_done_callback(lambda _: self._assembling.pop((q, m.serial), None))
            made = await asyncio.shield(task)
            cached = self._kept.get(q)
            if cached is None or cached.serial != m.serial:
                cached = self._keep(q, m.serial, made)
        if q in self._kept:
            self._kept.move_to_end(q)
            self._asked.add(q)
        return cached

    def _keep(self, q: Query, serial: int, made: Made) -> Answer:
        """The answer, kept while its moment is the current one, within CACHE_BYTES."""
        self._made += 1
        answer = Answer(f'"{self.source.instance}.{serial}.{self._made}"', *made, serial)
        if self.moment is None or self.moment.serial != serial:
            return answer
        self._kept[q] = answer
        total = sum(a.size for a in self._kept.values())
        while total > CACHE_BYTES and len(self._kept) > 1:
            total -= self._kept.popitem(last=False)[1].size
        return answer

    async def moment_now(self) -> Moment:
        """The current moment while it is current (same revision, made less than ``refresh``
        ago); while a new one is made, the last one if only time moved on or it is younger
        than ``max_stale``; else the new one."""
        view, last = self.source, self.moment
        now = view.clock()
        current = last is not None and last.revision == view.revision
        if last is not None and current and now - last.now < view.refresh:
            return last
        if self._making is None:
            self._making = asyncio.create_task(self._make(), name="status moment")
        if last is not None and (current or now - last.now < view.max_stale):
            return last
        return await asyncio.shield(self._making)

    async def _make(self) -> Moment:
        """A new moment, with the answers asked of the last one made again beforehand, so
        their pollers find them ready."""
        try:
            last = self.moment
            p = self.source.prepare(last.templates if last else {},
                                    last.revision if last else -1)
            asked = [q for q in self._kept if q in self._asked]
            made, answers = await asyncio.to_thread(
                _next, p, (last.serial if last else 0) + 1, self.source.keep_finished, asked)
        finally:
            self._making = None
        self.moment = made
        self._kept.clear()
        self._asked.clear()
        for q, answer in answers:
            self._keep(q, made.serial, answer)
        return made
