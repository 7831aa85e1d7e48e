"""Partition pods are hardened (the restricted Pod Security level), keep CuPy's kernels in
a writable volume (an emptyDir by default, a node directory when the operator or the job
names one), have a writable /tmp of their own, and are probed on their prover's pulse (over
HTTP, or with ``kuzk-alive`` where the operator says so): not ready first, then killed, well
within 90 s of the prover getting stuck, and given minutes to start."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from kuzk.contract.pod import ALIVE_PORT
from kuzk.contract.proofjob import resolve
from kuzk.operator.decide.pods import HTTP_PROBES, PROBE_KINDS, PodSettings, pod_manifest
from kuzk_prover.alive import PULSE_S
from tests.unit.operator.decide.objects import Make

SETTINGS = PodSettings(image="kuzk/prover:1")


def test_restricted_security_context():
    spec = pod_manifest(resolve(Make.job()), 0, 1, SETTINGS)["spec"]
    container = spec["containers"][0]
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_each_pod_gets_its_own_copy_of_the_security_context():
    first = pod_manifest(resolve(Make.job()), 0, 1, SETTINGS)
    first["spec"]["securityContext"]["runAsUser"] = 0
    first["spec"]["containers"][0]["securityContext"]["capabilities"]["drop"].clear()
    second = pod_manifest(resolve(Make.job()), 1, 1, SETTINGS)
    assert "runAsUser" not in second["spec"]["securityContext"]
    assert second["spec"]["containers"][0]["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }


def _cache(pod):
    volume, tmp = pod["spec"]["volumes"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["volumeMounts"] == [{"name": volume["name"], "mountPath": "/var/cache/kuzk"},
                                         {"name": tmp["name"], "mountPath": "/tmp"}]
    assert tmp == {"name": "tmp", "emptyDir": {}}
    assert env["CUPY_CACHE_DIR"] == "/var/cache/kuzk/cupy"
    return {k: v for k, v in volume.items() if k != "name"}


def test_kernel_cache_is_an_empty_dir_by_default():
    assert _cache(pod_manifest(resolve(Make.job()), 0, 1, SETTINGS)) == {"emptyDir": {}}


def test_kernel_cache_on_the_node_is_the_operators_and_never_the_jobs():
    settings = PodSettings(image="kuzk/prover:1", kernel_cache_host_path="/var/lib/kuzk/cupy")
    pod = pod_manifest(resolve(Make.job()), 0, 1, settings)
    assert _cache(pod) == {"hostPath": {"path": "/var/lib/kuzk/cupy",
                                        "type": "DirectoryOrCreate"}}
    # A job stored before the field was removed from the CRD: the field is not read.
    stored = Make.job(prover={"kernelCacheHostPath": "/etc"})
    pod = pod_manifest(resolve(stored), 0, 1, PodSettings(image="kuzk/prover:1"))
    assert _cache(pod) == {"emptyDir": {}}


def _within(probe):
    """The pulse's age ``probe`` allows, from its HTTP path or its ``kuzk-alive`` command."""
    if "httpGet" in probe:
        return float(parse_qs(urlsplit(probe["httpGet"]["path"]).query)["within"][0])
    command = probe["exec"]["command"]
    return float(command[command.index("--within") + 1])


def _stale_after(probe):
    """The longest a stuck prover goes unnoticed by ``probe``: its pulse's age limit, then
    ``failureThreshold`` probes ``periodSeconds`` apart, the last waiting ``timeoutSeconds``
    for an answer that a stopped prover never gives."""
    return (_within(probe) + probe["periodSeconds"] * probe["failureThreshold"]
            + probe["timeoutSeconds"])


@pytest.mark.parametrize("kind", PROBE_KINDS)
def test_a_stuck_prover_turns_not_ready_then_is_killed_well_within_90_s(kind):
    settings = PodSettings(image="kuzk/prover:1", probes=kind)
    container = pod_manifest(resolve(Make.job()), 0, 1, settings)["spec"]["containers"][0]
    ready, live = container["readinessProbe"], container["livenessProbe"]
    # No startup probe: its success is one more update of every pod's status.
    assert "startupProbe" not in container
    killed = _stale_after(live) + live["terminationGracePeriodSeconds"]
    assert _stale_after(ready) < _stale_after(live) - 10, "not ready well before the kill"
    assert killed <= 75, killed
    # The liveness probe's first failures come after its initial delay: a prover that never
    # answers (refused at once) is killed by its last one; one that stops at its start, by its
    # last one's timeout.
    first = live["initialDelaySeconds"]
    last = first + live["periodSeconds"] * (live["failureThreshold"] - 1)
    assert last >= 40, "a prover whose start a busy node slows is not killed"
    assert last + live["timeoutSeconds"] + live["terminationGracePeriodSeconds"] <= 60
    assert "initialDelaySeconds" not in ready, "a prover is ready as soon as it answers"
    assert _within(live) >= 10 * PULSE_S, "a pulse a busy CPU delays is not a stuck prover"
    assert live["timeoutSeconds"] >= 5, "an answer a busy CPU delays is not a stuck prover"
    if kind == HTTP_PROBES:
        assert {p["httpGet"]["port"] for p in (ready, live)} == {"alive"}
        assert container["ports"] == [{"name": "alive", "containerPort": ALIVE_PORT,
                                       "protocol": "TCP"}]
    else:
        assert {p["exec"]["command"][0] for p in (ready, live)} == {"kuzk-alive"}
        assert "ports" not in container


def test_an_unknown_kind_of_probe_is_refused_by_name():
    with pytest.raises(ValueError, match="probes must be one of http, exec, not 'grpc'"):
        pod_manifest(resolve(Make.job()), 0, 1, PodSettings(image="kuzk/prover:1",
                                                            probes="grpc"))
