"""Provides ``images``: kuzk's images built by tests/testenv/images (once per session, cached
by their inputs across sessions), so that pods naming them run as real containers."""

from __future__ import annotations

import pytest

from tests.testenv.containers import Images, build_images


@pytest.fixture(scope="session")
def images() -> Images:
    return build_images()
