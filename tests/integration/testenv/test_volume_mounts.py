"""A process pod's hostPath and persistentVolumeClaim volumes are bind-mounted at their
mountPaths in the process's own mount namespace (read-only when asked), its claims are bound
by kube-controller-manager's binder, and a volume that cannot be mounted keeps the pod
Pending with the kubelet's FailedMount events until it can."""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from testenv.cluster import Cluster
from testenv.waiting import wait_for
from tests.integration.helpers import pod, read_pod, wait_phase

MOUNT_ROOT = Path("/var/lib/kuzk-test")

# Reads ``x`` in each directory it is given and tries to open it for writing; reports its pid
# and, per directory, what it read and the error the write got ("" when it could write).
READER = """
import errno, json, os, sys
seen = {}
for d in sys.argv[1:]:
    data = open(os.path.join(d, "x")).read()
    try:
        open(os.path.join(d, "x"), "a").close()
        seen[d] = [data, ""]
    except OSError as e:
        seen[d] = [data, errno.errorcode[e.errno]]
open(os.environ["TERMINATION_MESSAGE_PATH"], "w").write(json.dumps({"pid": os.getpid(),
                                                                    "seen": seen}))
"""


@pytest.fixture
def mount_root() -> Iterator[Path]:
    """A directory of the host's own for this test's mount paths, removed afterwards."""
    root = MOUNT_ROOT / uuid.uuid4().hex[:12]
    yield root
    shutil.rmtree(root, ignore_errors=True)
    with contextlib.suppress(OSError):  # another test's mount paths may still be there
        MOUNT_ROOT.rmdir()


@pytest.fixture
def persistent_volume(cluster: Cluster) -> Iterator[Callable[[str, Path, str, str], None]]:
    """``persistent_volume(name, path, namespace, claim)``: a hostPath PersistentVolume
    reserved for that claim (``claimRef``), deleted afterwards."""
    made: list[str] = []

    def make(name: str, path: Path, namespace: str, claim: str) -> None:
        cluster.core.create_persistent_volume({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
                     "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
                     "hostPath": {"path": str(path), "type": "Directory"},
                     "claimRef": {"namespace": namespace, "name": claim}},
        })
        made.append(name)

    yield make
    for name in made:
        with contextlib.suppress(ApiException):
            cluster.core.delete_persistent_volume(name)


def _claim(name: str, volume: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                            "resources": {"requests": {"storage": "1Gi"}}}
    if volume:
        spec["volumeName"] = volume
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": spec}


def _reader(name: str, mounts: list[dict[str, Any]], volumes: list[dict[str, Any]],
            **spec: Any) -> dict[str, Any]:
    command = [sys.executable, "-c", READER, *(m["mountPath"] for m in mounts)]
    return pod(name, command, container={"volumeMounts": mounts}, volumes=volumes, **spec)


def _seen(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    got = wait_phase(cluster.core, namespace, name, "Succeeded", "Failed")
    term = got.status.container_statuses[0].state.terminated
    assert got.status.phase == "Succeeded", term.message
    seen: dict[str, Any] = json.loads(term.message)
    assert term.container_id == f"process://{seen['pid']}"  # exec'd: the kubelet's own pid
    return seen["seen"]


def _sealed(tmp_path: Path) -> Path:
    sectors = tmp_path / "sectors"
    sectors.mkdir()
    (sectors / "x").write_text("sealed")
    return sectors


def test_host_path_is_mounted_read_only_where_asked(cluster: Cluster, namespace: str, nodes,
                                                    tmp_path: Path, mount_root: Path) -> None:
    nodes(1)
    params = tmp_path / "params"
    (params / "sub").mkdir(parents=True)
    (params / "x").write_text("params")
    (params / "sub" / "x").write_text("sub")
    ro, rw = mount_root / "params", mount_root / "sub"
    cluster.core.create_namespaced_pod(namespace, _reader(
        "params",
        [{"name": "params", "mountPath": str(ro), "readOnly": True},
         {"name": "params", "mountPath": str(rw), "subPath": "sub"}],
        [{"name": "params", "hostPath": {"path": str(params), "type": "Directory"}}],
    ))
    assert _seen(cluster, namespace, "params") == {str(ro): ["params", "EROFS"],
                                                   str(rw): ["sub", ""]}
    assert (params / "x").read_text() == "params"
    # The mounts were the process's own: the host has only the empty mount points.
    assert [list(ro.iterdir()), list(rw.iterdir())] == [[], []]


def test_claim_bound_to_a_host_path_volume_is_mounted(cluster: Cluster, namespace: str, nodes,
                                                      tmp_path: Path, mount_root: Path,
                                                      persistent_volume) -> None:
    nodes(1)
    volume = f"{namespace}-sectors"
    persistent_volume(volume, _sealed(tmp_path), namespace, "sectors")
    cluster.core.create_namespaced_persistent_volume_claim(namespace, _claim("sectors", volume))
    target = mount_root / "sectors"
    cluster.core.create_namespaced_pod(namespace, _reader(
        "prover",
        [{"name": "sectors", "mountPath": str(target)}],
        [{"name": "sectors", "persistentVolumeClaim": {"claimName": "sectors",
                                                       "readOnly": True}}],
    ))
    assert _seen(cluster, namespace, "prover") == {str(target): ["sealed", "EROFS"]}
    claim = cluster.core.read_namespaced_persistent_volume_claim("sectors", namespace)
    assert (claim.status.phase, claim.spec.volume_name) == ("Bound", volume)


def test_scheduler_holds_a_pod_whose_claim_is_missing(cluster: Cluster, namespace: str,
                                                      nodes) -> None:
    nodes(1)
    cluster.core.create_namespaced_pod(namespace, _reader(
        "orphan",
        [{"name": "sectors", "mountPath": "/var/lib/kuzk-test/never"}],
        [{"name": "sectors", "persistentVolumeClaim": {"claimName": "nope"}}],
    ))

    def failed_scheduling() -> list[str]:
        events = cluster.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=orphan,reason=FailedScheduling").items
        return [e.message for e in events]

    messages = wait_for(failed_scheduling, 30, "a FailedScheduling event")
    assert any('persistentvolumeclaim "nope" not found' in m for m in messages), messages
    got = read_pod(cluster.core, namespace, "orphan")
    assert got is not None
    assert (got.status.phase, got.spec.node_name) == ("Pending", None)


def test_bound_pod_waits_for_its_claim_then_runs(cluster: Cluster, namespace: str, nodes,
                                                 tmp_path: Path, mount_root: Path,
                                                 persistent_volume) -> None:
    node = next(iter(nodes(1).nodes))
    target = mount_root / "sectors"
    cluster.core.create_namespaced_pod(namespace, _reader(
        "early",
        [{"name": "sectors", "mountPath": str(target), "readOnly": True}],
        [{"name": "sectors", "persistentVolumeClaim": {"claimName": "later"}}],
        nodeName=node,
    ))

    def failed_mount() -> Any:
        events = cluster.core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=early,reason=FailedMount").items
        return next((e for e in events if (e.count or 0) >= 2), None)  # tried again

    event = wait_for(failed_mount, 30, "a repeated FailedMount event")
    assert event.type == "Warning"
    assert event.source.component == "kubelet"
    assert event.message == ('MountVolume.SetUp failed for volume "sectors" : '
                             'persistentvolumeclaim "later" not found')
    got = read_pod(cluster.core, namespace, "early")
    assert got is not None
    assert got.status.phase == "Pending"
    assert got.status.container_statuses[0].state.waiting.reason == "ContainerCreating"
    assert not target.exists()

    persistent_volume(f"{namespace}-later", _sealed(tmp_path), namespace, "later")
    cluster.core.create_namespaced_persistent_volume_claim(namespace, _claim("later"))
    assert _seen(cluster, namespace, "early") == {str(target): ["sealed", "EROFS"]}
