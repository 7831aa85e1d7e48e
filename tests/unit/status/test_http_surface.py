"""The status server's HTTP surface through pytest-aiohttp: ETag and 304, filters, errors,
probes, /metrics against /status, and the dashboard's files."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from kuzk.contract import api
from kuzk.status import answers, app
from kuzk.status.app import STATIC, make_app
from kuzk.status.view import StatusView
from tests.unit.status.builders import T0, node, part, proofjob, stamp, worker, workerstatus
from tests.unit.status.conftest import Clock, Feed

Client = TestClient  # type: ignore[type-arg]


@pytest.fixture
async def http(aiohttp_client, view: StatusView) -> Client:
    return await aiohttp_client(make_app(view))


def fill(feed: Feed) -> None:
    feed(proofjobs=[proofjob("a", part(0, "done", synthMs=1500, gpuMs=200,
                                       startedAt=stamp(T0 + 3)), part(1, "gpu"),
                             part(2, "pending"), count=3),
                    proofjob("b", part(0, "failed", reason="InvalidInput"), count=1,
                             kind="porep-c2", phase="Failed", finished=T0)],
         workerstatuses=[workerstatus("gpu-1", worker("W0"),
                                      worker("W1", "gpu", job="a", partition=1, stage="gpu"),
                                      stale=2)],
         nodes=[node("gpu-1", 2)], pods=[], ledger=[])


async def test_status_serves_json_with_an_etag_and_304s(http: Client, feed: Feed) -> None:
    fill(feed)
    first = await http.get("/status")
    assert first.status == 200
    assert first.content_type == "application/json"
    etag = first.headers["ETag"]
    body = await first.json()
    assert [p["job_id"] for p in body["pipelines"]] == ["ns/a", "ns/b"]
    again = await http.get("/status", headers={"If-None-Match": etag})
    assert again.status == 304
    assert again.headers["ETag"] == etag
    head = await http.head("/status")
    assert (head.status, head.headers["ETag"]) == (200, etag)


def change(view: StatusView) -> None:
    view.event("proofjobs", "MODIFIED", proofjob("a", part(0, "done"), part(1, "done"),
                                                 part(2, "pending"), count=3))


async def test_a_change_gets_a_new_etag(http: Client, feed: Feed, view: StatusView,
                                        clock: Clock) -> None:
    fill(feed)
    etag = (await http.get("/status")).headers["ETag"]
    change(view)
    clock.now += view.max_stale  # the document of the old revision is too old to serve
    changed = await http.get("/status", headers={"If-None-Match": etag})
    assert changed.status == 200
    assert changed.headers["ETag"] != etag
    assert (await changed.json())["pipelines"][0]["partitions_done"] == 2


async def next_document(http: Client, etag: str) -> dict[str, Any]:
    """Poll until /status answers with another ETag (the render in its thread is done)."""
    for _ in range(500):  # 5 s at most
        response = await http.get("/status", headers={"If-None-Match": etag})
        if response.status == 200:
            body: dict[str, Any] = await response.json()
            return body
        await asyncio.sleep(0.01)
    pytest.fail("no fresh document came")


async def test_while_a_fresh_document_renders_the_last_one_is_served(
        http: Client, feed: Feed, view: StatusView) -> None:
    fill(feed)
    etag = (await http.get("/status")).headers["ETag"]
    change(view)
    # the clock stands still: the last document is younger than max_stale
    stale = await http.get("/status", headers={"If-None-Match": etag})
    assert stale.status == 304
    assert (await next_document(http, etag))["pipelines"][0]["partitions_done"] == 2


async def test_an_unchanged_view_is_rendered_again_as_time_passes(
        http: Client, feed: Feed, view: StatusView, clock: Clock) -> None:
    fill(feed)  # job b finished at T0; --keep-finished is 600 s
    first = await http.get("/status")
    etag, body = first.headers["ETag"], await first.json()
    assert [p["name"] for p in body["pipelines"]] == ["a", "b"]
    clock.now += view.refresh / 2
    assert (await http.get("/status", headers={"If-None-Match": etag})).status == 304
    clock.now = T0 + 601
    # nothing changed but time: the old document is served while the new one renders
    assert (await http.get("/status", headers={"If-None-Match": etag})).status == 304
    later = await next_document(http, etag)
    assert [p["name"] for p in later["pipelines"]] == ["a"]
    assert later["uptime_secs"] == 601


async def test_an_unchanged_object_keeps_the_etag(http: Client, feed: Feed,
                                                  view: StatusView) -> None:
    fill(feed)
    etag = (await http.get("/status")).headers["ETag"]
    view.event("nodes", "MODIFIED", node("gpu-1", 2) | {"spec": {"podCIDR": "10.0.0.0/24"}})
    assert (await http.get("/status", headers={"If-None-Match": etag})).status == 304


async def test_filters_get_their_own_etag(http: Client, feed: Feed) -> None:
    fill(feed)
    every = await http.get("/status")
    some = await http.get("/status", params={"kind": "porep-c2"})
    assert every.headers["ETag"] != some.headers["ETag"]
    assert [p["job_id"] for p in (await some.json())["pipelines"]] == ["ns/b"]


async def test_gzip_is_offered(http: Client, feed: Feed) -> None:
    fill(feed)
    response = await http.get("/status", headers={"Accept-Encoding": "gzip"},
                              auto_decompress=False)
    assert response.headers["Content-Encoding"] == "gzip"
    plain = await (await http.get("/status")).read()
    assert gzip.decompress(await response.read()) == plain


async def test_a_large_answer_is_kept_as_gzip_and_served_plain_too(
        http: Client, feed: Feed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "PLAIN_KEPT", 0)
    fill(feed)
    zipped = await http.get("/status", headers={"Accept-Encoding": "gzip"},
                            auto_decompress=False)
    plain = await http.get("/status", headers={"Accept-Encoding": "identity"})
    assert "Content-Encoding" not in plain.headers
    assert gzip.decompress(await zipped.read()) == await plain.read()
    assert (await plain.json())["pipelines"][0]["job_id"] == "ns/a"


async def test_a_large_body_is_sent_whole_and_head_gets_none(
        http: Client, feed: Feed, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app, "COALESCED", 64)  # every body here is sent in two writes
    fill(feed)
    small = await (await http.get("/status", headers={"Accept-Encoding": "identity"})).read()
    assert len(small) > 64 and json.loads(small)["pipelines"][0]["job_id"] == "ns/a"
    zipped = await http.get("/status", headers={"Accept-Encoding": "gzip"},
                            auto_decompress=False)
    body = await zipped.read()
    assert int(zipped.headers["Content-Length"]) == len(body)
    assert gzip.decompress(body) == small
    head = await http.head("/status", headers={"Accept-Encoding": "gzip"})
    assert (head.status, await head.read()) == (200, b"")
    # the connection still answers: no body followed the HEAD's headers
    assert json.loads(await (await http.get("/status")).read()) == json.loads(small)


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("namespace=Bad_Name", "namespace"),
        ("kind=snark", "kind"),
        ("kind=snap-update&kind=porep-c2", "kind"),
        ("colour=blue", "colour"),
    ],
    ids=["bad-namespace", "bad-kind", "repeated", "unknown"],
)
async def test_bad_filters_get_400_naming_the_parameter(http: Client, feed: Feed, query,
                                                        parameter) -> None:
    fill(feed)
    response = await http.get(f"/status?{query}")
    assert response.status == 400
    body = await response.json()
    assert body["parameter"] == parameter
    assert parameter in body["error"]


@pytest.mark.parametrize(("query", "parameter"), [
    ("limit=0", "limit"), ("limit=-1", "limit"), ("continue=forged", "continue"),
    ("fields=pipelines,colour", "fields")], ids=["zero", "negative", "forged", "field"])
async def test_bad_pages_and_fields_get_400_naming_the_parameter(http: Client, feed: Feed,
                                                                 query, parameter) -> None:
    fill(feed)
    response = await http.get(f"/status?{query}")
    assert (response.status, response.content_type) == (400, "application/json")
    assert (await response.json())["parameter"] == parameter


async def test_a_page_token_of_a_changed_listing_gets_410_and_the_client_goes_on(
        http: Client, feed: Feed, view: StatusView, clock: Clock) -> None:
    fill(feed)
    first = await (await http.get("/status", params={"limit": "1"})).json()
    assert [p["job_id"] for p in first["pipelines"]] == ["ns/a"]
    token = first["metadata"]["continue"]
    view.event("proofjobs", "ADDED", proofjob("c", count=1, created=T0 + 5))
    clock.now += view.max_stale
    gone = await http.get("/status", params={"limit": "1", "continue": token})
    assert gone.status == 410
    body = await gone.json()
    assert (body["reason"], body["parameter"]) == ("Expired", "continue")
    # Its token goes on from the same job in the listing as it is now.
    rest = await http.get("/status", params={"limit": "5", "continue": body["continue"]})
    assert [p["job_id"] for p in (await rest.json())["pipelines"]] == ["ns/b", "ns/c"]
    # Or the client starts again.
    again = await (await http.get("/status", params={"limit": "1"})).json()
    assert again["metadata"]["remaining_item_count"] == 2


async def test_unknown_paths_get_a_json_404(http: Client) -> None:
    response = await http.get("/nope")
    assert response.status == 404
    assert "/nope" in (await response.json())["error"]


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_other_methods_get_405(http: Client, method: str) -> None:
    response = await http.request(method, "/status")
    assert response.status == 405
    assert response.headers["Allow"] == "GET, HEAD"
    assert method in (await response.json())["error"]


@pytest.mark.parametrize("size", [8 * 1024 + 1, 64 * 1024])
async def test_long_query_strings_get_414(http: Client, size: int) -> None:
    response = await http.get("/status?kind=" + "x" * (size - len("kind=")))
    assert response.status == 414
    assert "query string" in (await response.json())["error"]


async def test_readyz_waits_for_every_first_list(http: Client, feed: Feed) -> None:
    feed(proofjobs=[], workerstatuses=[])
    waiting = await http.get("/readyz")
    assert waiting.status == 503
    assert (await waiting.json())["waiting_for"] == ["ledger", "nodes", "pods"]
    assert (await http.get("/healthz")).status == 200
    feed(pods=[], nodes=[], ledger=[])
    assert (await http.get("/readyz")).status == 200


async def test_metrics_match_status(http: Client, feed: Feed, clock: Clock) -> None:
    fill(feed)
    clock.now = T0 + 30
    status = await (await http.get("/status")).json()
    text = await (await http.get("/metrics")).text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}

    def value(name: str, **labels: str) -> float:
        return samples[(name, tuple(sorted(labels.items())))]

    for p in status["pipelines"]:
        for state in ("done", "gpu", "pending", "failed"):
            expected = sum(q["state"] == state for q in p["partitions"])
            assert value("kuzk_partitions", namespace=p["namespace"], state=state,
                         proof_kind=p["proof_kind"]) == expected
    assert value("kuzk_proofjobs", namespace="ns", phase="Failed", proof_kind="porep-c2") == 1
    assert value("kuzk_gpu_workers", node="gpu-1", state="gpu") == status["fleet"][
        "gpus_proving"]
    for w in status["gpu_workers"]:
        for reason, seconds in w["idle_seconds_total"].items():
            assert value("kuzk_gpu_idle_seconds_total", node=w["node"], worker=w["worker_id"],
                         gpu_uuid=w["gpu_uuid"], Hostname=w["node"], UUID=w["gpu_uuid"],
                         modelName="", reason=reason) == seconds
    counters = status["counters"]
    assert value("kuzk_partitions_completed_total", namespace="ns",
                 proof_kind="snap-update") == counters["completed_by_kind"]["snap-update"]
    assert value("kuzk_partitions_failed_total", namespace="ns", proof_kind="porep-c2") == counters[
        "failed_by_kind"]["porep-c2"]
    # every proof kind of a namespace with a job, from zero
    assert value("kuzk_partitions_failed_total", namespace="ns", proof_kind="winning-post") == 0
    assert value("kuzk_stale_worker_writes_rejected_total") == counters["stale_writes_rejected"]
    w1 = status["gpu_workers"][1]
    assert value("kuzk_gpu_busy_seconds_total", node="gpu-1", worker="W1",
                 gpu_uuid=w1["gpu_uuid"], Hostname="gpu-1", UUID=w1["gpu_uuid"],
                 modelName="") == w1["busy_seconds_total"] == 30.0
    assert value("kuzk_partition_duration_seconds_count", proof_kind="snap-update",
                 stage="gpu") == 1
    assert value("kuzk_partition_duration_seconds_sum", proof_kind="snap-update",
                 stage="synthesis") == 1.5
    assert ("kuzk_partition_duration_seconds_count",
            (("proof_kind", "snap-update"), ("stage", "queue"))) not in samples
    assert value("kuzk_partition_queue_wait_seconds_sum", proof_kind="snap-update") == 3.0
    assert value("kuzk_partition_queue_wait_seconds_bucket", proof_kind="snap-update",
                 le="5.0") == 1
    assert value("kuzk_status_view_age_seconds") == status["view"]["age_secs"]
    assert value("kuzk_watch_restarts_total", resource="pods") == 0
    assert value("process_resident_memory_bytes") > 0


async def test_metrics_partitions_follow_jobs_and_lanes_between_scrapes(
        http: Client, feed: Feed, view: StatusView) -> None:
    fill(feed)

    async def partitions(state: str) -> float:
        text = await (await http.get("/metrics")).text()
        return sum(s.value for family in text_string_to_metric_families(text)
                   for s in family.samples if s.name == "kuzk_partitions"
                   and s.labels == {"namespace": "ns", "state": state,
                                    "proof_kind": "snap-update"})

    assert (await partitions("done"), await partitions("gpu")) == (1, 1)
    change(view)  # job a's partition 1 done
    assert (await partitions("done"), await partitions("gpu")) == (2, 0)
    # a lane of job a's partition 2 synthesizing
    view.event("workerstatuses", "MODIFIED", workerstatus(
        "gpu-1", worker("W0", "waiting", job="a", partition=2), worker("W1"), stale=2))
    assert (await partitions("synthesizing"), await partitions("pending")) == (1, 0)


async def test_the_dashboard_is_served_without_external_resources(http: Client) -> None:
    page = await http.get("/")
    assert page.status == 200
    html = await page.text()
    assert "<title>kuzk" in html
    for path in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert path.startswith("/static/"), path
        assert (await http.get(path)).status == 200
    for file in STATIC.iterdir():
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", file.read_text()), file


async def test_status_body_is_valid_json_for_an_empty_view(http: Client, feed: Feed) -> None:
    feed(proofjobs=[], workerstatuses=[], pods=[], nodes=[], ledger=[])
    body = json.loads(await (await http.get("/status")).read())
    assert body["pipelines"] == [] and body["gpu_workers"] == []
    assert body["fleet"]["gpus"] == 0


async def test_silent_connections_do_not_stop_healthz(aiohttp_server, view: StatusView) -> None:
    server = await aiohttp_server(make_app(view), keepalive_timeout=1)
    silent = [await asyncio.open_connection(server.host, server.port) for _ in range(500)]
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 200")
        writer.close()
        # the server cuts each silent connection at its keep-alive timeout
        closed = await asyncio.wait_for(
            asyncio.gather(*(r.read() for r, _ in silent)), 30)
        assert closed == [b""] * 500
    finally:
        for _, w in silent:
            w.close()


async def test_favicon_is_answered_without_content(http: Client) -> None:
    answer = await http.get("/favicon.ico")
    assert (answer.status, await answer.read()) == (204, b"")


async def test_metrics_wait_for_the_first_lists(http: Client, feed: Feed) -> None:
    """Counters served before every first list is in (the ledger's included) would count
    deleted objects' partitions or not, by chance, and could go down."""
    early = await http.get("/metrics")
    assert early.status == 503
    assert "waiting for the first list of" in await early.text()
    feed(proofjobs=[], workerstatuses=[], pods=[], nodes=[], ledger=[])
    assert (await http.get("/metrics")).status == 200


async def test_metrics_carry_the_build_info(http: Client, feed: Feed) -> None:
    feed(proofjobs=[], workerstatuses=[], pods=[], nodes=[], ledger=[])
    text = await (await http.get("/metrics")).text()
    (build,) = [s for family in text_string_to_metric_families(text) for s in family.samples
                if s.name == "kuzk_build_info"]
    assert build.value == 1 and build.labels == {"version": api.version()}
