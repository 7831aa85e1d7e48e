"""contract.api: the defaults table, spec resolution, pod and label names, proof commitments."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kuzk.contract import api, pod, proofjob
from tests.unit.operator.decide.objects import Make

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("kind", "partitions", "log2", "priority", "deadline"),
    [
        ("winning-post", 1, 22, "kuzk-critical", 25),
        ("window-post", 1, 27, "kuzk-high", 1800),
        ("snap-update", 16, 23, "kuzk-normal", None),
        ("porep-c2", 10, 24, "kuzk-normal", None),
    ],
    ids=lambda value: str(value),
)
def test_resolve_applies_the_kind_defaults(kind, partitions, log2, priority, deadline):
    spec = proofjob.resolve(Make.job(kind))
    assert (spec.partitions, spec.circuit_log2) == (partitions, log2)
    assert (spec.priority_class_name, spec.active_deadline_seconds) == (priority, deadline)
    assert spec.backoff_limit_per_partition == proofjob.DEFAULT_BACKOFF_LIMIT_PER_PARTITION
    assert spec.suspend is False
    assert spec.ttl_seconds_after_finished is None


def test_resolve_prefers_the_spec():
    randomness = "0x" + "ab" * 32
    job = Make.job(
        "snap-update",
        partitions=4,
        circuitLog2=10,
        randomness=randomness,
        backoffLimitPerPartition=0,
        activeDeadlineSeconds=60,
        ttlSecondsAfterFinished=5,
        suspend=True,
        prover={"priorityClassName": "mine", "image": "img:2", "nodeSelector": {"a": "b"}},
    )
    spec = proofjob.resolve(job)
    assert (spec.partitions, spec.circuit_log2, spec.randomness) == (4, 10, randomness)
    assert spec.backoff_limit_per_partition == 0
    assert (spec.active_deadline_seconds, spec.ttl_seconds_after_finished) == (60, 5)
    assert spec.suspend is True
    assert (spec.priority_class_name, spec.image, spec.node_selector) == (
        "mine",
        "img:2",
        {"a": "b"},
    )


def test_resolve_keeps_what_the_status_recorded():
    job = Make.job("snap-update", partitions=8, circuitLog2=12)
    recorded = "0x" + "cd" * 32
    job["status"] = {
        "partitionCount": 5,
        "resolved": {"circuitLog2": 9, "randomness": recorded},
    }
    spec = proofjob.resolve(job)
    assert (spec.partitions, spec.circuit_log2, spec.randomness) == (5, 9, recorded)


def test_default_randomness_is_derived_from_the_sector():
    first = proofjob.resolve(Make.job()).randomness
    assert first == proofjob.resolve(Make.job()).randomness
    assert re.fullmatch(pod.RANDOMNESS_PATTERN, first)
    other = Make.job()
    other["spec"]["sector"]["number"] += 1
    assert proofjob.resolve(other).randomness != first


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"proofKind": "nope"}, "spec.proofKind"),
        ({"partitions": 0}, "spec.partitions"),
        ({"partitions": 65}, "spec.partitions"),
        ({"circuitLog2": 3}, "spec.circuitLog2"),
        ({"circuitLog2": 28}, "spec.circuitLog2"),
        ({"randomness": "0x12"}, "spec.randomness"),
        ({"sector": {"miner": 1}}, "spec.sector"),
    ],
    ids=[
        "unknown-kind",
        "partitions-0",
        "partitions-65",
        "log2-3",
        "log2-28",
        "randomness",
        "sector",
    ],
)
def test_resolve_rejects_what_the_schema_rejects(spec, field):
    job = Make.job()
    job["spec"].update(spec)
    with pytest.raises(ValueError, match=re.escape(field)):
        proofjob.resolve(job)


@pytest.mark.parametrize(
    ("job", "partition", "attempt", "expected"),
    [
        ("snap", 0, 1, "snap-p0-a1"),
        ("snap", 63, 12, "snap-p63-a12"),
        ("a" * 55, 1, 1, "a" * 55 + "-p1-a1"),
    ],
    ids=["short", "two-digit", "exactly-63"],
)
def test_pod_name_is_plain_when_it_fits(job, partition, attempt, expected):
    assert api.pod_name(job, partition, attempt) == expected


@pytest.mark.parametrize(
    "job",
    ["a" * 58, "x" * 253, "with.dots.in.it", "a" * 60 + ".b", "-" * 70 + "z"],
    ids=["one-over", "longest", "dots", "long-and-dots", "dashes"],
)
def test_pod_name_is_hashed_when_it_does_not(job):
    names = {api.pod_name(job, p, a) for p in range(64) for a in (1, 9, 10, 123)}
    assert len(names) == 64 * 4
    for name in names:
        assert len(name) <= api.DNS_LABEL_MAX
        assert DNS_LABEL.match(name), name
    name = api.pod_name(job, 3, 2)
    assert name.endswith("-p3-a2")
    assert hashlib.sha256(job.encode()).hexdigest()[:8] in name
    assert name == api.pod_name(job, 3, 2)


def test_similar_long_names_do_not_collide():
    base = "j" * 70
    assert api.pod_name(base + "1", 0, 1) != api.pod_name(base + "2", 0, 1)
    assert api.pod_name("a.b", 0, 1) != api.pod_name("a-b", 0, 1)


@pytest.mark.parametrize(
    ("job", "hashed"), [("short", False), ("a" * 63, False), ("a" * 64, True)], ids=str
)
def test_job_label_value_fits_a_label(job, hashed):
    value = api.job_label_value(job)
    assert len(value) <= api.DNS_LABEL_MAX
    assert (value != job) is hashed
    assert api.LABEL_JOB == "kuzk.io/job"


def test_proof_commitment_hashes_the_ordered_bytes():
    parts = ["00" * 32, "0x" + "ff" * 32]
    expected = hashlib.sha256(bytes(32) + b"\xff" * 32).hexdigest()
    assert proofjob.proof_commitment(parts) == expected
    assert proofjob.proof_commitment(parts[::-1]) != expected


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (datetime(2030, 1, 2, 3, 4, 5, 999, tzinfo=UTC), "2030-01-02T03:04:05Z"),
        (datetime(2030, 1, 2, 3, 4, 5), "2030-01-02T03:04:05Z"),
        (
            datetime(2030, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2))),
            "2030-01-02T03:04:05Z",
        ),
    ],
    ids=["utc", "naive", "offset"],
)
def test_times_are_rfc3339_utc(moment, text):
    assert api.format_time(moment) == text
    assert api.parse_time(text) == moment.replace(microsecond=0, tzinfo=moment.tzinfo or UTC)


@pytest.mark.parametrize(("text", "label", "subdomain"), [
    ("kuzk-system", True, True),
    ("a" * 63, True, True),
    ("a" * 64, False, True),
    ("kuzk.contract.ledger", False, True),
    ("kuzk-system\n", False, False),
    ("-kuzk", False, False),
    ("Kuzk", False, False),
    ("a" * 254, False, False),
])
def test_dns_names_are_checked_by_one_rule(text: str, label: bool, subdomain: bool) -> None:
    assert (api.is_dns_label(text), api.is_dns_subdomain(text)) == (label, subdomain)


@pytest.mark.parametrize(("body", "expected"), [
    ('{"kind": "Status", "message": "quota exceeded", "details": {"kind": "namespaces"}}',
     {"kind": "Status", "message": "quota exceeded", "details": {"kind": "namespaces"}}),
    (b'{"message": "m"}', {"message": "m"}),
    ("<html>502 Bad Gateway</html>", {}),
    ("[1, 2]", {}),
    ("", {}),
    (None, {}),
])
def test_an_error_answers_status_is_read_from_its_body_or_is_empty(
        body: str | bytes | None, expected: dict[str, object]) -> None:
    assert api.error_status(body) == expected
