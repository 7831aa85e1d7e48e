"""``PodParts``: what each part of a pod runner (its environment, volumes, image pulls) reads of
the one pod it runs, and how each posts an Event about it. ``pods.PodRunner`` sets these; the
parts only declare them."""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.exceptions import ApiException

from testenv.kubeapi import now

if TYPE_CHECKING:
    from testenv.kubelet import ProcessKubelet


class PodParts:
    kubelet: ProcessKubelet
    pod: dict[str, Any]
    uid: str
    name: str
    namespace: str
    node: str
    dir: Path

    def _post_event(self, kind: str, reason: str, message: str,
                    field_path: str | None = None) -> str | None:
        """Post a core/v1 Event about this pod (``field_path``: the part of it, e.g. one
        container), as the kubelet's recorder does: best effort, a failure to post loses the
        Event and nothing else. The Event's name; None where it was lost."""
        t = now()
        involved = {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                    "namespace": self.namespace, "uid": self.uid}
        if field_path is not None:
            involved["fieldPath"] = field_path
        name = f"{self.name}.{secrets.token_hex(8)}"
        event = {
            "metadata": {"name": name, "namespace": self.namespace},
            "involvedObject": involved,
            "type": kind, "reason": reason, "message": message,
            "source": {"component": "kubelet", "host": self.node},
            "reportingComponent": "kubelet", "reportingInstance": self.node,
            "firstTimestamp": t, "lastTimestamp": t, "count": 1,
        }
        with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError, OSError):
            self.kubelet.core.create_namespaced_event(self.namespace, event)
            return name
        return None
