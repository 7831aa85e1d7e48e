"""What the controller makes of the API server's answer to a pod create: the pod, None when it
exists already, a Refusal for 400, 403 and 422, and an exception (retried by the clock) for
anything else, including the 403 a restarting API server gives before its admission plugins
are ready."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kuzk.actions import CreatePod, Refusal
from kuzk.controller import Controller
from kuzk.pods import PodSettings


def answered(status: int, message: str) -> Any:
    controller = Controller(client.ApiClient(), PodSettings(image="x"), lambda job, e: None)

    def create(*args: Any, **kwargs: Any) -> None:
        error = ApiException(status=status, reason="Refused")
        error.body = json.dumps({"kind": "Status", "message": message, "code": status})
        raise error

    controller.core.create_namespaced_pod = create  # type: ignore[method-assign]
    action = CreatePod({"metadata": {"name": "j-p0-a1"}}, 0, 1)
    return controller._create("ns", action)


@pytest.mark.parametrize("status", [400, 403, 422])
def test_a_refusal_carries_the_api_servers_message(status: int) -> None:
    assert answered(status, "exceeded quota: gpus") == Refusal(status, "exceeded quota: gpus")


def test_an_existing_pod_is_none() -> None:
    assert answered(409, "already exists") is None


@pytest.mark.parametrize(("status", "message"), [
    (403, 'pods "j-p0-a1" is forbidden: not yet ready to handle request'),
    (500, "etcdserver: request timed out"),
    (429, "storage is (re)initializing"),
])
def test_an_outage_is_raised_for_the_clock_to_retry(status: int, message: str) -> None:
    with pytest.raises(ApiException):
        answered(status, message)
