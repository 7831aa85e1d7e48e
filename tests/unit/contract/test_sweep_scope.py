"""The sweep's scope (``decisions.decide_sweep``'s ``scope``, ``decisions.in_scope``): an operator
that handles some namespaces (one shard of several) sweeps and marks only the lanes of its own
namespaces' jobs. Its caches hold only those namespaces' pods, so every other lane would look
lost to it; a shard that released them would take GPUs from another shard's running pods."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kuzk.contract.api import WorkerOutcome
from kuzk.contract.workerstatus import parse
from kuzk.contract.workerstatus.decisions import (
    Assignment,
    Gpu,
    Released,
    decide_acquire,
    decide_join,
    decide_sweep,
    in_scope,
)

NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
GPU0, GPU1 = Gpu("GPU-0"), Gpu("GPU-1")
NAMESPACES = ("team-a", "team-b", "team-c")


def lane(namespace: str, pod: str, partition: int = 0) -> Assignment:
    return Assignment(namespace, "job", f"uid-job-{namespace}", "snap-update", partition, 1,
                      pod, f"uid-{pod}")


def joined(*lanes: tuple[Assignment, Gpu]) -> dict[str, Any]:
    status: dict[str, Any] = {}
    for who, gpu in lanes:
        status = decide_join(status, gpu, who, NOW).status or status
    return status


A, B = lane("team-a", "a"), lane("team-b", "b")


def test_a_shard_releases_only_its_own_lanes_though_it_sees_no_other_pod() -> None:
    """Shard team-a's cache shows neither pod (a is gone, b is another shard's): it releases
    a's lane and leaves b's, holder of the GPU phase, as it is."""
    status = joined((A, GPU0), (B, GPU0))
    status = decide_acquire(status, B, NOW).status or status
    swept = decide_sweep(status, {}, NOW + timedelta(seconds=30), scope={"team-a"})
    assert swept.result == [Released(parse(status).workers[0].id, A.pod, "lost")]
    after = parse(swept.status).workers[0]
    assert [x.pod.uid for x in after.lanes] == ["uid-b"]
    assert after.holder is not None and after.holder.pod.uid == "uid-b"
    assert after.previous_pod_uids == ()


def test_a_shard_whose_lanes_all_run_writes_nothing_whatever_the_others() -> None:
    status = joined((A, GPU0), (B, GPU1))
    assert decide_sweep(status, {"uid-b": None}, NOW, scope={"team-b"}).status is None
    assert decide_sweep(status, {}, NOW, scope={"team-c"}).status is None, (
        "a shard with no lane on these GPUs never writes them")


def test_a_shard_marks_only_its_own_lanes_not_live() -> None:
    status = joined((A, GPU0), (B, GPU0))
    since = NOW - timedelta(seconds=5)
    marked = decide_sweep(status, {"uid-a": None, "uid-b": None}, NOW,
                          {"uid-a": since, "uid-b": since}, scope={"team-a"})
    lanes = {x.pod.uid: x.not_live_since for x in parse(marked.status).workers[0].lanes}
    assert lanes == {"uid-a": since, "uid-b": None}


def test_no_scope_is_every_namespace_as_before() -> None:
    status = joined((A, GPU0), (B, GPU0))
    assert [r.pod.uid for r in decide_sweep(status, {}, NOW).result] == ["uid-a", "uid-b"]
    assert in_scope(parse(status).workers[0].lanes[0], ())


OUTCOMES: list[WorkerOutcome | None] = [None, "succeeded", "failed", "lost"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(NAMESPACES), st.booleans(),
                          st.sampled_from(OUTCOMES)), min_size=1, max_size=6))
def test_shards_with_disjoint_namespaces_release_what_one_operator_would(
        lanes: list[tuple[str, bool, WorkerOutcome | None]]) -> None:
    """Each shard sees only its namespace's pods; together they release exactly the lanes one
    operator seeing every pod releases, each lane by one shard, with the same outcome."""
    status: dict[str, Any] = {}
    every_pod: dict[str, WorkerOutcome | None] = {}  # "lost": no pod at all
    namespace_of: dict[str, str] = {}
    for k, (namespace, second_gpu, outcome) in enumerate(lanes):
        who = lane(namespace, f"p{k}", k)
        status = decide_join(status, GPU1 if second_gpu else GPU0, who, NOW).status or status
        namespace_of[who.pod_uid] = namespace
        if outcome != "lost":
            every_pod[who.pod_uid] = outcome
    whole = {(r.pod.uid, r.outcome) for r in decide_sweep(status, every_pod, NOW).result}
    by_shard: list[tuple[str, WorkerOutcome]] = []
    for namespace in NAMESPACES:
        own = {uid: o for uid, o in every_pod.items() if namespace_of[uid] == namespace}
        by_shard += [(r.pod.uid, r.outcome)
                     for r in decide_sweep(status, own, NOW, scope={namespace}).result]
    assert sorted(by_shard) == sorted(whole), "each lane released once, by its own shard"
