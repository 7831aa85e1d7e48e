"""The running server against bad requests: each gets a clear 4xx, and /healthz answers
throughout, also while 500 connections sit open sending nothing. Pages of ProofJobs written to
the API server: bad page parameters get 400 naming the parameter, and a page token of a
listing a new job changed gets 410 with a token the client goes on with."""

from __future__ import annotations

import socket

import requests

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.operator.conftest import apply_job, proofjob
from tests.integration.status.server import StatusServer


def test_bad_requests_get_clear_4xx_and_healthz_keeps_answering(status_server) -> None:
    server: StatusServer = status_server()
    silent = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(500)]
    try:
        assert server.get("/healthz").status_code == 200
        bad = server.get("/status", params={"kind": "nope"})
        assert (bad.status_code, bad.json()["parameter"]) == (400, "kind")
        missing = server.get("/nowhere")
        assert (missing.status_code, missing.json()["error"]) == (404, "no such path: /nowhere")
        post = requests.post(server.url + "/status", timeout=10)
        assert (post.status_code, post.headers["Allow"]) == (405, "GET, HEAD")
        long = server.get("/status?namespace=" + "a" * 64 * 1024)
        assert long.status_code == 414
        assert long.json()["error"] == "the query string is over 8192 bytes"
        # Over the request line limit, aiohttp's parser refuses it before any handler runs.
        longer = server.get("/status?namespace=" + "a" * 200 * 1024)
        assert (longer.status_code, longer.headers["Content-Type"].split(";")[0]) == (
            414, "application/json")
        assert longer.json()["error"].startswith("the query string is over 8192 bytes")
        header = server.get("/healthz", headers={"X-Big": "b" * 20000})
        assert (header.status_code, header.json()["status"]) == (431, 431)
        garbage = socket.create_connection(("127.0.0.1", server.port))
        garbage.sendall(b"NOT HTTP\r\n\r\n")
        answer = garbage.makefile("rb").read().decode()
        garbage.close()
        assert answer.startswith("HTTP/1.0 400") and '"malformed request: ' in answer
        assert server.get("/healthz").status_code == 200
        assert server.get("/readyz").status_code == 200
    finally:
        for s in silent:
            s.close()
    assert "Traceback" not in server.log.read_text()


def test_pages_refuse_bad_parameters_and_expire_when_the_listing_changes(
        status_server, kuzk_installed: Cluster, namespace: str) -> None:
    server: StatusServer = status_server()
    for name in ("job-a", "job-b"):
        apply_job(kuzk_installed, namespace, proofjob(name))

    def names() -> list[str]:
        return [p["name"] for p in server.status()["pipelines"]]

    wait_for(lambda: names() == ["job-a", "job-b"], 30, "both jobs on /status")
    for params, parameter in [({"limit": "0"}, "limit"), ({"limit": "-1"}, "limit"),
                              ({"continue": "forged"}, "continue"),
                              ({"fields": "fleet,colour"}, "fields")]:
        bad = server.get("/status", params=params)
        assert (bad.status_code, bad.json()["parameter"]) == (400, parameter), params
    first = server.status(limit="1")
    assert [p["name"] for p in first["pipelines"]] == ["job-a"]
    token = first["metadata"]["continue"]
    assert first["metadata"]["remaining_item_count"] == 1
    apply_job(kuzk_installed, namespace, proofjob("job-c"))
    wait_for(lambda: names() == ["job-a", "job-b", "job-c"], 30, "the third job on /status")
    gone = server.get("/status", params={"limit": "1", "continue": token})
    assert (gone.status_code, gone.json()["reason"]) == (410, "Expired")
    rest = server.status(limit="5", **{"continue": gone.json()["continue"]})
    assert [p["name"] for p in rest["pipelines"]] == ["job-b", "job-c"]
    assert rest["metadata"] == {"continue": None, "remaining_item_count": 0}
