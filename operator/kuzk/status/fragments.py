"""Each job's part of ``/status``, serialized once per change, and answers assembled from them.

At ten thousand jobs, building and serializing every job's line on each render was a second of
CPU, whatever had changed. A job's line (``aggregate.pipeline``) depends on the job, the lanes
of its partitions and their unschedulable pods, and on the clock only through its time fields.
So each job keeps a ``Template``: its line serialized once, with a placeholder for each time
field and the moment that field counts from, made again only when one of those inputs changes
(``Signature``). A ``Moment`` is the view as of one instant: every job's template in the
document's order and the fields no query changes, serialized; ``assemble`` answers a query from
it, filling in each time field as of the moment's ``now``. Its work is proportional to the
jobs it answers with.
"""

from __future__ import annotations

import bisect
import hashlib
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain

import orjson

from kuzk.contract import workerstatus
from kuzk.contract.ledger import Tally
from kuzk.contract.workerstatus import lane_model
from kuzk.status import aggregate, query
from kuzk.status.aggregate import Filters, LaneKey, PodKey, Snapshot, Sync
from kuzk.status.objects import Job, Pod
from kuzk.status.query import Expired, OrderKey, Query

_NONCE = secrets.token_hex(8)  # no string a user writes can be mistaken for a placeholder
_PLACEHOLDER = re.compile(rb'"kuzk-age-' + _NONCE.encode() + rb'-(\d+)"')
LISTINGS_KEPT = 16
LaneEntry = tuple[workerstatus.Worker, lane_model.Lane]
# What a job's line was made from besides the job: its lanes (partition, attempt, stage,
# holding the GPU phase) and its unschedulable pods (partition, attempt, why).
Signature = tuple[tuple[tuple[int, int, str, bool], ...], tuple[tuple[int, int, str], ...]]


@dataclass(frozen=True, slots=True)
class Template:
    """A job's line, serialized: ``chunks`` with a time field between each two, each the
    seconds since its entry of ``moments``."""

    job: Job
    signature: Signature
    chunks: tuple[bytes, ...]
    moments: tuple[float, ...]
    queued: int
    order: OrderKey


Stale = tuple[Job, "Inputs", Signature]  # a job whose line is made again, and of what


@dataclass(frozen=True, slots=True)
class Inputs:
    """What a job's line is made of besides the job: its lanes and pods (``aggregate``'s
    keys), and since when each partition is in its state."""

    lanes: Mapping[LaneKey, LaneEntry]
    pods: Mapping[PodKey, Pod]
    since: tuple[float | None, ...]


NOTHING: Signature = ((), ())  # a job without lanes or unschedulable pods


def signature(lanes: Mapping[LaneKey, LaneEntry], pods: Mapping[PodKey, Pod]) -> Signature:
    return (tuple(sorted((index, attempt, str(lane.stage),
                          worker.holder is not None and worker.holder.pod.uid == lane.pod.uid)
                         for (_, _, index, attempt), (worker, lane) in lanes.items())),
            tuple(sorted((p.partition, p.attempt, p.unschedulable or "")
                         for p in pods.values())))


def template(job: Job, inputs: Inputs, made_of: Signature) -> Template:
    moments: list[float] = []

    def placeholder(moment: float) -> str:
        moments.append(moment)
        return f"kuzk-age-{_NONCE}-{len(moments) - 1}"

    line = aggregate.pipeline(job, inputs.lanes, inputs.pods, inputs.since, placeholder)
    pieces = _PLACEHOLDER.split(orjson.dumps(line))
    return Template(job, made_of, tuple(pieces[0::2]),
                    tuple(moments[int(i)] for i in pieces[1::2]), aggregate.queued(job),
                    aggregate.job_order(job))


@dataclass(frozen=True)
class Listing:
    """The jobs a filter admits, shown, in order; ``digest`` names the listing (the
    ``continue`` token carries it)."""

    rows: tuple[Template, ...]
    keys: tuple[OrderKey, ...]
    digest: str
    queue_depth: int


@dataclass
class Moment:
    """The view as of ``now``: every job's template (``templates``, by key; ``ordered``, in
    the document's order, and whether each is ``shown``) and the fields no query changes
    (``sections``, serialized). A moment makes few objects the garbage collector tracks (no
    tuple per job), so that making one every few seconds brings no full collection on."""

    serial: int
    revision: int
    now: float
    templates: dict[str, Template]
    ordered: tuple[Template, ...]
    shown: tuple[bool, ...]
    sections: Mapping[str, bytes]
    counts: Tally
    listings: dict[Filters, Listing] = field(default_factory=dict)

    def listing(self, filters: Filters) -> Listing:
        kept = self.listings.get(filters)
        if kept is not None:
            return kept
        admitted = [(t, shown) for t, shown in zip(self.ordered, self.shown, strict=True)
                    if filters.admits(t.job.namespace, t.job.proof_kind)]
        rows = tuple(t for t, shown in admitted if shown)
        keys = tuple(t.order for t in rows)
        digest = hashlib.blake2b("\n".join("\t".join(k) for k in keys).encode(),
                                 digest_size=8).hexdigest()
        made = Listing(rows, keys, digest, sum(t.queued for t, _ in admitted))
        if len(self.listings) < LISTINGS_KEPT:
            self.listings[filters] = made
        return made


def moment(serial: int, revision: int, now: float, keep_finished: float, snap: Snapshot,
           sync: Sync, kept: Mapping[str, Template],
           stale: Mapping[str, Stale]) -> Moment:
    """The moment of ``snap`` (its summary: jobs are in ``kept``, whose templates still
    hold, and ``stale``, whose lines are made again)."""
    templates = dict(kept)
    for key, (job, inputs, made_of) in stale.items():
        templates[key] = template(job, inputs, made_of)
    ordered = tuple(sorted(templates.values(), key=lambda t: t.order))
    sections = {name: orjson.dumps(value)
                for name, value in aggregate.summary(snap, now, sync).items()}
    return Moment(serial, revision, now, templates, ordered,
                  tuple(aggregate.is_shown(t.job, now, keep_finished) for t in ordered),
                  sections, snap.counts)


def fill(out: list[bytes], rows: Sequence[Template], now: float) -> None:
    """Append the jobs' lines to ``out``, comma-separated, each time field as of ``now``."""
    ages = orjson.dumps([round(now - m, 3) if now > m else 0.0 for t in rows for m in t.moments])
    values = ages[1:-1].split(b",")
    at = 0
    for n, t in enumerate(rows):
        if n:
            out.append(b",")
        out.append(t.chunks[0])
        if len(t.chunks) > 1:
            count = len(t.chunks) - 1
            out.extend(chain.from_iterable(zip(values[at:at + count], t.chunks[1:],
                                               strict=True)))
            at += count


def assemble(m: Moment, q: Query) -> list[bytes]:
    """The answer to ``q`` as of ``m``, in pieces (the whole document of ten thousand jobs is
    27 MB; joined, each answer would be one more allocation of that size): its fields in the
    document's order, one page of ``pipelines``, and ``metadata``. Raises ``Expired`` for a
    token of another listing."""
    listing = m.listing(q.filters)
    start = 0
    if q.after is not None:
        start = bisect.bisect_right(listing.keys, q.after)
        if q.listing != listing.digest:
            raise Expired(query.token(q.filters, q.after, listing.digest))
    end = len(listing.rows) if q.limit is None else min(len(listing.rows), start + q.limit)
    page = listing.rows[start:end]
    follows = len(listing.rows) - end
    metadata = {"continue": query.token(q.filters, page[-1].order, listing.digest)
                if follows and page else None,
                "remaining_item_count": follows}
    out = [b"{"]
    for name in q.fields:
        out.append(b'"' + name.encode() + b'":')
        if name == "pipelines":
            out.append(b"[")
            fill(out, page, m.now)
            out.append(b"]")
        elif name == "counters":
            out.append(orjson.dumps(aggregate.counters(m.counts, listing.queue_depth,
                                                       q.filters)))
        else:
            out.append(m.sections[name])
        out.append(b",")
    out.append(b'"metadata":' + orjson.dumps(metadata) + b"}")
    return out


def inputs_by_job(lanes: Mapping[LaneKey, LaneEntry], pods: Mapping[PodKey, Pod]
                  ) -> tuple[dict[tuple[str, str], dict[LaneKey, LaneEntry]],
                             dict[tuple[str, str], dict[PodKey, Pod]]]:
    """The lanes by their job (namespace, name), and the unschedulable pods by their job's
    (namespace, job label): what ``Inputs`` takes of each."""
    by_lane: dict[tuple[str, str], dict[LaneKey, LaneEntry]] = {}
    for k, entry in lanes.items():
        by_lane.setdefault((k[0], k[1]), {})[k] = entry
    by_pod: dict[tuple[str, str], dict[PodKey, Pod]] = {}
    for k, pod in pods.items():
        if pod.unschedulable:
            by_pod.setdefault((k[0], k[1]), {})[k] = pod
    return by_lane, by_pod

