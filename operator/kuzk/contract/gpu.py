"""What kuzk knows of GPUs on a node: the extended resource a partition pod asks for, the
labels NVIDIA's GPU feature discovery puts on a node, and how many physical GPUs that makes.

A device plugin that time-slices a GPU advertises it as ``nvidia.com/gpu.replicas`` units of
the resource, so the resource's amount is not the count of GPUs the status server shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The extended resource of one GPU unless the operator is told another (``--gpu-resource``).
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# GPU feature discovery's labels: the node's physical GPUs and the replicas each is shared as.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"


def _label_int(labels: Mapping[str, Any], key: str) -> int | None:
    try:
        value = int(str(labels.get(key, "")))
    except ValueError:
        return None
    return value if value > 0 else None


def physical_gpus(node: Mapping[str, Any], gpu_resource: str, workers: int = 0) -> int:
    """How many physical GPUs a node has, never counting time-slicing replicas: the GPU
    feature discovery's ``nvidia.com/gpu.count`` label, else the workers its WorkerStatuses
    list, else its allocatable ``gpu_resource`` divided by ``nvidia.com/gpu.replicas``."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    counted = _label_int(labels, GPU_COUNT_LABEL)
    if counted is not None:
        return counted
    if workers > 0:
        return workers
    status = node.get("status") or {}
    amounts = status.get("allocatable") or status.get("capacity") or {}
    try:
        advertised = int(str(amounts.get(gpu_resource, 0) or 0))
    except ValueError:
        return 0
    return advertised // (_label_int(labels, GPU_REPLICAS_LABEL) or 1)
