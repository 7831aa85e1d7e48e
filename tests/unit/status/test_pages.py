"""Answers in proportion to the question: the served document is the reference render's, with
every job's line from its template, through changes of jobs, lanes, pods and time; pages follow
``metadata.continue`` through every job once; a token of a listing that changed is refused
(``Expired``) with one going on from the same job; ``fields`` chooses the fields; a job's line
is made again only when what it shows changed; the answers kept stay within their budget; a
server sets its first lists aside from the garbage collector."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import orjson
import pytest

from kuzk.status import answers, query
from kuzk.status.aggregate import Filters, render
from kuzk.status.query import Expired, Query
from kuzk.status.view import RESOURCES, StatusView
from tests.unit.status import builders as b
from tests.unit.status.conftest import Clock, Feed


async def now_made(view: StatusView, clock: Clock) -> None:
    """Wait until the view's moment is as of the clock's now (it is made in a thread; until
    then the last one is served when only time moved on)."""
    for _ in range(500):  # 5 s at most
        if (await view.answers.moment_now()).now == clock.now:
            return
        await asyncio.sleep(0.01)
    pytest.fail("no moment was made as of now")


async def served(view: StatusView, clock: Clock, q: Query | None = None) -> dict[str, Any]:
    """The answer as of a moment made now if the view changed (the clock moved past
    ``max_stale``), else the current one's."""
    clock.now += view.max_stale
    body: dict[str, Any] = json.loads((await view.answer(q or Query())).body)
    return body


def reference(view: StatusView, clock: Clock, filters: Filters | None = None
              ) -> dict[str, Any]:
    doc = render(view.snapshot(), now=clock.now, sync=view.sync(clock.now),
                 keep_finished=view.keep_finished, filters=filters or Filters())
    body: dict[str, Any] = json.loads(orjson.dumps(doc))
    return body


def fleet(feed: Feed, jobs: int = 7) -> None:
    """``jobs`` jobs in two namespaces and two kinds, one finished; a GPU whose holder and a
    waiting lane are partitions of job-1; an unschedulable pod of job-2."""
    made = [b.proofjob(f"job-{i}", b.part(0, "done", synthMs=9), b.part(1, "gpu"),
                       b.part(2, "pending"), count=3, created=b.T0 + i,
                       namespace="ns" if i % 3 else "other",
                       kind="porep-c2" if i % 2 else "snap-update")
            for i in range(jobs)]
    made.append(b.proofjob("ended", b.part(0, "done"), count=1, phase="Succeeded",
                           finished=b.T0 + 5, created=b.T0 - 1))
    holder = b.worker("W0", "gpu", job="job-1", partition=1, kind="porep-c2",
                      lanes=(b.lane("job-1", 2, stage="synth_done", kind="porep-c2",
                                    ready=b.T0 + 2),))
    feed(proofjobs=made, workerstatuses=[b.workerstatus("gpu-1", holder, b.worker("W1"))],
         nodes=[b.node("gpu-1", 2)], pods=[b.pod("job-2", 2, namespace="other",
                                                 unschedulable="0/1 nodes are available")],
         ledger=[])


async def test_the_served_document_is_the_reference_through_changes(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    fleet(feed)
    kinds = [Filters(), Filters(namespace="other"), Filters(kind="porep-c2")]

    async def same() -> None:
        clock.now += view.max_stale
        await now_made(view, clock)
        for filters in kinds:
            got = json.loads((await view.answer(Query(filters=filters))).body)
            assert got == reference(view, clock, filters), filters

    await same()
    # the holder moves to the waiting lane: both of job-1's partitions change
    moved = b.worker("W0", "gpu", job="job-1", partition=2, kind="porep-c2", stage="gpu",
                     since=b.T0 + 3)
    view.event("workerstatuses", "MODIFIED", b.workerstatus("gpu-1", moved, b.worker("W1")))
    await same()
    view.event("pods", "DELETED", b.pod("job-2", 2, namespace="other"))
    view.event("proofjobs", "MODIFIED", b.proofjob(
        "job-4", b.part(0, "done"), b.part(1, "failed", reason="ProverFailed", message="exit 3"),
        b.part(2, "synthesizing"), count=3, created=b.T0 + 4))
    view.event("proofjobs", "DELETED", b.proofjob("job-5", count=3))
    await same()
    clock.now = b.T0 + 5 + view.keep_finished + 1  # "ended" leaves the listing
    await same()
    assert "ns/ended" not in [p["job_id"] for p in reference(view, clock)["pipelines"]]


async def test_pages_follow_continue_through_every_job_once(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    fleet(feed)
    whole = (await served(view, clock))["pipelines"]
    seen, token, remaining = [], None, []
    while True:
        asked = Query(limit=3) if token is None else query.parse(
            [("limit", "3"), ("continue", token)])
        page = await served(view, clock, asked)
        seen += page["pipelines"]
        remaining.append(page["metadata"]["remaining_item_count"])
        token = page["metadata"]["continue"]
        if token is None:
            break
    assert [p["job_id"] for p in seen] == [p["job_id"] for p in whole]
    assert len(whole) == 8 and remaining == [5, 2, 0]


async def test_a_token_of_a_changed_listing_expires_and_goes_on_from_its_job(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    fleet(feed)
    first = await served(view, clock, Query(limit=4))
    token = first["metadata"]["continue"]
    # a status change keeps the listing: the token holds
    view.event("proofjobs", "MODIFIED", b.proofjob("job-6", b.part(0, "done"), count=3,
                                                   created=b.T0 + 6, namespace="other"))
    again = await served(view, clock, query.parse([("limit", "4"), ("continue", token)]))
    assert [p["name"] for p in again["pipelines"]] == ["job-3", "job-4", "job-5", "job-6"]
    # a new job changes it
    view.event("proofjobs", "ADDED", b.proofjob("job-0b", count=1, created=b.T0 + 0.5))
    clock.now += view.max_stale
    with pytest.raises(Expired) as expired:
        await view.answer(query.parse([("limit", "4"), ("continue", token)]))
    after = await served(view, clock, query.parse([("limit", "2"),
                                                   ("continue", expired.value.token)]))
    assert [p["name"] for p in after["pipelines"]] == ["job-3", "job-4"]


async def test_fields_choose_what_an_answer_holds(feed: Feed, view: StatusView,
                                                 clock: Clock) -> None:
    fleet(feed)
    summary = await served(view, clock, query.parse([("fields", "counters,fleet")]))
    assert list(summary) == ["fleet", "counters", "metadata"]
    assert summary["counters"] == reference(view, clock)["counters"]


@pytest.mark.parametrize(("params", "name", "says"), [
    ([("limit", "0")], "limit", "positive integer"),
    ([("limit", "-1")], "limit", "positive integer"),
    ([("limit", "ten")], "limit", "positive integer"),
    ([("fields", "fleet,colour")], "fields", "unknown field 'colour'"),
    ([("continue", "not a token!")], "continue", "not one this server issued"),
    ([("continue", "WzEsMl0")], "continue", "not one this server issued"),  # [1,2]
    ([("continue", query.token(Filters(kind="porep-c2"), ("t", "ns", "a"), "d"))], "continue",
     "issued for namespace= and kind=porep-c2"),
    ([("colour", "blue")], "colour", "unknown parameter"),
    ([("limit", "1"), ("limit", "2")], "limit", "more than once"),
], ids=["zero", "negative", "word", "field", "garbage", "forged", "other-query", "unknown",
        "repeated"])
def test_bad_parameters_are_refused_by_name(params: list[tuple[str, str]], name: str,
                                            says: str) -> None:
    with pytest.raises(query.BadParameter) as bad:
        query.parse(params)
    assert bad.value.name == name
    assert says in str(bad.value)


async def test_a_line_is_made_again_only_when_what_it_shows_changed(
        feed: Feed, view: StatusView, clock: Clock) -> None:
    fleet(feed)
    await served(view, clock)
    before = dict(view.answers.moment.templates)
    view.event("proofjobs", "MODIFIED", b.proofjob("job-3", b.part(0, "done"), count=3,
                                                   created=b.T0 + 3, namespace="other"))
    # a lane of job-1 moves on: job-1's line shows it
    lanes = (b.lane("job-1", 2, stage="synthesizing", kind="porep-c2"),)
    holder = b.worker("W0", "gpu", job="job-1", partition=1, kind="porep-c2", lanes=lanes)
    view.event("workerstatuses", "MODIFIED", b.workerstatus("gpu-1", holder, b.worker("W1")))
    await served(view, clock)
    after = view.answers.moment.templates
    remade = sorted(k for k in after if after[k] is not before[k])
    assert remade == ["ns/job-1", "other/job-3"]


async def test_the_answers_kept_stay_within_their_budget(
        feed: Feed, view: StatusView, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet(feed)
    whole = len((await view.answer(Query())).body)
    monkeypatch.setattr(answers, "CACHE_BYTES", 3 * whole)
    for limit in range(1, 9):
        await view.answer(Query(limit=limit))
    kept = view.answers._kept
    assert 1 < len(kept) < 9
    assert sum(a.size for a in kept.values()) <= 3 * whole


def test_a_server_sets_its_first_lists_aside_from_the_collector(clock: Clock) -> None:
    view = StatusView(keep_finished=600, clock=clock, freeze_first_lists=True)
    for resource in RESOURCES:
        view.add_watch(resource, resource)
    try:
        for resource in RESOURCES[:-1]:
            view.listed(resource, [])
        assert gc.get_freeze_count() == 0
        view.listed(RESOURCES[-1], [])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
