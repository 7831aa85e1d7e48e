"""A list handed to the view in pages (``StatusView.page``, then ``listed`` with its last):
each page's objects show at once, what the whole list lacks goes when it ends, a list broken
between pages is read again from its first page, and the view is ready only once every first
list has ended."""

from __future__ import annotations

from kuzk.status.view import StatusView
from tests.unit.status import builders as b
from tests.unit.status.conftest import Feed


def jobs(view: StatusView) -> list[str]:
    return sorted(view.jobs)


def test_pages_show_as_they_come_and_the_list_replaces_the_scope_when_it_ends(
        feed: Feed, view: StatusView) -> None:
    feed(proofjobs=[b.proofjob(name, count=1) for name in ("a", "b", "c")])
    view.page("proofjobs", [b.proofjob("a", b.part(0, "done"), count=1),
                            b.proofjob("d", count=1)])
    assert jobs(view) == ["ns/a", "ns/b", "ns/c", "ns/d"]
    assert view.jobs["ns/a"].partitions[0].state == "done"
    view.listed("proofjobs", [b.proofjob("c", count=1)])
    assert jobs(view) == ["ns/a", "ns/c", "ns/d"]


def test_a_list_broken_between_pages_counts_only_the_pages_of_the_list_read_again(
        feed: Feed, view: StatusView) -> None:
    feed(proofjobs=[b.proofjob("a", count=1)])
    view.page("proofjobs", [b.proofjob("x", count=1)])
    view.lost("proofjobs")
    view.page("proofjobs", [b.proofjob("a", count=1)])
    view.listed("proofjobs", [])
    assert jobs(view) == ["ns/a"]


def test_the_view_is_ready_once_every_first_list_has_ended(view: StatusView) -> None:
    for resource in view.watches:
        if resource != "proofjobs":
            view.listed(resource, [])
    view.page("proofjobs", [b.proofjob("a", count=1)])
    assert not view.ready
    view.listed("proofjobs", [b.proofjob("b", count=1)])
    assert view.ready and jobs(view) == ["ns/a", "ns/b"]
