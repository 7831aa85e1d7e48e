"""``PodParts``: what each part of a pod runner (its environment, volumes, image pulls) reads of
the one pod it runs. ``pods.PodRunner`` sets these; the parts only declare them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from testenv.kubelet import ProcessKubelet


class PodParts:
    kubelet: ProcessKubelet
    pod: dict[str, Any]
    uid: str
    name: str
    namespace: str
    node: str
    dir: Path
