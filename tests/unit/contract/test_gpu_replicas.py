"""The process kubelet's time-slicing replicas (NodeSpec.replicas), as the NVIDIA device
plugin gives them: capacity GPUs x replicas, the GPU feature discovery's labels, and replicas
handed out least-loaded GPU first."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from kuzk.contract.gpu import DEFAULT_GPU_RESOURCE
from testenv.gpus import pick_replicas
from testenv.kubeapi import now
from testenv.kubelet import ProcessKubelet
from testenv.nodes import NodeSpec, node_status

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


@pytest.mark.parametrize("replicas", [0, -2])
def test_replicas_below_one_are_refused(replicas: int) -> None:
    with pytest.raises(ValueError, match="gpu-1: replicas must be at least 1"):
        NodeSpec("gpu-1", replicas=replicas)


# --- the kubelet's own bookkeeping (no API server is reached) --------------------------------
def kubelet(tmp_path: Path, *specs: NodeSpec) -> ProcessKubelet:
    return ProcessKubelet(client.ApiClient(), list(specs), tmp_path, server="https://127.0.0.1:1",
                          ca_cert=tmp_path / "ca.crt")


def test_the_kubelet_hands_out_replicas_least_loaded_gpu_first(tmp_path: Path) -> None:
    spec = NodeSpec("gpu-1", gpus=2, replicas=3)
    a, b = spec.gpu_uuids()
    k = kubelet(tmp_path, spec)
    got = [k.allocate_gpus("gpu-1", f"pod-{i}", 1) for i in range(7)]
    assert got == [[a], [b], [a], [b], [a], [b], None]
    assert k.gpus_in_use["gpu-1"]["pod-0"] == [a]
    k.release_gpus("gpu-1", "pod-3")  # one of b's replicas
    assert k.allocate_gpus("gpu-1", "pod-7", 1) == [b]
    assert k.allocate_gpus("gpu-1", "pod-8", 1) is None


def test_a_pod_asking_for_two_gets_the_distinct_physical_gpus(tmp_path: Path) -> None:
    two = NodeSpec("gpu-2", gpus=2, replicas=2)
    one = NodeSpec("gpu-1", gpus=1, replicas=3)
    k = kubelet(tmp_path, two, one)
    assert k.allocate_gpus("gpu-2", "p", 2) == two.gpu_uuids()
    # two replicas of one GPU: NVIDIA_VISIBLE_DEVICES names it once, but both are taken
    assert k.allocate_gpus("gpu-1", "q", 2) == one.gpu_uuids()
    assert k.allocate_gpus("gpu-1", "r", 2) is None
    assert k.allocate_gpus("gpu-1", "r", 1) == one.gpu_uuids()
    k.release_gpus("gpu-1", "q")
    k.release_gpus("gpu-1", "q")  # releasing twice (finish, then the runner's end) is harmless
    assert k.allocate_gpus("gpu-1", "s", 2) == one.gpu_uuids()


def test_one_replica_the_kubelet_gives_one_pod_per_gpu(tmp_path: Path) -> None:
    spec = NodeSpec("gpu-1", gpus=2)
    k = kubelet(tmp_path, spec)
    assert [k.allocate_gpus("gpu-1", u, 1) for u in "abc"] == [
        spec.gpu_uuids()[:1], spec.gpu_uuids()[1:], None,
    ]
    k.release_gpus("gpu-1", "a")
    assert k.allocate_gpus("gpu-1", "c", 1) == spec.gpu_uuids()[:1]


@pytest.mark.parametrize(("replicas", "advertised"), [(1, "2"), (3, "6")])
def test_capacity_is_gpus_times_replicas(tmp_path: Path, replicas: int, advertised: str) -> None:
    spec = NodeSpec("gpu-1", gpus=2, replicas=replicas)
    status = node_status(spec, now())
    assert status["capacity"][DEFAULT_GPU_RESOURCE] == advertised
    assert status["allocatable"][DEFAULT_GPU_RESOURCE] == advertised
