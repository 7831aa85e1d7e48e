"""Status-server unit fixtures: ``clock`` (a settable clock) and ``view`` (a StatusView on that
clock with the four resources registered, fed by ``feed``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest

from kuzk.status.view import RESOURCES, StatusView
from tests.unit.status.builders import T0


@dataclass
class Clock:
    now: float = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


Feed = Callable[..., StatusView]


@pytest.fixture
def view(clock: Clock) -> StatusView:
    view = StatusView(keep_finished=600, clock=clock)
    for resource in RESOURCES:
        view.add_watch(resource, resource)
    return view


@pytest.fixture
def feed(view: StatusView) -> Feed:
    """``feed(proofjobs=[...], workerstatuses=[...], ...)``: a full list of each resource named,
    as a relist: the server is taken to have started (first list) before these objects, so
    what they show finished counts (a first list is the counters' baseline)."""

    def apply(**lists: Iterable[dict[str, Any]]) -> StatusView:
        for resource, items in lists.items():
            if not view.watches[resource].listed:
                view.listed(resource, [])
            view.listed(resource, list(items))
        return view

    return apply
