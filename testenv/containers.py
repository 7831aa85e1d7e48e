"""The process kubelet's container mode: pods whose images are in the local podman store, or
served by a registry on this machine's loopback, run as real containers (podman with runc),
the way a kubelet runs them.

Images named after a loopback registry are pulled first, as a kubelet pulls them
(``testenv/pulls.py``); no other image is ever pulled.

A container gets what a real kubelet gives it: its volumes (``emptyDir``, ``hostPath``,
``configMap``, ``secret``, ``downwardAPI`` and ``projected``, so the ServiceAccount admission
plugin's ``kube-api-access-*`` volume puts a token bound to the pod, ``ca.crt`` and
``namespace`` at ``/var/run/secrets/kubernetes.io/serviceaccount/``), the termination-message
file at ``terminationMessagePath``, ``KUBERNETES_SERVICE_HOST``/``PORT`` (the API server's
real address: the test bed has no Service proxy), ``command``/``args`` resolved against the
image's entrypoint and cmd as Kubernetes defines, and its ``securityContext``. It shares the
host's network, so the pod's own 127.x.y.z address is reachable for probes. Deletion sends the
signals through the runtime (``podman kill``). Everything else (env, probes, restarts, status)
is the process kubelet's.

Differences from a real kubelet: a container that ``runAsNonRoot`` refuses ends with reason
``StartError`` and the kubelet's message (a real kubelet keeps it waiting with
``CreateContainerConfigError``); resource limits are not enforced.

This module holds ``ContainerRunner``, a ``PodRunner`` whose containers are podman
containers (their command, securityContext, mounts and signals), and which pods run as
containers. Their volumes are ``volumes.py``'s, the podman calls ``runtime.py``'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from testenv.env import expand
from testenv.pods import ContainerState, PodRunner
from testenv.pulls import ImagePulls, on_loopback_registry
from testenv.runtime import CONF, image_config, image_exists, podman
from testenv.volumes import PodVolumes

if TYPE_CHECKING:
    from testenv.kubelet import ProcessKubelet

LABEL = "io.kuzk.testenv.pod-uid"


def runs_as_containers(pod: dict[str, Any]) -> bool:
    """A pod runs as containers when every one of its images is in the local store or is
    pulled from a loopback registry."""
    images = [c.get("image") or "" for c in pod["spec"].get("containers") or []]
    return bool(images) and all(on_loopback_registry(image) or image_exists(image)
                                for image in images)


def _merged_security(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """The container's securityContext over the pod's (Kubernetes' precedence)."""
    shared = ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile")
    merged = {k: v for k, v in (pod["spec"].get("securityContext") or {}).items() if k in shared}
    merged.update(container.get("securityContext") or {})
    return merged


@dataclass
class _Container(ContainerState):
    """A container's state, reported with the runtime's container name as its ID."""

    pod_part: str = ""

    @property
    def runtime_name(self) -> str:
        return f"k8s_{self.name}_{self.pod_part}_{self.restart_count}"

    def status(self) -> dict[str, Any]:
        out = super().status()
        container_id = f"podman://{self.runtime_name}"
        if self.proc is not None or self.terminated is not None:
            out["containerID"] = container_id
        if self.terminated is not None:
            out["state"]["terminated"] = {**self.terminated, "containerID": container_id}
        return out


class ContainerRunner(ImagePulls, PodVolumes, PodRunner):
    """A PodRunner whose containers are podman containers instead of local processes."""

    def __init__(self, kubelet: ProcessKubelet, pod: dict[str, Any]) -> None:
        super().__init__(kubelet, pod)
        part = f"{self.name}_{self.namespace}_{self.uid[:8]}"
        self.containers = [_Container(c.spec, c.log, c.message_file, pod_part=part)
                           for c in self.containers]

    # --- environment -------------------------------------------------------------------
    def _service_account_kubeconfig(self) -> Path | None:
        return None  # containers read the token from their kube-api-access volume

    def _prepare(self) -> None:
        super()._prepare()
        server = urlsplit(self.kubelet.server)
        kept = ("HOSTNAME", "NVIDIA_VISIBLE_DEVICES")
        env = {k: v for k, v in self.base_env.items() if k in kept}
        env["KUBERNETES_SERVICE_HOST"] = server.hostname or "127.0.0.1"
        env["KUBERNETES_SERVICE_PORT"] = str(server.port or 443)
        env["KUBERNETES_SERVICE_PORT_HTTPS"] = env["KUBERNETES_SERVICE_PORT"]
        self.base_env = env
        self.volumes = {v["name"]: self._volume(v) for v in self.pod["spec"].get("volumes") or []}

    def _env(self, c: ContainerState) -> dict[str, str]:
        env = super()._env(c)
        # The message file is mounted at its real path; the variable is for processes only.
        if env.get("TERMINATION_MESSAGE_PATH") == str(c.message_file):
            del env["TERMINATION_MESSAGE_PATH"]
        return env

    # --- running -----------------------------------------------------------------------
    @staticmethod
    def _container_name(c: ContainerState) -> str:
        assert isinstance(c, _Container)
        return c.runtime_name

    def _argv(self, c: ContainerState, env: dict[str, str]) -> list[str]:
        """Kubernetes' rule: ``command`` replaces the entrypoint (and drops the image's cmd),
        ``args`` replace the cmd."""
        config = image_config(c.spec["image"])
        command = [expand(a, env) for a in c.spec.get("command") or []]
        args = [expand(a, env) for a in c.spec.get("args") or []]
        if command:
            return command + args
        return list(config.get("Entrypoint") or []) + (args or list(config.get("Cmd") or []))

    def _security_args(self, c: ContainerState) -> list[str]:
        sc = _merged_security(self.pod, c.spec)
        image_user = str(image_config(c.spec["image"]).get("User") or "0")
        user, _, group = image_user.partition(":")
        if sc.get("runAsUser") is not None:
            user = str(sc["runAsUser"])
        if sc.get("runAsGroup") is not None:
            group = str(sc["runAsGroup"])
        if sc.get("runAsNonRoot"):
            who = f'(pod: "{self.name}_{self.namespace}({self.uid})", container: {c.name})'
            if not user.isdigit():
                msg = (f"container has runAsNonRoot and image has non-numeric user ({user}), "
                       f"cannot verify user is non-root {who}")
                raise ValueError(msg)
            if int(user) == 0:
                msg = f"container has runAsNonRoot and image will run as root {who}"
                raise ValueError(msg)
        out = ["--user", f"{user}:{group}" if group else user]
        pod_sc = self.pod["spec"].get("securityContext") or {}
        for gid in [pod_sc.get("fsGroup"), *(pod_sc.get("supplementalGroups") or [])]:
            if gid is not None:
                out += ["--group-add", str(gid)]
        if sc.get("readOnlyRootFilesystem"):
            out += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("allowPrivilegeEscalation") is False:
            out += ["--security-opt", "no-new-privileges"]
        if sc.get("privileged"):
            out.append("--privileged")
        caps = sc.get("capabilities") or {}
        out += [a for cap in caps.get("drop") or [] for a in ("--cap-drop", cap)]
        out += [a for cap in caps.get("add") or [] for a in ("--cap-add", cap)]
        seccomp = (sc.get("seccompProfile") or {}).get("type", "Unconfined")
        if seccomp == "Unconfined":  # a kubelet's default without --seccomp-default
            out += ["--security-opt", "seccomp=unconfined"]
        elif seccomp != "RuntimeDefault":
            msg = f"seccompProfile {seccomp} is not supported by the process kubelet"
            raise ValueError(msg)
        return out

    def _mount_args(self, c: ContainerState) -> list[str]:
        out = []
        for m in c.spec.get("volumeMounts") or []:
            if m["name"] not in self.volumes:
                msg = f"volumeMount {m['name']!r} names no volume of the pod"
                raise ValueError(msg)
            source = self.volumes[m["name"]] / (m.get("subPath") or "")
            spec = f"type=bind,src={source},dst={m['mountPath']}"
            out += ["--mount", spec + (",ro=true" if m.get("readOnly") else "")]
        c.message_file.chmod(0o666)  # whatever user the container runs as writes it
        path = c.spec.get("terminationMessagePath") or "/dev/termination-log"
        out += ["--mount", f"type=bind,src={c.message_file},dst={path}"]
        return out

    def _popen(self, c: ContainerState, env: dict[str, str]) -> subprocess.Popen[bytes]:
        argv = self._argv(c, env)
        if not argv:
            msg = f"image {c.spec['image']} has no entrypoint and the container no command"
            raise ValueError(msg)
        run = [
            "podman", "run", "--rm", "--pull=never", "--network=host",
            "--name", self._container_name(c), "--label", f"{LABEL}={self.uid}",
            "--hostname", self.name[:63], "--entrypoint", json.dumps(argv),
            *self._security_args(c), *self._mount_args(c),
        ]
        if c.spec.get("workingDir"):
            run += ["--workdir", c.spec["workingDir"]]
        for name, value in env.items():
            run += ["--env", f"{name}={value}"]
        run.append(c.spec["image"])
        with c.log.open("ab") as out:
            return subprocess.Popen(
                run, env=dict(os.environ, CONTAINERS_CONF=str(CONF)), stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def _signal(self, c: ContainerState, sig: int) -> None:
        proc = c.proc
        if proc is None or proc.poll() is not None:
            return
        name = self._container_name(c)
        done = podman("kill", "--signal", str(int(sig)), name).returncode == 0
        if not done and sig == signal.SIGKILL:
            # Not created yet or already gone: end the runtime's process and what it made.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            podman("rm", "--force", "--time", "0", name)

    def _probe_once(self, c: ContainerState, probe: dict[str, Any]) -> bool:
        if "exec" not in probe:
            return super()._probe_once(c, probe)
        timeout = float(probe.get("timeoutSeconds", 1))
        r = podman("exec", self._container_name(c), *probe["exec"]["command"],
                   timeout=timeout + 5)  # podman's own start-up is not the probe's time
        return r.returncode == 0
