"""What the process kubelet's parts share about the API server: the timestamp format of its
objects, and which failed calls are worth another try (``ProcessKubelet.through_outage``)."""

from __future__ import annotations

import datetime as dt

import urllib3
from kubernetes.client.exceptions import ApiException


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def transient(error: BaseException) -> bool:
    """An API call that may succeed later: no connection, or a 5xx or 429 answer."""
    if isinstance(error, ApiException):
        code = int(error.status or 0)
        return code in (0, 429) or code >= 500
    return isinstance(error, urllib3.exceptions.HTTPError | OSError)
