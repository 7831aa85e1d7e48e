"""The line protocol between a prover and its lane agent (``kuzk-lane run``), and the client
side of it that the short-lived ``kuzk-lane`` calls use.

The agent listens on the Unix socket that ``KUZK_LANE_SOCKET`` names (a leading ``@`` names
Linux's abstract namespace, so no writable file system is needed). A prover sends one call per
line and reads one reply per line, on one connection or on one connection per call:

    stage synthesizing | stage synth_done | stage committing
    acquire
    release-gpu
    result {"commitment": "0x…", "synth_ms": 812, "gpu_ms": 2300}

Every reply is ``ok`` (maybe followed by a note) or ``error <what was wrong>``. Only the
standard library and the contract's vocabulary (``kuzk.contract.api``: the stage names) are
imported here: a call is one process start, and stays cheap.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from kuzk.contract.api import COMMITTING, SYNTH_DONE, SYNTHESIZING

SOCKET_ENV = "KUZK_LANE_SOCKET"
STAGE, ACQUIRE, RELEASE_GPU, RESULT = "stage", "acquire", "release-gpu", "result"
CALLS = (STAGE, ACQUIRE, RELEASE_GPU, RESULT)
# The stages a prover names; ``committing`` ends its GPU phase (as ``release-gpu`` does).
STAGES = (SYNTHESIZING, SYNTH_DONE, COMMITTING)
MAX_LINE = 8192


class CallRefused(Exception):
    """The agent (or the call's own check) refused the call; the message is one line."""


@dataclass(frozen=True)
class Call:
    """One call of the protocol: its verb and what follows it on the line."""

    verb: str
    argument: str = ""

    def line(self) -> bytes:
        text = f"{self.verb} {self.argument}" if self.argument else self.verb
        return (" ".join(text.splitlines()) + "\n").encode()


def parse_call(line: str) -> Call:
    """The call a line makes; CallRefused naming what is wrong with it."""
    verb, _, argument = line.strip().partition(" ")
    argument = argument.strip()
    if verb not in CALLS:
        msg = f"unknown call {verb!r}; expected one of {', '.join(CALLS)}"
        raise CallRefused(msg)
    if verb == STAGE and argument not in STAGES:
        msg = f"unknown stage {argument!r}; expected one of {', '.join(STAGES)}"
        raise CallRefused(msg)
    if verb in (ACQUIRE, RELEASE_GPU) and argument:
        msg = f"{verb} takes nothing after it, got {argument!r}"
        raise CallRefused(msg)
    if verb == RESULT and not argument:
        msg = "result needs the result JSON after it"
        raise CallRefused(msg)
    return Call(verb, argument)


def ok(note: str = "") -> str:
    return f"ok {note}" if note else "ok"


def refused(message: str) -> str:
    return "error " + " ".join(message.split())


def address(name: str) -> str:
    """The socket address ``name`` stands for: ``@name`` is abstract (Linux), else a path."""
    return "\0" + name[1:] if name.startswith("@") else name


def send(name: str, call: Call) -> str:
    """Make ``call`` to the agent at ``name`` and return its note; CallRefused with the agent's
    one line when it refuses, OSError when no agent answers."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(address(name))
        connection.sendall(call.line())
        reply = connection.makefile("r", encoding="utf-8").readline(MAX_LINE)
    if not reply:
        msg = f"the lane agent at {name} closed the connection without a reply"
        raise CallRefused(msg)
    status, _, text = reply.strip().partition(" ")
    if status != "ok":
        raise CallRefused(text or reply.strip())
    return text
