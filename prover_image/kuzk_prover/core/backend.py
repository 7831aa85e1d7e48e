"""The one place that decides between CuPy and NumPy, and says which it chose; and the one
reading of the device it computes on as CUDA tells it (``Backend``: its name, its UUID as
nvidia-smi writes it, its memory). The rest of what kuzk knows of a GPU (what identifies one,
which one a container was given) is the contract's (``kuzk.contract.gpu``), which this core
does not import: the prover turns a Backend into a ``Gpu`` where it joins its lanes.

CuPy is used when it imports, ``cupy.is_available()`` and one tiny kernel launch succeeds;
otherwise NumPy. ``KUZK_BACKEND=numpy|cupy`` forces a choice, and forcing CuPy where it cannot
run is an error (BackendUnavailable), never a silent fallback: a pod that was meant to prove on
a GPU must not quietly take an hour on the CPU. Everything else takes its namespace from the
arrays it is given.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

import numpy as np

log = logging.getLogger(__name__)

CHOICES = ("auto", "numpy", "cupy")
_chosen: dict[str, Backend] = {}


class BackendUnavailable(RuntimeError):
    """CuPy was asked for but cannot run here."""


class BackendChoiceError(ValueError):
    """KUZK_BACKEND names no backend."""


@dataclass(frozen=True)
class Backend:
    """A chosen array backend and the device it computes on."""

    name: str
    xp: ModuleType
    device: str
    gpu_name: str | None = None
    gpu_uuid: str | None = None
    memory_bytes: int | None = None

    def describe(self) -> str:
        """One log line: backend, device, GPU name, UUID and memory."""
        if self.gpu_name is None:
            return f"backend={self.name} device={self.device}"
        gib = (self.memory_bytes or 0) / 2**30
        return (
            f"backend={self.name} device={self.device} gpu={self.gpu_name!r} "
            f"uuid={self.gpu_uuid} memory={gib:.1f}GiB"
        )


NUMPY = Backend(name="numpy", xp=np, device="cpu")


def _format_uuid(raw: bytes | str | None) -> str | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return raw
    text = raw.hex()
    if len(text) != 32:
        return text
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _probe_cupy() -> Backend:
    """The CuPy backend on the current device, or BackendUnavailable saying why not."""
    try:
        import cupy
    except ImportError as exc:
        msg = f"CuPy is not installed ({exc})"
        raise BackendUnavailable(msg) from exc
    try:
        if not cupy.is_available():
            msg = "CuPy finds no usable CUDA device"
            raise BackendUnavailable(msg)
        probe = cupy.arange(4, dtype=cupy.uint32) * cupy.uint32(3)
        if int(probe.sum()) != 18:
            msg = "a test kernel on the CUDA device returned a wrong result"
            raise BackendUnavailable(msg)
        device = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(device.id)
    except BackendUnavailable:
        raise
    except Exception as exc:
        msg = f"CUDA device unusable: {type(exc).__name__}: {exc}"
        raise BackendUnavailable(msg) from exc
    name = props.get("name", b"")
    return Backend(
        name="cupy",
        xp=cupy,
        device=f"cuda:{device.id}",
        gpu_name=name.decode() if isinstance(name, bytes) else str(name),
        gpu_uuid=_format_uuid(props.get("uuid")),
        memory_bytes=int(props.get("totalGlobalMem", 0)),
    )


def select_backend(env: Mapping[str, str] | None = None) -> Backend:
    """The backend for this process, chosen once per KUZK_BACKEND value and logged once."""
    env = os.environ if env is None else env
    choice = env.get("KUZK_BACKEND", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        msg = f"KUZK_BACKEND={choice!r} is not one of {', '.join(CHOICES)}"
        raise BackendChoiceError(msg)
    if choice in _chosen:
        return _chosen[choice]
    if choice == "numpy":
        backend = NUMPY
    elif choice == "cupy":
        try:
            backend = _probe_cupy()
        except BackendUnavailable as exc:
            msg = f"KUZK_BACKEND=cupy but {exc}"
            raise BackendUnavailable(msg) from exc
    else:
        try:
            backend = _probe_cupy()
        except BackendUnavailable as exc:
            log.info("CuPy not used: %s", exc)
            backend = NUMPY
    _chosen[choice] = backend
    log.info("%s", backend.describe())
    return backend


def backend_for(xp: ModuleType) -> Backend:
    """The Backend record of an explicitly given namespace."""
    if xp is np:
        return NUMPY
    for backend in _chosen.values():
        if backend.xp is xp:
            return backend
    return select_backend({"KUZK_BACKEND": "cupy"})
