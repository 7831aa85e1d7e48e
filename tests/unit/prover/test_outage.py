"""How a lane write rides out an unreachable API server (``kuzk_prover.outage.persist``): which
failures it tries again, and which it raises at once."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from kuzk_prover.outage import persist


def test_a_first_403_is_a_refusal_not_an_outage() -> None:
    tries: list[int] = []

    def forbidden() -> bool:
        tries.append(1)
        raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(ApiException, match="Forbidden"):
        persist("claim", forbidden, node="gpu-node-1", budget=5.0)
    assert len(tries) == 1


def test_a_403_after_a_refused_connection_is_tried_again() -> None:
    """An API server back from a restart refuses until its RBAC caches sync."""
    answers: list[BaseException] = [
        ConnectionRefusedError(111, "Connection refused"),
        ApiException(status=403, reason="Forbidden"),
    ]

    def write() -> bool:
        if answers:
            raise answers.pop(0)
        return True

    assert persist("claim", write, node="gpu-node-1", budget=5.0) is True
    assert answers == []
