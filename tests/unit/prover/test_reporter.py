"""ProverReporter's reading of the partition pod: the assignment and GPU from its env, and
its credentials through contract.kubeconfig (no writes: those are tested against the API server in
tests/integration/workers/test_prover_reporter.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.config import ConfigException

from kuzk.contract.workerstatus.decisions import Assignment, Gpu
from kuzk_prover import inputs
from kuzk_prover.reporter import ProverReporter

GPU1 = Gpu("GPU-1")

ENV = {
    "NODE_NAME": "gpu-node-1",
    "POD_NAME": "job-p0-a1",
    "POD_UID": "pod-uid",
    "POD_NAMESPACE": "ns",
    "KUZK_JOB": "job",
    "KUZK_JOB_UID": "job-uid",
    "KUZK_PARTITION": "0",
    "KUZK_ATTEMPT": "1",
    "KUZK_PROOF_KIND": "winning-post",
}


@pytest.mark.parametrize(
    ("devices", "device", "expected"),
    [
        ("GPU-a,GPU-b", None, Gpu("GPU-a")),
        ("GPU-a", GPU1, GPU1),
        ("", None, Gpu("CPU-gpu-node-1", "cpu")),
        ("all", None, Gpu("CPU-gpu-node-1", "cpu")),
        ("void", None, Gpu("CPU-gpu-node-1", "cpu")),
    ],
)
def test_prover_gpu_identity(devices: str, device: Gpu | None, expected: Gpu) -> None:
    env = {**ENV, "NVIDIA_VISIBLE_DEVICES": devices}
    reporter = ProverReporter.from_env(env, api=client.ApiClient())
    assert reporter.gpu(device) == expected
    assert reporter.assignment == Assignment(
        "ns", "job", "job-uid", "winning-post", 0, 1, "job-p0-a1", "pod-uid"
    )


@pytest.mark.parametrize("priority_class", ["kuzk-critical", "team-urgent", ""])
def test_the_lane_ranks_by_the_jobs_priority_class_from_the_env(priority_class: str) -> None:
    """What KUZK_PRIORITY_CLASS says goes into the assignment, so the join writes its rank;
    a pod without it (an earlier release) ranks by its kind."""
    env = {**ENV, "KUZK_PROOF_KIND": "snap-update", "KUZK_PRIORITY_CLASS": priority_class}
    reporter = ProverReporter.from_env(env, api=client.ApiClient())
    assert reporter.assignment.priority_class == priority_class
    assert reporter.assignment == Assignment(
        "ns", "job", "job-uid", "snap-update", 0, 1, "job-p0-a1", "pod-uid", priority_class)


def test_the_proof_and_the_lane_come_from_one_reading_of_the_env() -> None:
    env = {**ENV, "NVIDIA_VISIBLE_DEVICES": "GPU-a",
           "KUZK_INPUT": '{"sector": {"miner": 1, "number": 2}, "circuitLog2": 8,'
                         ' "partitions": 1}'}
    pod = inputs.from_env(env)
    reporter = ProverReporter.for_pod(pod.identity, client.ApiClient())
    assert reporter.assignment == ProverReporter.from_env(env, client.ApiClient()).assignment
    assert (reporter.node, reporter.gpu()) == ("gpu-node-1", Gpu("GPU-a"))
    assert (pod.proof.proof_kind, pod.proof.partition) == ("winning-post", 0)
    assert (reporter.assignment.proof_kind, reporter.assignment.partition) == ("winning-post", 0)


def test_prover_env_must_name_the_assignment() -> None:
    env = {k: v for k, v in ENV.items() if k not in ("POD_UID", "NODE_NAME")}
    with pytest.raises(ValueError, match="lacks NODE_NAME, POD_UID"):
        ProverReporter.from_env(env, api=client.ApiClient())
    env = {k: v for k, v in ENV.items() if k != "KUZK_ATTEMPT"}
    with pytest.raises(ValueError, match="KUZK_ATTEMPT is missing or empty"):
        ProverReporter.from_env(env, api=client.ApiClient())
    with pytest.raises(ValueError, match="KUZK_PARTITION='two' is not an integer"):
        ProverReporter.from_env({**ENV, "KUZK_PARTITION": "two"}, api=client.ApiClient())


def test_prover_credentials_come_from_the_kubeconfig_its_env_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://10.9.8.7:6443"}}],
                "users": [{"name": "u", "user": {"token": "pod-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    reporter = ProverReporter.from_env({**ENV, "KUBECONFIG": str(kubeconfig)})
    configuration = reporter.api.configuration
    assert configuration.host == "https://10.9.8.7:6443"
    assert "Bearer pod-token" in configuration.api_key.values()
    assert configuration.retries == 0, "the reporter retries itself; urllib3 must not"


def test_prover_without_credentials_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigException):
        ProverReporter.from_env({**ENV, "KUBECONFIG": str(tmp_path / "absent")})


def test_the_memory_a_lane_reports_is_the_process_s_own() -> None:
    """Host memory: the process's resident set as /proc/self/status says it; device memory:
    the callable's figure (CuPy's pool by default, 0 when CuPy is not in use)."""
    reporter = ProverReporter.from_env(ENV, api=client.ApiClient())
    assert reporter.measure().device_bytes == 0
    reporter.device_memory = lambda: 4096
    held = b"\1" * (64 << 20)  # 64 MiB, written: resident
    sample = reporter.measure()
    status = Path("/proc/self/status").read_text()
    vm_rss = next(int(line.split()[1]) << 10 for line in status.splitlines()
                  if line.startswith("VmRSS:"))
    assert sample.device_bytes == 4096
    assert sample.host_bytes > len(held)
    assert sample.host_bytes == pytest.approx(vm_rss, rel=0.05)
