"""Status-server unit fixtures: ``clock`` (a settable clock) and ``view`` (a StatusView on that
clock with every resource registered, the ledger's ConfigMap included, fed by ``feed``)."""

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
    # Open modes counted up to now, so the figures are the protocol's exactly
    # (test_gpu_time.py checks the lag).
    view = StatusView(keep_finished=600, clock=clock, open_mode_lag=0)
    for resource in RESOURCES:
        view.add_watch(resource, resource)
    return view


@pytest.fixture
def feed(view: StatusView) -> Feed:
    """``feed(proofjobs=[...], workerstatuses=[...], ...)``: a full list of each resource
    named."""

    def apply(**lists: Iterable[dict[str, Any]]) -> StatusView:
        for resource, items in lists.items():
            view.listed(resource, list(items))
        return view

    return apply
