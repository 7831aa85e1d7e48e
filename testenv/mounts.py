"""The ``hostPath`` and ``persistentVolumeClaim`` volumes of a pod run as processes, mounted as a
kubelet mounts them.

Each such volume resolves to a directory of the host: a ``hostPath`` to its path, checked
by its ``type`` as for a pod run as containers (``volumes.py``); a claim to the one of that
name in the pod's namespace, which must be Bound to a PersistentVolume whose ``claimRef`` is
that claim, then to the volume's ``hostPath`` (checked by its ``type``) or ``local`` path
(which must exist). A volume that does not resolve keeps the pod Pending, its containers
waiting in ``ContainerCreating``, and is tried again (0.5 s doubling to 4 s) until it does or
the pod is deleted; each failure is a Warning Event ``FailedMount`` on the pod,
``MountVolume.SetUp failed for volume "NAME" : WHY``, counted again on its first Event when
it repeats, as the kubelet's event recorder does. Volumes of other kinds are not mounted.

A container whose ``volumeMounts`` name such volumes runs in a private mount namespace
(``unshare --mount``) where a shell bind-mounts each at its ``mountPath`` (the volume's
directory, or its ``subPath``/``subPathExpr`` under it, made when missing as a kubelet makes
it), remounted read-only when the volumeMount or the claim's volume source says
``readOnly``, then ``exec``s the command: the process the kubelet signals and reaps is the
command's own, under the same pid. Its other paths are the host's: a missing mount point is
made on the host (a directory, or an empty file for a file) and stays there. A bind mount
that fails ends the container with exit code 128 and the reason in its log. Mounting needs
root: run as another user, such a container fails to start and says so."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import urllib3
from kubernetes.client.exceptions import ApiException

from testenv.env import expand
from testenv.kubeapi import now
from testenv.podparts import PodParts
from testenv.volumes import host_path

if TYPE_CHECKING:
    from collections.abc import Callable

    from testenv.pods import ContainerState

MOUNT_RETRY = (0.5, 4.0)  # first delay, longest delay
MOUNT_FAILED_EXIT_CODE = 128

# sh -c SCRIPT NAME WORKDIR (SOURCE TARGET ro|rw)... -- COMMAND...
_MOUNT_AND_EXEC = (
    'workdir=$1; shift; '
    'while [ "$1" != -- ]; do '
    'mount --bind "$1" "$2" && { [ "$3" = rw ] || mount -o remount,bind,ro "$2"; } '
    f'|| {{ echo "process kubelet: cannot mount $1 at $2" >&2; exit {MOUNT_FAILED_EXIT_CODE}; }}; '
    'shift 3; done; shift; '
    f'cd "$workdir" || exit {MOUNT_FAILED_EXIT_CODE}; '
    'exec "$@"'
)

class HostVolume(NamedTuple):
    """A volume resolved to a directory of the host; ``read_only`` when its source says so
    (a claim's ``readOnly``)."""

    path: Path
    read_only: bool


class ProcessMounts(PodParts):
    """Resolves a ``PodRunner``'s hostPath and claim volumes (``host_volumes``, by name) and
    runs its containers' commands with them mounted."""

    host_volumes: dict[str, HostVolume]
    deleting: threading.Event

    if TYPE_CHECKING:
        def push(self) -> None: ...

    # --- resolving ---------------------------------------------------------------------
    def _mount_volumes(self) -> bool:
        """Resolve the pod's hostPath and claim volumes into ``host_volumes``, trying again
        until every one resolves (True) or the pod is deleted (False). A pod run as containers
        passes here too: ``volumes.py`` made its hostPaths already, they resolve at once."""
        delay = MOUNT_RETRY[0]
        posted: dict[str, tuple[str, int]] = {}
        waiting = False
        while not self.deleting.is_set():
            resolved, failed = {}, {}
            for volume in self.pod["spec"].get("volumes") or []:
                if "hostPath" not in volume and "persistentVolumeClaim" not in volume:
                    continue
                try:
                    resolved[volume["name"]] = self._host_volume(volume)
                except ValueError as e:
                    failed[volume["name"]] = str(e)
            if not failed:
                self.host_volumes = resolved
                return True
            if not waiting:
                self.push()  # Pending, its containers in ContainerCreating
                waiting = True
            for name, why in failed.items():
                self._warning("FailedMount", f'MountVolume.SetUp failed for volume "{name}" : '
                                             f"{why}", posted)
            self.deleting.wait(delay)
            delay = min(delay * 2, MOUNT_RETRY[1])
        return False

    def _host_volume(self, volume: dict[str, Any]) -> HostVolume:
        """The host path of a hostPath or claim volume; ValueError saying why not."""
        if "hostPath" in volume:
            return HostVolume(host_path(volume["hostPath"]), False)
        source = volume["persistentVolumeClaim"]
        return HostVolume(self._claim_path(source["claimName"]),
                          bool(source.get("readOnly")))

    def _claim_path(self, claim_name: str) -> Path:
        """The host path of the volume bound to claim ``claim_name``, checked as a kubelet
        checks it; ValueError saying why not."""
        core = self.kubelet.core
        what = f'persistentvolumeclaim "{claim_name}"'
        claim = self._read(what, lambda: core.read_namespaced_persistent_volume_claim(
            claim_name, self.namespace))
        pv_name = claim.spec.volume_name
        if claim.status.phase != "Bound" or not pv_name:
            msg = f"{what} is not bound (phase {claim.status.phase})"
            raise ValueError(msg)
        pv_what = f'persistentvolume "{pv_name}"'
        pv = self._read(pv_what, lambda: core.read_persistent_volume(pv_name))
        ref = pv.spec.claim_ref
        if ref is None or ref.uid != claim.metadata.uid:
            msg = f"{pv_what} is not bound to {what}"
            raise ValueError(msg)
        if pv.spec.host_path is not None:
            return host_path({"path": pv.spec.host_path.path, "type": pv.spec.host_path.type})
        if pv.spec.local is not None:
            return host_path({"path": pv.spec.local.path})
        msg = f"{pv_what} has no hostPath or local path, the only ones the process kubelet mounts"
        raise ValueError(msg)

    def _read(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()`` through an API outage; ValueError saying why it failed."""
        try:
            return self.kubelet.through_outage(what, call)
        except ApiException as e:
            msg = f"{what} not found" if e.status == 404 else f"{what}: {e.status} {e.reason}"
            raise ValueError(msg) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            msg = f"{what}: {type(e).__name__}"
            raise ValueError(msg) from None

    def _warning(self, reason: str, message: str, posted: dict[str, tuple[str, int]]) -> None:
        """Post a Warning Event about this pod, as the kubelet's recorder does: best effort,
        and one already in ``posted`` (same reason and message) counted again on its Event
        instead of posted anew."""
        key = f"{reason}: {message}"
        if key in posted:
            name, count = posted[key]
            try:
                self.kubelet.core.patch_namespaced_event(
                    name, self.namespace, {"count": count + 1, "lastTimestamp": now()})
                posted[key] = (name, count + 1)
                return
            except (ApiException, urllib3.exceptions.HTTPError, OSError):
                del posted[key]  # its Event is gone or unreachable: this one is posted anew
        if (event := self._post_event("Warning", reason, message)) is not None:
            posted[key] = (event, 1)

    # --- mounting ----------------------------------------------------------------------
    def _binds(self, c: ContainerState, env: dict[str, str]) -> list[tuple[Path, Path, bool]]:
        """Container ``c``'s mounts of hostPath and claim volumes: (host path, mount path,
        read-only), the host path made when a ``subPath`` under the volume is missing."""
        out = []
        for m in c.spec.get("volumeMounts") or []:
            volume = self.host_volumes.get(m["name"])
            if volume is None:
                continue
            source = volume.path
            sub = m.get("subPath") or expand(m.get("subPathExpr") or "", env)
            if sub:
                source = source / sub
                if not source.exists():
                    source.mkdir(parents=True)
            target = Path("/", m["mountPath"])
            out.append((source, target, bool(m.get("readOnly")) or volume.read_only))
        return out

    def _in_mount_namespace(self, c: ContainerState, env: dict[str, str], argv: list[str],
                            cwd: str) -> tuple[list[str], str]:
        """``argv`` and its working directory, or, when container ``c`` mounts hostPath or
        claim volumes, the command that mounts them in a private mount namespace, changes to
        ``cwd`` there and execs ``argv`` (started from the pod's directory); the mount points
        are made on the host."""
        binds = self._binds(c, env)
        if not binds:
            return argv, cwd
        if os.geteuid() != 0:
            where = ", ".join(str(target) for _, target, _ in binds)
            msg = (f"the process kubelet needs root to mount volumes (at {where}); it runs as"
                   f" uid {os.geteuid()}")
            raise ValueError(msg)
        args = []
        for source, target, read_only in binds:
            if source.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.touch()
            args += [str(source), str(target), "ro" if read_only else "rw"]
        wrapped = ["unshare", "--mount", "--propagation", "private", "--",
                   "/bin/sh", "-c", _MOUNT_AND_EXEC, "kuzk-mount", cwd, *args, "--", *argv]
        return wrapped, str(self.dir)

