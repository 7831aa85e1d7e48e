"""Provides ``images``: kuzk's images built by testenv/images (once per session, cached
by their inputs across sessions), so that pods naming them run as real containers;
``run_operator``, ``plan`` and ``prover_account`` come from the operator tests, for the tests
whose partition pods run as containers."""

from __future__ import annotations

import pytest

from testenv.runtime import Images, build_images
from tests.integration.operator.conftest import plan, prover_account, run_operator

__all__ = ["plan", "prover_account", "run_operator"]


@pytest.fixture(scope="session")
def images() -> Images:
    return build_images()
