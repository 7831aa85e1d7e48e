"""The running server against bad requests: each gets a clear 4xx, and /healthz answers
throughout, also while 500 connections sit open sending nothing."""

from __future__ import annotations

import socket

import requests

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
        assert "query string" in long.json()["error"]
        assert server.get("/healthz").status_code == 200
        assert server.get("/readyz").status_code == 200
    finally:
        for s in silent:
            s.close()
