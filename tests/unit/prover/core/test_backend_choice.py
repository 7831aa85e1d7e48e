"""The backend is chosen in one place: NumPy when forced or when CuPy cannot run, CuPy only
when it can, and an unknown or impossible forced choice is an error, never a fallback."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from kuzk_prover.core import backend
from kuzk_prover.core.backend import BackendChoiceError, BackendUnavailable, select_backend


def test_numpy_when_forced() -> None:
    chosen = select_backend({"KUZK_BACKEND": "numpy"})
    assert (chosen.name, chosen.xp, chosen.device) == ("numpy", np, "cpu")
    assert chosen.describe() == "backend=numpy device=cpu"


def test_unknown_choice_is_an_error_naming_it() -> None:
    with pytest.raises(BackendChoiceError, match="KUZK_BACKEND='opencl'"):
        select_backend({"KUZK_BACKEND": "opencl"})


def test_auto_is_cupy_exactly_when_cupy_runs() -> None:
    try:
        cupy_backend = select_backend({"KUZK_BACKEND": "cupy"})
    except BackendUnavailable:
        assert select_backend({}).name == "numpy"
    else:
        assert select_backend({}) == cupy_backend


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_forcing_cupy_without_cupy_says_why() -> None:
    with pytest.raises(BackendUnavailable, match="KUZK_BACKEND=cupy but CuPy is not installed"):
        select_backend({"KUZK_BACKEND": "cupy"})


def test_gpu_description_names_gpu_uuid_and_memory() -> None:
    described = backend.Backend(
        name="cupy",
        xp=np,
        device="cuda:0",
        gpu_name="NVIDIA H100",
        gpu_uuid=backend._format_uuid(bytes(range(16))),
        memory_bytes=80 * 2**30,
    ).describe()
    assert "gpu='NVIDIA H100'" in described
    assert "uuid=GPU-00010203-0405-0607-0809-0a0b0c0d0e0f" in described
    assert "memory=80.0GiB" in described


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            bytes.fromhex("0b6f8d5e7f0c4a559d1e1c0ffee00001"),
            "GPU-0b6f8d5e-7f0c-4a55-9d1e-1c0ffee00001",
        ),
        ("GPU-already-text", "GPU-already-text"),
        (None, None),
    ],
    ids=["raw-bytes", "text", "none"],
)
def test_gpu_uuid_is_written_as_nvidia_smi_does(
    raw: bytes | str | None, expected: str | None
) -> None:
    assert backend._format_uuid(raw) == expected
