"""The operator keeps no state per job once the job is deleted: over 600 ProofJobs created,
synced and deleted, its runtime ends empty and the objects it holds stay flat.

The measure is exact (live Python objects after a full collection, taken once Kopf's
per-object workers of the batch have exited), so the 400 measured jobs catch a leak of a
single object per job (they grew by 211 objects without one). A stretch that grew by 400 or
more is measured once more, over 400 new jobs: a leak grows in every stretch, while the
runtime's own pools and the event loop's cancelled timers, which one stretch can catch on the
rise (CI once saw 406 more: weakrefs, closures, locks), do not. About a minute on two cores.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client

from kuzk.contract import api
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import InProcessOperator, proofjob

# A minute of its own: it runs on the long tests' worker (tests/conftest.py).
pytestmark = pytest.mark.worker("long")

JOBS, BATCH, WARMUP = 600, 100, 200
MEASURED = JOBS - WARMUP


def test_memory_is_flat_over_600_created_and_deleted_jobs(
        cluster: Cluster, namespace: str, inprocess_operator) -> None:
    operator: InProcessOperator = inprocess_operator()
    runtime = operator.runtime
    custom = client.CustomObjectsApi(cluster.api)
    pool = ThreadPoolExecutor(8)

    def phases() -> dict[str, str | None]:
        items = custom.list_namespaced_custom_object(
            api.GROUP, api.VERSION, namespace, api.PROOFJOB_PLURAL)["items"]
        return {j["metadata"]["name"]: (j.get("status") or {}).get("phase") for j in items}

    def create(name: str) -> None:
        # Suspended: the operator syncs and writes a status, but starts no pod.
        custom.create_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                               api.PROOFJOB_PLURAL, proofjob(name, suspend=True))

    def delete(name: str) -> None:
        custom.delete_namespaced_custom_object(api.GROUP, api.VERSION, namespace,
                                               api.PROOFJOB_PLURAL, name)

    def held() -> tuple[int, int, int]:
        def count() -> tuple[int, int, int]:
            keys = [k for k in runtime.queue.tracked() if isinstance(k, tuple) and k[0] == "job"]
            return len(runtime.jobs), len(keys), len(runtime.caches.job_keys())
        return operator.call(count)

    def job_workers() -> int:
        """Kopf's per-object workers of ProofJobs (they exit a few seconds after their last
        event, taking that event's body with them)."""
        return operator.call(lambda: sum(
            t.get_name().startswith("worker for") and api.PROOFJOB_PLURAL in t.get_name()
            for t in asyncio.all_tasks(operator.loop)))

    def batch(start: int) -> None:
        names = [f"m-{i}" for i in range(start, start + BATCH)]
        list(pool.map(create, names))
        wait_for(lambda: all(phases().get(n) == "Suspended" for n in names), 180,
                 f"jobs {start}.. synced", interval=0.5)
        list(pool.map(delete, names))
        wait_for(lambda: held() == (0, 0, 0), 120, f"jobs {start}.. forgotten")

    def settled_objects() -> Counter[str]:
        wait_for(lambda: job_workers() == 0, 60, "Kopf's per-object workers exiting")
        gc.collect()
        return Counter(type(o).__name__ for o in gc.get_objects())

    def stretch(first: int) -> tuple[int, list[tuple[str, int]]]:
        """How many more live objects after MEASURED jobs from ``first``, and of which types."""
        before = settled_objects()
        for start in range(first, first + MEASURED, BATCH):
            batch(start)
        after = settled_objects()
        return after.total() - before.total(), (after - before).most_common(8)

    try:
        for start in range(0, WARMUP, BATCH):
            batch(start)
        grown, top = stretch(WARMUP)
        if grown >= MEASURED:
            grown, top = stretch(JOBS)
    finally:
        pool.shutdown()
    assert held() == (0, 0, 0)
    assert grown < MEASURED, f"{grown} more live objects after {MEASURED} jobs: {top}"
