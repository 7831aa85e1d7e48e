"""The partition pod's contract between the operator, which writes the pod, and the prover (or
the lane agent), which runs in it: its exit codes and its termination message.

A prover that succeeds writes one JSON object to its termination message: ``commitment`` (hex),
and ``synth_ms`` and ``gpu_ms`` (its stages' milliseconds). One that fails writes
``{"error": ...}``; exit code ``INVALID_INPUT_EXIT_CODE`` says its input can never prove (the
operator does not retry it), any other non-zero code a failure that may not recur.
"""

from __future__ import annotations

import json
import re
from typing import Any

INVALID_INPUT_EXIT_CODE = 2
# What the operator keeps of a prover's words: a condition's message, an Event's note.
MESSAGE_LIMIT = 512
_HEX = re.compile("(?:[0-9a-fA-F]{2})+")


def parse_result(message: str | None) -> tuple[str, int | None, int | None]:
    """Read a prover's success JSON: (commitment, synth_ms, gpu_ms)."""
    try:
        result = json.loads(message or "")
    except json.JSONDecodeError as error:
        msg = f"termination message is not JSON ({error.msg}): {clip(message or '')!r}"
        raise ValueError(msg) from None
    if not isinstance(result, dict):
        msg = f"termination message is not a JSON object: {clip(message or '')!r}"
        raise ValueError(msg)
    commitment = result.get("commitment")
    if not isinstance(commitment, str) or not _HEX.fullmatch(commitment.removeprefix("0x")):
        msg = f"termination message has no hex commitment: {clip(message or '')!r}"
        raise ValueError(msg)
    return commitment, _millis(result.get("synth_ms")), _millis(result.get("gpu_ms"))


def clip(text: str) -> str:
    """``text`` within ``MESSAGE_LIMIT`` characters, an ellipsis saying it was cut."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _millis(value: Any) -> int | None:
    return round(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
