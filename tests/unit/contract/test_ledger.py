"""kuzk.contract.ledger: what deleted objects counted, folded once, kept as long as it must be."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kuzk.contract import ledger
from kuzk.contract.ledger import FOLDED_KEEP_S, Ledger, Tally
from tests.unit.status.builders import T0, part, proofjob, stamp, workerstatus

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_a_job_counts_its_finished_partitions_and_their_durations() -> None:
    job = proofjob("j", part(0, "done", synthMs=700, gpuMs=90), part(1, "failed"),
                   part(2, "gpu"), part(3, "done", synthMs=2_000_000), namespace="a",
                   kind="winning-post")
    tally = ledger.proofjob_tally(job)
    assert tally.completed == {("a", "winning-post"): 2}
    assert tally.failed == {("a", "winning-post"): 1}
    synthesis = tally.durations[("winning-post", "synthesis")]
    assert (synthesis.count, synthesis.total) == (2, 2000.7)
    assert synthesis.buckets[ledger.DURATION_BUCKETS.index(1.0)] == 1
    assert synthesis.buckets[-1] == 2
    assert tally.durations[("winning-post", "gpu")].count == 1
    assert ("winning-post", ledger.QUEUE_STAGE) not in tally.durations  # no startedAt


def test_a_partition_waits_from_its_jobs_start_until_its_first_pod_started() -> None:
    job = proofjob("j", part(0, "done", startedAt=stamp(T0 + 4)),
                   part(1, "done", attempt=2, startedAt=stamp(T0 + 90)),  # a retry: not counted
                   part(2, "gpu", startedAt=stamp(T0 + 7)),  # not finished yet
                   started=T0)
    queue = ledger.proofjob_tally(job).durations[("snap-update", ledger.QUEUE_STAGE)]
    assert (queue.count, queue.total) == (1, 4.0)


def test_a_fold_counts_once() -> None:
    book = Ledger()
    job = ledger.proofjob_tally(proofjob("j", part(0, "done")))
    assert book.fold("uid-j", job, NOW)
    assert not book.fold("uid-j", job, NOW + timedelta(seconds=1))
    assert book.fold("uid-ws", ledger.workerstatus_tally(workerstatus("n", stale=3)), NOW)
    assert (sum(book.tally.completed.values()), book.tally.stale_writes_rejected) == (1, 3)


def test_folds_are_forgotten_once_old_and_their_objects_gone() -> None:
    book = Ledger()
    for uid in ("old-gone", "old-live", "young-gone"):
        book.fold(uid, Tally(stale_writes_rejected=1), NOW)
    book.folded["young-gone"] = ledger.api.format_time(NOW + timedelta(seconds=FOLDED_KEEP_S))
    asked = []

    def live() -> set[str]:
        asked.append(True)
        return {"old-live"}

    book.prune(NOW + timedelta(seconds=FOLDED_KEEP_S + 1), live)
    assert set(book.folded) == {"old-live", "young-gone"}
    assert book.tally.stale_writes_rejected == 3  # pruning forgets UIDs, never counts
    asked.clear()
    Ledger().prune(NOW, live)
    assert not asked  # nothing old: the caches are not read


def test_the_configmap_round_trips() -> None:
    book = Ledger()
    book.fold("uid-j", ledger.proofjob_tally(
        proofjob("j", part(0, "done", synthMs=5, gpuMs=7), part(1, "failed"))), NOW)
    book.fold("uid-ws", Tally(stale_writes_rejected=2), NOW)
    again = ledger.parse({"data": book.data()})
    assert again == book


@pytest.mark.parametrize("text, words", [
    ("{not json", "is not a kuzk ledger"),
    ('{"schema": 2}', "schema 2"),
    ('{"schema": 1, "tally": {"durations": [{"proofKind": "k", "stage": "gpu",'
     ' "buckets": [1]}]}}', "1 buckets"),
    ('{"schema": 1, "tally": {"partitions": [{"completed": 1}]}}', "is not a kuzk ledger"),
])
def test_a_configmap_that_holds_no_ledger_is_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        ledger.parse({"data": {ledger.DATA_KEY: text}})


def test_no_configmap_is_an_empty_ledger() -> None:
    assert ledger.parse(None) == Ledger()
    assert ledger.parse({"data": None}) == Ledger()


def test_at_least_keeps_every_figure_from_going_down() -> None:
    shown = ledger.proofjob_tally(proofjob("j", part(0, "done", gpuMs=100), part(1, "done")))
    shown.stale_writes_rejected = 5
    now = ledger.proofjob_tally(proofjob("k", part(0, "done", gpuMs=20_000), part(1, "failed")))
    floor = now.at_least(shown)
    assert floor.completed == {("ns", "snap-update"): 2}
    assert floor.failed == {("ns", "snap-update"): 1}
    assert floor.stale_writes_rejected == 5
    gpu = floor.durations[("snap-update", "gpu")]
    assert gpu.buckets == sorted(gpu.buckets)  # still cumulative
    assert gpu.count == gpu.buckets[-1] == 1
