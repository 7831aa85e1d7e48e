"""kuzk.operator.metrics: a run is timed by kind, a failed one counted (``Gone`` is no
failure), and the live gauges read the running operator when scraped."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kuzk.contract import api
from kuzk.operator.metrics import OperatorMetrics, Timer
from kuzk.operator.workqueue import Gone


def samples(metrics: OperatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_runs_are_timed_by_kind_and_failures_counted() -> None:
    metrics = OperatorMetrics()
    with Timer(metrics, "job", ok=(Gone,)):
        pass
    with pytest.raises(Gone), Timer(metrics, "job", ok=(Gone,)):
        raise Gone
    with pytest.raises(RuntimeError), Timer(metrics, "sweep", ok=(Gone,)):
        raise RuntimeError
    got = samples(metrics)
    assert got[("kuzk_operator_work_duration_seconds_count", (("kind", "job"),))] == 2
    assert got[("kuzk_operator_work_duration_seconds_count", (("kind", "sweep"),))] == 1
    assert got[("kuzk_operator_work_errors_total", (("kind", "sweep"),))] == 1
    assert ("kuzk_operator_work_errors_total", (("kind", "job"),)) not in got


def test_live_gauges_read_the_operator_when_scraped() -> None:
    metrics = OperatorMetrics()
    state = {"keys": 3, "paused": False}
    metrics.follow(lambda: state["keys"], lambda: state["paused"])
    assert samples(metrics)[("kuzk_operator_queued_keys", ())] == 3
    state.update(keys=0, paused=True)
    got = samples(metrics)
    assert (got[("kuzk_operator_queued_keys", ())], got[("kuzk_operator_paused", ())]) == (0, 1)
    assert got[("kuzk_build_info", (("version", api.version()),))] == 1
    assert ("process_resident_memory_bytes", ()) in got
