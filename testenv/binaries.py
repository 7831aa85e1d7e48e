"""Where the control-plane binaries come from.

Each binary is looked up in this order: an explicit ``KUZK_BIN_<NAME>`` variable (for example
``KUZK_BIN_KUBE_APISERVER``), the envtest-style directory ``KUBEBUILDER_ASSETS``, then the
per-version cache that ``testenv/build`` fills. A missing binary is an error that says
how to get it, never a silent skip.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build"
NAMES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "helm",
    "prometheus",
    "promtool",
)


class MissingBinaryError(RuntimeError):
    """A control-plane binary is neither configured nor built."""


def cache_bin_dir() -> Path:
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print"], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip())


def find(name: str) -> Path:
    """The path of one binary, from the environment, KUBEBUILDER_ASSETS or the cache."""
    if name not in NAMES:
        msg = f"unknown control-plane binary {name!r}; expected one of {', '.join(NAMES)}"
        raise ValueError(msg)
    var = "KUZK_BIN_" + name.upper().replace("-", "_")
    candidates: list[Path] = []
    if os.environ.get(var):
        candidates.append(Path(os.environ[var]))
    if os.environ.get("KUBEBUILDER_ASSETS"):
        candidates.append(Path(os.environ["KUBEBUILDER_ASSETS"]) / name)
    candidates.append(cache_bin_dir() / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    tried = ", ".join(str(p) for p in candidates)
    msg = (
        f"{name} not found (tried {tried}). Build it with `bash {BUILD_SCRIPT}`, or point "
        f"{var} or KUBEBUILDER_ASSETS at a prebuilt binary."
    )
    raise MissingBinaryError(msg)

