"""API calls in plain JSON: the kubernetes client's typed methods build its model of every
body they send (validating it field by field) and of every answer they read, then convert
each back to JSON: for a pod, milliseconds of CPU each way, the largest part of a create's
cost to the operator (py-spy at 16 x 8 x 3: a quarter of its CPU in ``create_namespaced_pod``
alone); for a prover's WorkerStatus write, more than the write's own decision. kuzk's
objects are JSON already; these send and read them as such, over the same client (its
connection pool, credentials and errors)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

Body = dict[str, Any]
# A read of only an object's metadata (the API server's PartialObjectMetadata).
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def call(
    api_client: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    query: Sequence[tuple[str, str]] = (),
    content_type: str = "application/json",
    accept: str = "application/json",
    timeout: float | tuple[float, float] | None = None,
    decode: Callable[[bytes], Any] = orjson.loads,
) -> Body:
    """``method`` on ``path`` (``/api/v1/namespaces/NS/pods``) with ``body``; the answer, as
    plain JSON (read by ``decode``: the whole of it, or what a reader keeps of it; ``unread``
    for an answer nobody reads). A refusal raises ApiException, as the typed methods do."""
    # The body goes to the REST layer as it is (which encodes JSON with the standard
    # library's encoder): ``param_serialize`` would walk it to sanitize it first.
    headers = {"Accept": accept, **({"Content-Type": content_type} if body is not None else {})}
    method, url, headers, _, post = api_client.param_serialize(
        method, path, query_params=list(query), header_params=headers,
        auth_settings=["BearerToken"])
    response: Any = api_client.call_api(method, url, headers, body, post,
                                        _request_timeout=timeout)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return cast(Body, decode(response.data))


def unread(_: bytes) -> Body:
    """An answer nobody reads (a created Event, a deleted object), left undecoded."""
    return {}
