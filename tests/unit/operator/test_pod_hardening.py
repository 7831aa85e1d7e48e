"""Partition pods are hardened (the restricted Pod Security level), keep CuPy's kernels in
a writable volume (an emptyDir by default, a node directory when the operator or the job
names one), have a writable /tmp of their own, and are probed on their prover's pulse: not
ready first, then killed, well within 90 s of the prover getting stuck."""

from __future__ import annotations

from kuzk.contract.api import resolve
from kuzk.operator.pods import PodSettings, pod_manifest
from tests.unit.operator.objects import Make

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


def _stale_after(probe):
    """The longest a stuck prover goes unnoticed by ``probe``: its pulse's age limit, then
    ``failureThreshold`` probes ``periodSeconds`` apart, each up to ``timeoutSeconds``."""
    within = float(probe["exec"]["command"][probe["exec"]["command"].index("--within") + 1])
    return within + probe["periodSeconds"] * probe["failureThreshold"] + probe["timeoutSeconds"]


def test_a_stuck_prover_turns_not_ready_then_is_killed_within_a_minute():
    container = pod_manifest(resolve(Make.job()), 0, 1, SETTINGS)["spec"]["containers"][0]
    ready, live = container["readinessProbe"], container["livenessProbe"]
    assert ready["exec"]["command"][0] == live["exec"]["command"][0] == "kuzk-alive"
    killed = _stale_after(live) + live["terminationGracePeriodSeconds"]
    assert _stale_after(ready) < _stale_after(live) - 10, "not ready well before the kill"
    assert killed <= 60, killed
    assert live["initialDelaySeconds"] >= 10, "a prover that is starting is not killed"
