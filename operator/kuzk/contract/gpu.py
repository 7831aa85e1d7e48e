"""What kuzk knows of a GPU, in one place: what identifies one (``Gpu``: its UUID, with the
name and memory its prover reports), which one a container was given (``visible_gpu``: the
first of ``NVIDIA_VISIBLE_DEVICES``, else the node's CPU), the extended resource a partition pod
asks for, the labels NVIDIA's GPU feature discovery puts on a node, and how many physical GPUs
that makes. What CUDA itself says of the device a prover computes on (its name, its UUID as
nvidia-smi writes it, its memory) is read by the prover's backend (``kuzk_prover.core.backend``,
which imports nothing of kuzk) and becomes a ``Gpu`` in ``kuzk_prover.entrypoint``.

A device plugin that time-slices a GPU advertises it as ``nvidia.com/gpu.replicas`` units of
the resource, so the resource's amount is not the count of GPUs the status server shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The extended resource of one GPU unless the operator is told another (``--gpu-resource``).
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
# GPU feature discovery's labels: the node's physical GPUs and the replicas each is shared as.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
# The devices the container runtime gives a container (the device plugin's choice): UUIDs,
# comma-separated, or one of the words that name no device.
VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
_NOT_A_DEVICE = ("", "all", "none", "void")


@dataclass(frozen=True)
class Gpu:
    """The GPU a worker drives; the UUID is its identity."""

    uuid: str
    name: str = ""
    memory_bytes: int | None = None

    def as_status(self) -> dict[str, Any]:
        gpu: dict[str, Any] = {"uuid": self.uuid}
        if self.name:
            gpu["name"] = self.name
        if self.memory_bytes is not None:
            gpu["memoryBytes"] = self.memory_bytes
        return gpu

    @classmethod
    def from_status(cls, value: Mapping[str, Any] | None) -> Gpu:
        """The GPU of a stored ``as_status`` form (a missing one has an empty UUID)."""
        gpu = value or {}
        memory = gpu.get("memoryBytes")
        return cls(
            str(gpu.get("uuid") or ""),
            str(gpu.get("name") or ""),
            None if memory is None else int(memory),
        )


def visible_gpu(visible_devices: str, node: str) -> Gpu:
    """The GPU a container on ``node`` drives, by its ``NVIDIA_VISIBLE_DEVICES``: the first
    device listed, else (none listed, or all of them) the node's CPU."""
    first = visible_devices.split(",")[0].strip()
    if first.lower() not in _NOT_A_DEVICE:
        return Gpu(first)
    return Gpu(f"CPU-{node}", "cpu")


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
