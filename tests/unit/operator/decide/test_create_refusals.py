"""Which error answers to a pod create are refusals (400, 403 and 422, with the API server's
message) and which are outages the clock retries at once (anything else, and the 403 a
restarting API server gives before its admission plugins are ready)."""

from __future__ import annotations

import pytest

from kuzk.operator.decide.actions import Refusal
from kuzk.operator.decide.policies.refused import refusal


@pytest.mark.parametrize("status", [400, 403, 422])
def test_a_refusal_carries_the_api_servers_message(status: int) -> None:
    assert refusal(status, "exceeded quota: gpus") == Refusal(status, "exceeded quota: gpus")


@pytest.mark.parametrize(("status", "message"), [
    (403, 'pods "j-p0-a1" is forbidden: not yet ready to handle request'),
    (500, "etcdserver: request timed out"),
    (429, "storage is (re)initializing"),
])
def test_an_outage_is_no_refusal(status: int, message: str) -> None:
    assert refusal(status, message) is None
