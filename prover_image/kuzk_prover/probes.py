"""The partition pod's readiness and liveness probes, answered over HTTP by the process that
keeps the pulse (``alive.Pulse``: the prover, or the lane agent for a prover of its own).

The kubelet's ``httpGet`` of ``ALIVE_PATH?within=S`` on the pod's address (``POD_IP``, the
downward API's ``status.podIP``) at ``ALIVE_PORT`` (``kuzk.contract.pod``) is answered 200 while
the last beat is at most S seconds old and 503 once it is older: microseconds of a thread that
is already there, where an exec probe starts a process. A prover that is stopped (SIGSTOP) or
holds the interpreter answers nothing, and the probe times out; the lane agent whose prover is
stopped answers, but its pulse stops beating, so the answer turns 503. The answer says nothing
but alive or not. It listens only on the pod's own address, which is where the kubelet's probe
comes from; outside a pod (no ``POD_IP``) nothing listens.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from socketserver import TCPServer
from urllib.parse import parse_qs, urlsplit

from kuzk.contract.pod import ALIVE_PATH, ALIVE_PORT, ALIVE_WITHIN, POD_IP_ENV
from kuzk_prover.alive import Pulse

# How long one connection may take to send its request: the kubelet sends it at once, and
# one slow client must not hold the answers back for long.
REQUEST_TIMEOUT_S = 2.0
# How often the serving thread looks whether it is asked to stop (its only idle work).
POLL_S = 0.25


class Unanswerable(Exception):
    """The pod's probes cannot be answered (its address and port cannot be listened on)."""


class ProbeServer(TCPServer):
    """Answers ``GET ALIVE_PATH?within=S`` from ``pulse``, one request at a time."""

    allow_reuse_address = True

    def __init__(self, pulse: Pulse, address: tuple[str, int]) -> None:
        self.pulse = pulse
        super().__init__(address, _Answer)


class _Answer(BaseHTTPRequestHandler):
    server: ProbeServer
    timeout = REQUEST_TIMEOUT_S

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path != ALIVE_PATH:
            self._answer(404, f"the probe is GET {ALIVE_PATH}?{ALIVE_WITHIN}=SECONDS")
            return
        values = parse_qs(url.query).get(ALIVE_WITHIN) or [""]
        try:
            within = float(values[0])
        except ValueError:
            within = 0.0
        if not within > 0:
            self._answer(400, f"{ALIVE_WITHIN} must be a number of seconds above 0,"
                              f" not {values[0]!r}")
            return
        if self.server.pulse.age() <= within:
            self._answer(200, "alive")
        else:
            self._answer(503, "not alive")

    def _answer(self, code: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: a probe every few seconds is no news for the prover's log."""


def serve(pulse: Pulse, env: Mapping[str, str]) -> ProbeServer | None:
    """Answer the pod's probes from ``pulse`` on the pod's address, from a daemon thread, until
    the server returned is shut down; None, and nothing listening, outside a pod. Unanswerable,
    saying why, when the address cannot be listened on (the prover had better fail at once
    than wait for its liveness probe)."""
    ip = env.get(POD_IP_ENV)
    if not ip:
        return None
    try:
        server = ProbeServer(pulse, (ip, ALIVE_PORT))
    except OSError as exc:
        msg = (f"cannot answer the pod's probes on {ip}:{ALIVE_PORT}"
               f" ({exc.strerror or exc})")
        raise Unanswerable(msg) from None
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_S},
                     name="kuzk-probes", daemon=True).start()
    return server


@contextmanager
def answering(pulse: Pulse, env: Mapping[str, str]) -> Iterator[ProbeServer | None]:
    """``serve`` while the block runs."""
    server = serve(pulse, env)
    try:
        yield server
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
