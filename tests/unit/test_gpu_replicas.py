"""The process kubelet's time-slicing replicas (NodeSpec.replicas), as the NVIDIA device
plugin gives them: capacity GPUs x replicas, the GPU feature discovery's labels, and replicas
handed out least-loaded GPU first."""

from __future__ import annotations

import pytest

from tests.testenv.kubelet import NodeSpec, pick_replicas

GPUS = ["GPU-a", "GPU-b"]


def allocate(pods: int, replicas: int) -> list[list[str] | None]:
    in_use: dict[str, int] = {}
    out = []
    for _ in range(pods):
        picked = pick_replicas(GPUS, in_use, replicas, 1)
        for uuid in picked or []:
            in_use[uuid] = in_use.get(uuid, 0) + 1
        out.append(picked)
    return out


def test_two_pods_never_share_a_gpu_while_another_is_free() -> None:
    assert allocate(7, replicas=3) == [
        ["GPU-a"], ["GPU-b"], ["GPU-a"], ["GPU-b"], ["GPU-a"], ["GPU-b"], None,
    ]


def test_the_least_loaded_gpu_comes_first() -> None:
    assert pick_replicas(GPUS, {"GPU-a": 1}, 3, 1) == ["GPU-b"]
    assert pick_replicas(GPUS, {"GPU-a": 1, "GPU-b": 2}, 3, 2) == ["GPU-a", "GPU-a"]
    assert pick_replicas(GPUS, {"GPU-a": 3, "GPU-b": 2}, 3, 2) is None


def test_one_replica_is_one_pod_per_gpu() -> None:
    assert allocate(3, replicas=1) == [["GPU-a"], ["GPU-b"], None]


def test_a_released_replica_is_free_again() -> None:
    in_use = {"GPU-a": 1, "GPU-b": 1}
    assert pick_replicas(GPUS, in_use, 1, 1) is None
    in_use["GPU-a"] -= 1
    assert pick_replicas(GPUS, in_use, 1, 1) == ["GPU-a"]


@pytest.mark.parametrize(("replicas", "strategy"), [(1, "none"), (3, "time-slicing")])
def test_labels_name_physical_gpus_and_replicas(replicas: int, strategy: str) -> None:
    spec = NodeSpec("gpu-1", gpus=2, replicas=replicas)
    assert spec.gpu_labels() == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/gpu.sharing-strategy": strategy,
    }


def test_replicas_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="replicas must be at least 1"):
        NodeSpec("gpu-1", replicas=0)
