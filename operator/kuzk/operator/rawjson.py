"""API calls in plain JSON: the kubernetes client's typed methods build its model of every
body they send (validating it field by field) and of every answer they read, then convert
each back to JSON: for a pod, milliseconds of CPU each way, the largest part of a create's
cost to the operator (py-spy at 16 x 8 x 3: a quarter of its CPU in ``create_namespaced_pod``
alone). The operator's objects are JSON already; these send and read them as such, over the
same client (its connection pool, credentials and errors)."""

from __future__ import annotations

from typing import Any, cast

import orjson
from kubernetes import client
from kubernetes.client.exceptions import ApiException

Body = dict[str, Any]


def as_body(response: Any) -> Body:
    """The object a call made with ``_preload_content=False`` returned, as plain JSON."""
    return cast(Body, orjson.loads(response.data))


def create(api_client: client.ApiClient, path: str, body: Any) -> Body:
    """POST ``body`` to the collection at ``path`` (``/api/v1/namespaces/NS/pods``) and
    return the object created. A refusal raises ApiException, as the typed methods do."""
    # The body goes to the REST layer as it is (which encodes JSON with the standard
    # library's encoder): ``param_serialize`` would walk it to sanitize it first.
    method, url, headers, _, post = api_client.param_serialize(
        "POST", path, auth_settings=["BearerToken"],
        header_params={"Content-Type": "application/json", "Accept": "application/json"})
    response: Any = api_client.call_api(method, url, headers, body, post)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return as_body(response)
