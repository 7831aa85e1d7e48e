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
