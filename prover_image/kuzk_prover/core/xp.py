"""The array namespace of some arrays: NumPy or CuPy.

Kernels take the namespace from their inputs (``xp=None``) instead of from a global switch, so
the same function runs on host and device arrays. CuPy is imported only when a CuPy array is
seen, which keeps this package importable where CuPy is not installed.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, cast

import numpy as np


def is_cupy(xp: ModuleType) -> bool:
    """Whether ``xp`` is the CuPy module."""
    return xp.__name__ == "cupy"


def array_namespace(*arrays: Any) -> ModuleType:
    """NumPy, or CuPy when any of ``arrays`` is a CuPy array."""
    for array in arrays:
        if type(array).__module__.split(".")[0] == "cupy":
            import cupy

            return cast(ModuleType, cupy)
    return np


def to_host(array: Any) -> np.ndarray:
    """A NumPy copy of ``array`` (a no-op view for NumPy arrays): the one host transfer."""
    if isinstance(array, np.ndarray):
        return array
    return cast(np.ndarray, array.get())
