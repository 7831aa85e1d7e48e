"""The Kubernetes Events the operator posts on its ProofJobs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from kuzk.contract import api
from kuzk.contract.clock import SYSTEM, Clock
from kuzk.contract.rawjson import call, unread
from kuzk.operator.decide.actions import Event

log = logging.getLogger("kuzk.operator.events")
EVENT_COMPONENT = "kuzk-operator"
EVENT_MESSAGE_MAX = 1024
# What posts a decision's Event on its ProofJob: an ``EventRecorder``, or a test's list.
Poster = Callable[[dict[str, Any], Event], None]


class EventRecorder:
    """Posts the decisions' Events on their ProofJob as ``kuzk-operator`` (source and
    reporting component; the reporting instance is the operator's pod), the way a Kubernetes
    controller's recorder does, not as Kopf's generic poster would (``kopf``, instance
    ``dev``). Posting is fire-and-forget on threads of its own: an Event that cannot be
    posted is logged, never retried, and never holds up a sync."""

    def __init__(self, api_client: client.ApiClient, instance: str,
                 clock: Clock = SYSTEM) -> None:
        self.api_client = api_client
        self.instance = instance
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kuzk-events")

    def __call__(self, job: dict[str, Any], event: Event) -> None:
        self._pool.submit(self.post, job, event)

    def post(self, job: dict[str, Any], event: Event) -> None:
        md = job.get("metadata") or {}
        stamp = api.format_time(self.clock.now())
        body: dict[str, Any] = {
            "metadata": {"generateName": f"{md.get('name')}.", "namespace": md.get("namespace")},
            "involvedObject": {
                "apiVersion": api.API_VERSION, "kind": api.PROOFJOB_KIND,
                "name": md.get("name"), "namespace": md.get("namespace"), "uid": md.get("uid"),
            },
            "type": event.type,
            "reason": event.reason,
            "message": event.message[:EVENT_MESSAGE_MAX],
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            call(self.api_client, "POST", f"/api/v1/namespaces/{md.get('namespace')}/events",
                 body, decode=unread)
        except (ApiException, HTTPError, OSError) as error:
            log.warning("could not post the Event %s on ProofJob %s/%s: %s", event.reason,
                        md.get("namespace"), md.get("name"),
                        getattr(error, "reason", None) or error)
