"""Which images the process kubelet pulls: only those named after a registry on this
machine's loopback (the test bed's private registry); every other name is never pulled."""

from __future__ import annotations

import pytest

from testenv.pulls import on_loopback_registry


@pytest.mark.parametrize(("image", "pulled"), [
    ("127.0.0.1:5000/kuzk/prover:abc", True),
    ("127.0.0.1:41234/prover", True),
    ("localhost:5000/kuzk-prover@sha256:" + "0" * 64, True),
    ("localhost/kuzk-prover:abc", False),  # podman's name for an image built here
    ("127.0.0.1/kuzk-prover:abc", False),
    ("kuzk-standin:test", False),
    ("python:3.11", False),
    ("ghcr.io/kuzk/prover:latest", False),
    ("registry.internal:5000/kuzk/prover:abc", False),
])
def test_only_loopback_registries_are_pulled_from(image: str, pulled: bool) -> None:
    assert on_loopback_registry(image) is pulled
