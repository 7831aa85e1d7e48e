"""The one backoff rule and the one transient-error rule (``kuzk.contract.retry``), and the
timings each loop names with them."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError, ProtocolError

from kuzk.contract.listwatch import WATCH_BACKOFF
from kuzk.contract.retry import Backoff, is_transient
from kuzk.contract.workerstatus.writes import CONFLICT_BACKOFF
from kuzk.operator.ledger_store import FOLD_BACKOFF
from kuzk.operator.peering import PEERING_BACKOFF
from kuzk.operator.workqueue import RUN_BACKOFF
from kuzk_prover.outage import WRITE_BACKOFF


def test_without_jitter_the_delay_doubles_from_the_base_up_to_the_cap() -> None:
    backoff = Backoff(base=0.2, cap=2.0)
    assert [backoff.delay(n) for n in range(1, 7)] == pytest.approx(
        [0.2, 0.4, 0.8, 1.6, 2.0, 2.0])


@pytest.mark.parametrize(("jitter", "low"), [(0.5, 0.5), (1.0, 0.0)])
def test_jitter_draws_that_share_of_the_delay_at_random(jitter: float, low: float) -> None:
    backoff = Backoff(base=1.0, cap=4.0, jitter=jitter)
    for failures, ceiling in ((1, 1.0), (2, 2.0), (9, 4.0)):
        drawn = [backoff.delay(failures) for _ in range(300)]
        assert all(low * ceiling <= d <= ceiling for d in drawn)
        assert len(set(drawn)) > 200
        assert min(drawn) < (low + 0.1) * ceiling


def test_each_loop_keeps_its_timings() -> None:
    assert Backoff(0.5, 8.0, jitter=0.5) == RUN_BACKOFF
    assert Backoff(0.01, 0.25, jitter=1.0) == CONFLICT_BACKOFF
    assert Backoff(1.0, 30.0) == FOLD_BACKOFF
    assert PEERING_BACKOFF.delay(1) == PEERING_BACKOFF.delay(50) == 2.0
    assert WATCH_BACKOFF == WRITE_BACKOFF == Backoff(0.2, 2.0)


@pytest.mark.parametrize("status", [0, 429, 500, 502, 503, 504])
def test_no_answer_an_overloaded_or_failing_server_is_transient(status: int) -> None:
    assert is_transient(ApiException(status=status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 410, 422])
def test_any_other_answer_is_final_for_that_request(status: int) -> None:
    assert not is_transient(ApiException(status=status))


@pytest.mark.parametrize("error", [
    ConnectionRefusedError(111, "refused"), TimeoutError("read timed out"),
    ProtocolError("connection aborted"), MaxRetryError(None, "/healthz", "unreachable")])
def test_a_lost_connection_is_transient(error: Exception) -> None:
    assert is_transient(error)


def test_an_error_of_the_program_is_not() -> None:
    assert not is_transient(ValueError("no usable result"))
    assert not is_transient(KeyError("bug"))
