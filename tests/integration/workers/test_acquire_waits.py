"""A lane's ``acquire`` against the API server: while another lane holds the GPU phase it
waits on a watch of its GPU's WorkerStatus, and it wakes on the watch event that lets it in
(seconds before the watch's own timeout, set here far beyond the test), not on other lanes'
stage reports or the operator's liveness marks, and not for a GPU phase that a lane of
higher priority gets first. Each waiter's requests are counted: a GET and a PUT to mark it
ready, one watch, and a GET and a PUT when it is let in. A waiting lane removed by its pod's
finalizer answers GONE; a waiter with a deadline answers WAITING when it has passed."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from kuzk.contract.workerstatus import worker_status_name
from kuzk.contract.workerstatus.decisions import Acquired, Assignment, Gpu
from kuzk.contract.workerstatus.writes import (
    acquire,
    claim,
    join,
    release,
    release_gpu,
    stage,
    sweep,
)
from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.workers.conftest import read_worker_status

GPU = Gpu("GPU-5e1f0c2a-0d3b-4c8e-9a71-acc011e00000", "NVIDIA H200")
# Far beyond anything the test waits for: an acquire that returns did not time out its watch.
WATCH_S = 120
PROMPT_S = 5.0


class CountingClient(client.ApiClient):
    """The real client, keeping the kind of every request: GET, PUT, or WATCH."""

    def __init__(self, configuration: client.Configuration) -> None:
        super().__init__(configuration)
        self.requests: list[str] = []

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.requests.append("WATCH" if "watch=" in url.lower() else method)
        return super().call_api(method, url, *args, **kwargs)


def counting_client(cluster: Cluster) -> CountingClient:
    configuration = cluster.api.configuration
    return CountingClient(configuration)


def w0(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The one worker of WorkerStatus ``name``."""
    (worker,) = (read_worker_status(api, name).get("status") or {}).get("workers") or []
    return dict(worker)


def lane(api: client.ApiClient, name: str, who: Assignment) -> dict[str, Any] | None:
    return next((x for x in w0(api, name)["lanes"] if x["pod"]["uid"] == who.pod_uid), None)


def waiting(api: client.ApiClient, name: str, who: Assignment) -> bool:
    found = lane(api, name, who)
    return found is not None and "readyAt" in found


def holder(api: client.ApiClient, name: str) -> str | None:
    return ((w0(api, name).get("holder") or {}).get("pod") or {}).get("uid")


def result_within(future: Future[Acquired], since: float) -> tuple[Acquired, float]:
    """The acquire's answer, and how long after ``since`` it came (at most PROMPT_S)."""
    got = future.result(timeout=PROMPT_S)
    return got, time.monotonic() - since


# The waiter's requests from its acquire to its grant: mark it ready, one watch, ask again.
ONE_WAKE = ["GET", "PUT", "WATCH", "GET", "PUT"]


def test_a_waiting_acquire_wakes_on_the_watch_when_the_gpu_phase_is_given_up(
    cluster: Cluster,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    name = worker_status_name(node, GPU.uuid)
    a, b, c = (make_assignment(partition=k) for k in range(3))
    assert claim(admin, node, GPU, a) == name
    assert join(admin, node, GPU, b) == join(admin, node, GPU, c) == name
    waiter = counting_client(cluster)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(acquire, waiter, name, b, watch_s=WATCH_S)
        wait_for(lambda: waiting(admin, name, b), 30, "B marked ready and waiting")
        # Other lanes' writes while B waits: none of them lets B in, none wakes it.
        running = {a.pod_uid: None, b.pod_uid: None, c.pod_uid: None}
        assert stage(admin, name, c, "synthesizing") is True
        now = datetime.now(UTC)
        assert sweep(admin, name, running, now, {c.pod_uid: now}) == []  # marks C not live
        assert stage(admin, name, c, "synth_done") is True
        assert sweep(admin, name, running, datetime.now(UTC)) == []
        assert not future.done(), "B acquired while A holds the GPU phase"
        assert holder(admin, name) == a.pod_uid
        released = time.monotonic()
        assert release_gpu(admin, name, a) is True
        got, after = result_within(future, released)
    assert got is Acquired.GRANTED
    assert after < PROMPT_S, f"B took {after:.1f} s after A's release: woke on a timeout?"
    assert waiter.requests == ONE_WAKE, "B asked again only when A gave the GPU phase up"
    assert holder(admin, name) == b.pod_uid
    stages = {x["pod"]["uid"]: x["stage"] for x in w0(admin, name)["lanes"]}
    assert stages == {a.pod_uid: "committing", b.pod_uid: "gpu", c.pod_uid: "synth_done"}


def test_a_lane_of_higher_priority_ready_later_is_let_in_first(
    cluster: Cluster,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    """A snap-update lane waits, then a winning-post lane: A's release lets the winning-post
    lane in and leaves the snap-update lane asleep; the winning-post's release wakes it."""
    node = worker_status()
    name = worker_status_name(node, GPU.uuid)
    a, snap = make_assignment(partition=0), make_assignment(partition=1)
    winning = dataclasses.replace(make_assignment("winning", partition=0),
                                  proof_kind="winning-post")
    claim(admin, node, GPU, a)
    join(admin, node, GPU, snap)
    join(admin, node, GPU, winning)
    snap_client, winning_client = counting_client(cluster), counting_client(cluster)
    with ThreadPoolExecutor(2) as pool:
        snap_waits = pool.submit(acquire, snap_client, name, snap, watch_s=WATCH_S)
        wait_for(lambda: waiting(admin, name, snap), 30, "the snap-update lane waiting")
        winning_waits = pool.submit(acquire, winning_client, name, winning, watch_s=WATCH_S)
        wait_for(lambda: waiting(admin, name, winning), 30, "the winning-post lane waiting")

        released = time.monotonic()
        assert release_gpu(admin, name, a) is True
        got, after = result_within(winning_waits, released)
        assert (got, holder(admin, name)) == (Acquired.GRANTED, winning.pod_uid)
        assert after < PROMPT_S
        assert not snap_waits.done(), "the snap-update lane went before the winning-post"

        released = time.monotonic()
        assert release_gpu(admin, name, winning) is True
        got, after = result_within(snap_waits, released)
    assert (got, holder(admin, name)) == (Acquired.GRANTED, snap.pod_uid)
    assert after < PROMPT_S
    assert winning_client.requests == ONE_WAKE
    assert snap_client.requests == ONE_WAKE, "A's release, with the winning-post first, and " \
        "the winning-post's grant did not wake the snap-update lane"


def test_a_waiting_lane_removed_by_its_finalizer_answers_gone(
    cluster: Cluster,
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    name = worker_status_name(node, GPU.uuid)
    a, b = make_assignment(partition=0), make_assignment(partition=1)
    claim(admin, node, GPU, a)
    join(admin, node, GPU, b)
    waiter = counting_client(cluster)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(acquire, waiter, name, b, watch_s=WATCH_S)
        wait_for(lambda: waiting(admin, name, b), 30, "B waiting")
        removed = time.monotonic()
        assert release(admin, node, b.pod, "failed") is True
        got, after = result_within(future, removed)
    assert got is Acquired.GONE
    assert after < PROMPT_S
    assert waiter.requests == ONE_WAKE, "it asked once more, and was refused"
    assert (holder(admin, name), lane(admin, name, b)) == (a.pod_uid, None)
    assert read_worker_status(admin, name)["status"]["staleWritesRejected"] == 1


def test_a_waiter_with_a_deadline_answers_waiting_when_it_has_passed(
    admin: client.ApiClient,
    worker_status: Callable[[], str],
    make_assignment: Callable[..., Assignment],
) -> None:
    node = worker_status()
    name = worker_status_name(node, GPU.uuid)
    a, b = make_assignment(partition=0), make_assignment(partition=1)
    claim(admin, node, GPU, a)
    join(admin, node, GPU, b)
    started = time.monotonic()
    assert acquire(admin, name, b, wait_s=1.0) is Acquired.WAITING
    assert 1.0 <= time.monotonic() - started < 1.0 + PROMPT_S
    assert waiting(admin, name, b) and holder(admin, name) == a.pod_uid
    # Still ready: once the GPU phase is free, B's next ask is granted at once.
    assert release_gpu(admin, name, a) is True
    assert acquire(admin, name, b, wait_s=0) is Acquired.GRANTED
