"""The process kubelet's container mode: pods whose images are in the local podman store, or
served by a registry on this machine's loopback, run as real containers (podman with runc),
the way a kubelet runs them.

Images named after a loopback registry (``127.0.0.1:PORT/...`` or ``localhost:PORT/...``:
the test bed's private registry, ``testenv/registry.py``) are pulled as a kubelet pulls
them: by ``imagePullPolicy`` (``IfNotPresent`` pulls what the store lacks, ``Always`` pulls
at every start, ``Never`` waits with ``ErrImageNeverPull``), with the credentials of the
pod's ``imagePullSecrets`` (Secrets of type ``kubernetes.io/dockerconfigjson``; those of its
ServiceAccount are in the pod's spec already, the API server's admission copies them), over
plain HTTP. A failed pull leaves the container waiting with ``ErrImagePull``, then
``ImagePullBackOff``, and is tried again (1 s doubling to 10 s; a kubelet waits 10 s doubling
to 5 min); the pod's Events say what happened (``Pulling``, ``Pulled``, ``Failed`` with the
registry's answer, ``BackOff``, ``FailedToRetrieveImagePullSecret``), as a kubelet's do. No
other image is ever pulled: a test that names none of a loopback registry waits on no pull.

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
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from testenv.kubelet import ContainerState, PodRunner, ProcessKubelet, expand, now

HERE = Path(__file__).resolve().parent
CONF = HERE / "containers.conf"
IMAGES_SCRIPT = HERE / "images"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LABEL = "io.kuzk.testenv.pod-uid"
_NEGATIVE_TTL = 2.0
PULL_SECONDS = 300
PULL_BACKOFF = (1.0, 10.0)  # first delay, longest delay
_found: dict[str, float] = {}
_found_lock = threading.Lock()


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run podman with the test bed's settings (runc, cgroupfs, explicit ulimits). A call
    that outlives ``timeout`` answers exit status 124, like timeout(1)."""
    env = dict(os.environ, CONTAINERS_CONF=str(CONF))
    try:
        return subprocess.run(["podman", *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(["podman", *args], 124, "",
                                           f"podman {args[0]} timed out after {timeout:.0f} s")


def image_exists(image: str) -> bool:
    """Whether ``image`` is in the local store. Misses are remembered for a moment only, so
    an image built during a session is found by the next pod."""
    if not image or shutil.which("podman") is None:
        return False
    with _found_lock:
        if image in _found and (_found[image] == 0.0 or time.monotonic() < _found[image]):
            return _found[image] == 0.0
    answer = podman("image", "exists", image)
    if answer.returncode == 124:
        raise OSError(answer.stderr)  # unknown: the kubelet's watch tries the pod again
    found = answer.returncode == 0
    with _found_lock:
        _found[image] = 0.0 if found else time.monotonic() + _NEGATIVE_TTL
    return found


def on_loopback_registry(image: str) -> bool:
    """Whether ``image`` is named after a registry served on this machine's loopback
    (``127.x.y.z:PORT/...``, ``localhost:PORT/...``): the only images the kubelet pulls.
    Names of locally built images (``localhost/kuzk:...``) carry no port."""
    host, slash, _ = image.partition("/")
    name, colon, port = host.rpartition(":")
    return bool(slash and colon and port.isdigit()) and (
        name == "localhost" or name.startswith("127."))


def runs_as_containers(pod: dict[str, Any]) -> bool:
    """A pod runs as containers when every one of its images is in the local store or is
    pulled from a loopback registry."""
    images = [c.get("image") or "" for c in pod["spec"].get("containers") or []]
    return bool(images) and all(on_loopback_registry(image) or image_exists(image)
                                for image in images)


@dataclass(frozen=True)
class Images:
    """The test bed's images, as testenv/images built them."""

    operator: str
    prover: str
    base: str


@functools.cache
def build_images() -> Images:
    """Build (or find, cached by their inputs) the images; once per process."""
    proc = subprocess.run([str(IMAGES_SCRIPT)], capture_output=True, text=True, timeout=1500,
                          check=False)
    if proc.returncode != 0:
        msg = f"testenv/images exited {proc.returncode}:\n{proc.stderr[-6000:]}"
        raise RuntimeError(msg)
    operator, prover, base = proc.stdout.split()[-3:]
    return Images(operator=operator, prover=prover, base=base)


@functools.cache
def _image_config(image: str) -> dict[str, Any]:
    proc = podman("image", "inspect", image)
    if proc.returncode != 0:
        msg = f"image {image}: {proc.stderr.strip()}"
        raise ValueError(msg)
    return dict(json.loads(proc.stdout)[0].get("Config") or {})


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


class ContainerRunner(PodRunner):
    """A PodRunner whose containers are podman containers instead of local processes."""

    volumes: dict[str, Path]

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

    # --- volumes -----------------------------------------------------------------------
    def _volume(self, volume: dict[str, Any]) -> Path:
        name = volume["name"]
        target = self.dir / "volumes" / name
        if "emptyDir" in volume:
            target.mkdir(parents=True, exist_ok=True)
            target.chmod(0o777)  # as a kubelet makes it: writable by any user of the pod
            return target
        if "hostPath" in volume:
            return self._host_path(name, volume["hostPath"])
        files: dict[str, tuple[bytes, int]] = {}
        if "projected" in volume:
            mode = volume["projected"].get("defaultMode", 0o644)
            for source in volume["projected"].get("sources") or []:
                files.update(self._source_files(source, mode))
        else:
            kinds = [k for k in ("configMap", "secret", "downwardAPI") if k in volume]
            if not kinds:
                other = sorted(set(volume) - {"name"})
                msg = f"volume {name}: {other} is not supported by the process kubelet"
                raise ValueError(msg)
            source = volume[kinds[0]]
            files = self._source_files({kinds[0]: source}, source.get("defaultMode", 0o644))
        target.mkdir(parents=True, exist_ok=True)
        for rel, (data, mode) in files.items():
            path = target / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            path.chmod(mode)
        return target

    def _host_path(self, name: str, source: dict[str, Any]) -> Path:
        path = Path(source["path"])
        kind = source.get("type") or ""
        if kind == "DirectoryOrCreate":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "FileOrCreate" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        elif kind == "Directory" and not path.is_dir():
            msg = f"volume {name}: hostPath {path} is not a directory"
            raise ValueError(msg)
        elif kind == "File" and not path.is_file():
            msg = f"volume {name}: hostPath {path} is not a file"
            raise ValueError(msg)
        elif not path.exists():
            msg = f"volume {name}: hostPath {path} does not exist"
            raise ValueError(msg)
        return path

    def _source_files(self, source: dict[str, Any], mode: int) -> dict[str, tuple[bytes, int]]:
        """The files one volume source projects, by relative path."""
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            token = self._token(sat.get("audience"), int(sat.get("expirationSeconds", 3600)))
            return {sat["path"]: (token.encode(), mode)}
        if "downwardAPI" in source:
            return {
                item["path"]: (self._field(item["fieldRef"]["fieldPath"]).encode(),
                               item.get("mode", mode))
                for item in source["downwardAPI"].get("items") or []
            }
        kind = "configMap" if "configMap" in source else "secret"
        ref = source[kind]
        ref_name = ref.get("name") or ref.get("secretName")
        data = self._object_data(kind, ref_name)
        if data is None:
            if ref.get("optional"):
                return {}
            msg = f"{kind} {self.namespace}/{ref_name} not found"
            raise ValueError(msg)
        items = ref.get("items") or [{"key": k, "path": k} for k in data]
        out = {}
        for item in items:
            if item["key"] not in data:
                msg = f"{kind} {self.namespace}/{ref_name} has no key {item['key']!r}"
                raise ValueError(msg)
            out[item["path"]] = (data[item["key"]], item.get("mode", mode))
        return out

    def _object_data(self, kind: str, name: str) -> dict[str, bytes] | None:
        core, what = self.kubelet.core, f"{kind} {self.namespace}/{name}"
        try:
            if kind == "configMap":
                cm = self.kubelet.through_outage(
                    what, lambda: core.read_namespaced_config_map(name, self.namespace))
                return {k: v.encode() for k, v in (cm.data or {}).items()}
            secret = self.kubelet.through_outage(
                what, lambda: core.read_namespaced_secret(name, self.namespace))
            return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _token(self, audience: str | None, seconds: int) -> str:
        """A ServiceAccount token bound to this pod, as the kubelet requests it."""
        sa = self.pod["spec"].get("serviceAccountName") or "default"
        req = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[audience] if audience else [],
                expiration_seconds=max(seconds, 600),
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1", kind="Pod", name=self.name, uid=self.uid
                ),
            )
        )
        return str(self.kubelet.through_outage(
            f"token for {self.namespace}/{sa}",
            lambda: self.kubelet.core.create_namespaced_service_account_token(
                sa, self.namespace, req),
        ).status.token)

    # --- images ------------------------------------------------------------------------
    def _pull_images(self) -> bool:
        for c in self.containers:
            image = c.spec["image"]
            if not on_loopback_registry(image):
                continue
            policy = c.spec.get("imagePullPolicy") or "IfNotPresent"
            if policy != "Always" and podman("image", "exists", image).returncode == 0:
                continue
            if policy == "Never":
                message = f'Container image "{image}" is not present with pull policy of Never'
                self._wait_image(c, "ErrImageNeverPull", message)
                self._event(c, "Warning", "ErrImageNeverPull", message)
                self.deleting.wait()
                return False
            if not self._pull(c, image):
                return False
        return True

    def _pull(self, c: ContainerState, image: str) -> bool:
        """Pull ``image`` until it is pulled (True) or the pod is deleted (False)."""
        delay = PULL_BACKOFF[0]
        while not self.deleting.is_set():
            auths = self._pull_credentials(c)
            self._event(c, "Normal", "Pulling", f'Pulling image "{image}"')
            started = time.monotonic()
            # Always a file of the pod's own: never credentials someone's `podman login` left.
            authfile = self.dir / "auth.json"
            authfile.touch(mode=0o600)
            authfile.write_text(json.dumps({"auths": auths}))
            proc = podman("pull", "--tls-verify=false", "--quiet", "--authfile", str(authfile),
                          image, timeout=PULL_SECONDS)
            if proc.returncode == 0:
                self._event(c, "Normal", "Pulled", f'Successfully pulled image "{image}" in '
                                                   f"{time.monotonic() - started:.3f}s")
                return True
            lines = proc.stderr.strip().splitlines()
            error = lines[-1].removeprefix("Error: ") if lines else f"exit {proc.returncode}"
            self._wait_image(c, "ErrImagePull", error)
            self._event(c, "Warning", "Failed", f'Failed to pull image "{image}": {error}')
            self._event(c, "Warning", "Failed", "Error: ErrImagePull")
            self._wait_image(c, "ImagePullBackOff",
                             f'Back-off pulling image "{image}": ErrImagePull: {error}')
            self._event(c, "Normal", "BackOff", f'Back-off pulling image "{image}"')
            self._event(c, "Warning", "Failed", "Error: ImagePullBackOff")
            self.deleting.wait(delay)
            delay = min(delay * 2, PULL_BACKOFF[1])
        return False

    def _pull_credentials(self, c: ContainerState) -> dict[str, Any]:
        """The registry credentials of the pod's imagePullSecrets, the first secret's first
        for a registry named twice; a Secret that cannot be read is reported and skipped,
        as a kubelet does."""
        auths: dict[str, Any] = {}
        missing = []
        for ref in self.pod["spec"].get("imagePullSecrets") or []:
            try:
                data = self._object_data("secret", ref["name"])
            except (ApiException, urllib3.exceptions.HTTPError, OSError):
                data = None
            if data is None:
                missing.append(ref["name"])
                continue
            with contextlib.suppress(KeyError, ValueError, AttributeError):  # not a docker config
                for registry, auth in json.loads(data[".dockerconfigjson"])["auths"].items():
                    auths.setdefault(registry, auth)
        if missing:
            self._event(c, "Warning", "FailedToRetrieveImagePullSecret",
                        f"Unable to retrieve some image pull secrets ({', '.join(missing)}); "
                        "attempting to pull the image may not succeed.")
        return auths

    def _wait_image(self, c: ContainerState, reason: str, message: str) -> None:
        with self.lock:
            c.waiting = {"reason": reason, "message": message}
        self.push()

    def _event(self, c: ContainerState, kind: str, reason: str, message: str) -> None:
        """Post a core/v1 Event about container ``c`` of this pod, as the kubelet's recorder
        does: best effort, a failure to post loses the event and nothing else."""
        t = now()
        event = {
            "metadata": {"name": f"{self.name}.{secrets.token_hex(8)}",
                         "namespace": self.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": self.name,
                               "namespace": self.namespace, "uid": self.uid,
                               "fieldPath": f"spec.containers{{{c.name}}}"},
            "type": kind, "reason": reason, "message": message,
            "source": {"component": "kubelet", "host": self.node},
            "reportingComponent": "kubelet", "reportingInstance": self.node,
            "firstTimestamp": t, "lastTimestamp": t, "count": 1,
        }
        with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError, OSError):
            self.kubelet.core.create_namespaced_event(self.namespace, event)

    # --- running -----------------------------------------------------------------------
    @staticmethod
    def _container_name(c: ContainerState) -> str:
        assert isinstance(c, _Container)
        return c.runtime_name

    def _argv(self, c: ContainerState, env: dict[str, str]) -> list[str]:
        """Kubernetes' rule: ``command`` replaces the entrypoint (and drops the image's cmd),
        ``args`` replace the cmd."""
        config = _image_config(c.spec["image"])
        command = [expand(a, env) for a in c.spec.get("command") or []]
        args = [expand(a, env) for a in c.spec.get("args") or []]
        if command:
            return command + args
        return list(config.get("Entrypoint") or []) + (args or list(config.get("Cmd") or []))

    def _security_args(self, c: ContainerState) -> list[str]:
        sc = _merged_security(self.pod, c.spec)
        image_user = str(_image_config(c.spec["image"]).get("User") or "0")
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
