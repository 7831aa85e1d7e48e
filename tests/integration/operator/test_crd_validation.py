"""The API server itself rejects bad ProofJobs, with a message that names the field, and
``kubectl explain`` teaches the schema."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from testenv.cluster import Cluster
from tests.integration.operator.conftest import proofjob

pytestmark = pytest.mark.usefixtures("kuzk_installed")


def _apply(cluster: Cluster, ns: str, job: dict[str, Any]) -> tuple[int, str]:
    proc = cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job), check=False)
    return proc.returncode, proc.stderr


def _without_kind() -> dict[str, Any]:
    job = proofjob("nokind")
    del job["spec"]["proofKind"]
    return job


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        pytest.param(_without_kind(), ["spec.proofKind", "Required value"], id="missing-kind"),
        pytest.param(proofjob("badkind", "stark-proof"), ["spec.proofKind", "Unsupported value"],
                     id="unknown-kind"),
        pytest.param(proofjob("p0", partitions=0),
                     ["spec.partitions", "greater than or equal to 1"], id="partitions-0"),
        pytest.param(proofjob("p65", partitions=65),
                     ["spec.partitions", "less than or equal to 64"], id="partitions-65"),
        pytest.param(proofjob("c3", circuitLog2=3),
                     ["spec.circuitLog2", "greater than or equal to 4"], id="circuit-3"),
        pytest.param(proofjob("c28", circuitLog2=28),
                     ["spec.circuitLog2", "less than or equal to 27"], id="circuit-28"),
        pytest.param(proofjob("rnd", randomness="0x" + "zz" * 32), ["spec.randomness"],
                     id="randomness-not-hex"),
        pytest.param(proofjob("rnd2", randomness="0x1234"), ["spec.randomness"],
                     id="randomness-short"),
        pytest.param(proofjob("neg", backoffLimitPerPartition=-1),
                     ["spec.backoffLimitPerPartition", "greater than or equal to 0"],
                     id="negative-backoff"),
    ],
)
def test_bad_manifest_is_rejected(cluster: Cluster, namespace: str, job: dict[str, Any],
                                  expected: list[str]) -> None:
    code, err = _apply(cluster, namespace, job)
    assert code != 0
    assert "is invalid" in err
    for text in expected:
        assert text in err


def test_proof_kind_is_immutable(cluster: Cluster, namespace: str) -> None:
    code, err = _apply(cluster, namespace, proofjob("imm", partitions=2))
    assert code == 0, err
    code, err = _apply(cluster, namespace, proofjob("imm", "porep-c2", partitions=2))
    assert code != 0
    assert "spec.proofKind" in err and "immutable" in err


def test_partitions_are_immutable(cluster: Cluster, namespace: str) -> None:
    code, err = _apply(cluster, namespace, proofjob("immp", partitions=2))
    assert code == 0, err
    code, err = _apply(cluster, namespace, proofjob("immp", partitions=3))
    assert code != 0
    assert "partitions" in err and "immutable" in err


def test_kubectl_explain_prints_descriptions(cluster: Cluster) -> None:
    out = cluster.kubectl("explain", "proofjob.spec").stdout
    for field in ("proofKind", "partitions", "sector", "randomness", "circuitLog2",
                  "backoffLimitPerPartition", "activeDeadlineSeconds", "suspend", "prover"):
        assert field in out
    assert "winning-post" in out
    ws = cluster.kubectl("explain", "workerstatus.status.workers").stdout
    assert "lanes" in ws and "holder" in ws
    lanes = cluster.kubectl("explain", "workerstatus.status.workers.lanes").stdout
    assert "notLiveSince" in lanes and "stage" in lanes and "readyAt" in lanes
    assert "heartbeat" not in lanes
