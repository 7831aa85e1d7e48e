"""What the process kubelet's parts share about the API server: the timestamp its objects carry,
written by kuzk's one RFC 3339 writer (``kuzk.contract.api.format_time``)."""

from __future__ import annotations

import datetime as dt

from kuzk.contract.api import format_time


def now() -> str:
    return format_time(dt.datetime.now(dt.UTC))
