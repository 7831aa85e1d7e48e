"""Podman as the test bed runs it (``testenv/containers.conf``: runc, cgroupfs, explicit
ulimits): one call with a time limit, whether an image is in the local store, an image's
config, and the test bed's images as ``testenv/images`` builds them."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONF = HERE / "containers.conf"
IMAGES_SCRIPT = HERE / "images"
_NEGATIVE_TTL = 2.0
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
def image_config(image: str) -> dict[str, Any]:
    proc = podman("image", "inspect", image)
    if proc.returncode != 0:
        msg = f"image {image}: {proc.stderr.strip()}"
        raise ValueError(msg)
    return dict(json.loads(proc.stdout)[0].get("Config") or {})
