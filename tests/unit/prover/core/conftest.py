"""Fixtures for the proving core's unit tests: ``xp``, the array namespace a test runs on (NumPy
always; CuPy too, skipped with the reason where no usable CUDA device exists), and ``rng``, a
freshly seeded generator whose seed is printed on failure so a case can be replayed."""

from __future__ import annotations

import secrets
from types import ModuleType

import numpy as np
import pytest

from kuzk_prover.core.backend import BackendUnavailable, select_backend


def _cupy_or_skip() -> ModuleType:
    try:
        return select_backend({"KUZK_BACKEND": "cupy"}).xp
    except BackendUnavailable as exc:
        pytest.skip(f"no CuPy backend here: {exc}")


@pytest.fixture(params=["numpy", "cupy"])
def xp(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "cupy":
        return _cupy_or_skip()
    return np


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    seed = secrets.randbits(64)
    request.node.user_properties.append(("rng_seed", seed))
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)
