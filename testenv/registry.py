"""A private image registry for the test bed: the registry:2 server (Debian's
``docker-registry``, CNCF distribution) on a free port of 127.0.0.1, plain HTTP, that answers
only to one user (htpasswd auth, bcrypt as the server requires). The process kubelet's
container mode pulls images named after it (``127.0.0.1:PORT/...``) with a pod's
imagePullSecrets, as a kubelet does (``testenv/containers.py``).
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from testenv.controlplane import free_port, stop_group, tail
from testenv.runtime import podman
from testenv.waiting import wait_for

USERNAME = "kuzk"


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        msg = f"{name} is missing: run scripts/setup"
        raise RuntimeError(msg)
    return path


class Registry:
    """One registry process with its storage, config and password file under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = f"127.0.0.1:{free_port()}"
        self.username = USERNAME
        self.password = secrets.token_urlsafe(16)
        self.log = workdir / "registry.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Registry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_config(self) -> Path:
        hashed = subprocess.run(
            [_tool("htpasswd"), "-nbB", self.username, self.password],
            capture_output=True, text=True, check=True, timeout=30).stdout
        (self.workdir / "htpasswd").write_text(hashed)
        config = {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.workdir / "storage")}},
            "http": {"addr": self.host, "secret": secrets.token_hex(16)},
            "auth": {"htpasswd": {"realm": "kuzk-testenv",
                                  "path": str(self.workdir / "htpasswd")}},
        }
        path = self.workdir / "config.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start(self, timeout: float = 30) -> None:
        config = self._write_config()
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen([_tool("docker-registry"), "serve", str(config)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

        def asks_for_credentials() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                msg = f"docker-registry exited {self.proc.returncode}:\n{tail(self.log)}"
                raise RuntimeError(msg)
            try:
                with urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2):
                    msg = f"registry {self.host} answered /v2/ without credentials"
                    raise RuntimeError(msg)
            except urllib.error.HTTPError as e:
                return e.code == 401
            except (urllib.error.URLError, OSError):
                return False

        wait_for(asks_for_credentials, timeout, f"registry {self.host} /v2/", interval=0.1)

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace=10)
            self.proc = None

    def push(self, image: str, name: str) -> str:
        """Push the local ``image`` to this registry as ``name`` (``repository:tag``),
        leaving no new name in the local store; the reference pods name it by."""
        ref = f"{self.host}/{name}"
        proc = podman("push", "--tls-verify=false", "--quiet",
                      "--creds", f"{self.username}:{self.password}", image, ref, timeout=300)
        if proc.returncode != 0:
            msg = f"podman push {image} {ref} exited {proc.returncode}: {proc.stderr.strip()}"
            raise RuntimeError(msg)
        return ref
