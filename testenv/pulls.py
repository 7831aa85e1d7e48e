"""Image pulls of a pod run as containers. Images named after a loopback registry
(``127.0.0.1:PORT/...`` or ``localhost:PORT/...``: the test bed's private registry,
``testenv/registry.py``) are pulled as a kubelet pulls them: by ``imagePullPolicy``
(``IfNotPresent`` pulls what the store lacks, ``Always`` pulls at every start, ``Never`` waits
with ``ErrImageNeverPull``), with the credentials of the pod's ``imagePullSecrets`` (Secrets
of type ``kubernetes.io/dockerconfigjson``; those of its ServiceAccount are in the pod's spec
already, the API server's admission copies them), over plain HTTP. A failed pull leaves the
container waiting with ``ErrImagePull``, then ``ImagePullBackOff``, and is tried again (1 s
doubling to 10 s; a kubelet waits 10 s doubling to 5 min); the pod's Events say what happened
(``Pulling``, ``Pulled``, ``Failed`` with the registry's answer, ``BackOff``,
``FailedToRetrieveImagePullSecret``), as a kubelet's do. No other image is ever pulled: a
test that names none of a loopback registry waits on no pull. ``ImagePulls`` is the part of
``ContainerRunner`` that pulls."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.exceptions import ApiException

from testenv.podparts import PodParts
from testenv.runtime import podman

if TYPE_CHECKING:
    from testenv.pods import ContainerState

PULL_SECONDS = 300
PULL_BACKOFF = (1.0, 10.0)  # first delay, longest delay


def on_loopback_registry(image: str) -> bool:
    """Whether ``image`` is named after a registry served on this machine's loopback
    (``127.x.y.z:PORT/...``, ``localhost:PORT/...``): the only images the kubelet pulls.
    Names of locally built images (``localhost/kuzk:...``) carry no port."""
    host, slash, _ = image.partition("/")
    name, colon, port = host.rpartition(":")
    return bool(slash and colon and port.isdigit()) and (
        name == "localhost" or name.startswith("127."))


class ImagePulls(PodParts):
    """Pulls the images of a pod's containers that name a loopback registry, with the pod's
    imagePullSecrets, and posts the Events a kubelet posts about it."""

    containers: list[ContainerState]
    lock: threading.RLock
    deleting: threading.Event

    if TYPE_CHECKING:
        def push(self) -> None: ...
        def _object_data(self, kind: str, name: str) -> dict[str, bytes] | None: ...

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
        """Post a core/v1 Event about container ``c`` of this pod (``_post_event``)."""
        self._post_event(kind, reason, message, f"spec.containers{{{c.name}}}")
