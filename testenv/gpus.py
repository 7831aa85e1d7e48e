"""The process kubelet's device plugin: each node's fake GPU UUIDs, the ``nvidia.com/gpu``
replicas a pod asks for, and which GPUs' replicas it gets (least-loaded GPU first, as the
NVIDIA device plugin's time-slicing hands them out). ``ProcessKubelet`` keeps the bookkeeping
of what each pod holds."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE


class AdmissionError(Exception):
    """The kubelet cannot admit the pod (for example no free GPU)."""


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.gpu{index}.kuzk-testenv"))


def pick_replicas(
    uuids: list[str], in_use: Mapping[str, int], replicas: int, count: int
) -> list[str] | None:
    """``count`` GPU replicas for one pod, least-loaded GPU first (the device plugin's
    ``distributed`` policy; ties by GPU index), as the physical GPU UUID of each; None when
    fewer than ``count`` are free."""
    load = {uuid_: in_use.get(uuid_, 0) for uuid_ in uuids}
    picked: list[str] = []
    for _ in range(count):
        free = [u for u in uuids if load[u] < replicas]
        if not free:
            return None
        best = min(free, key=lambda u: (load[u], uuids.index(u)))
        load[best] += 1
        picked.append(best)
    return picked


def requested_gpus(pod: dict[str, Any]) -> int:
    """The ``nvidia.com/gpu`` replicas all of the pod's containers ask for (limit, else
    request)."""
    total = 0
    for c in pod["spec"].get("containers", []):
        res = c.get("resources") or {}
        value = ((res.get("limits") or {}).get(DEFAULT_GPU_RESOURCE)
                 or (res.get("requests") or {}).get(DEFAULT_GPU_RESOURCE))
        total += int(value or 0)
    return total
