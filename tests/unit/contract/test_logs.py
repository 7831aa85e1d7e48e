"""kuzk.contract.logs: the operator, the status server and the prover write the same lines: in JSON,
time (RFC 3339 with its zone), level (one spelling), logger and message first, then the job,
partition and pod the line is about."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuzk.contract import logs
from kuzk.contract.logs import KEYS

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def captured() -> Iterator[tuple[io.StringIO, logging.Handler]]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    out = io.StringIO()
    yield out, logging.StreamHandler(out)
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_have_the_same_keys_in_the_same_order(captured) -> None:
    out, handler = captured
    handler.setFormatter(logs.JsonLines())
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)
    log = logging.getLogger("kuzk.test")
    log.warning("pod %s refused", "p-0", extra={"job": "ns/j", "partition": 3})
    log.info("plain", extra={"k8s_ref": {"kind": "ProofJob", "namespace": "ns", "name": "j"},
                             "k8s_skip": False})
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    first, second, third = _lines(out)
    assert list(first)[:4] == list(KEYS)
    assert RFC3339.match(str(first["time"]))
    assert (first["level"], first["logger"], first["message"]) == (
        "warning", "kuzk.test", "pod p-0 refused")
    assert (first["job"], first["partition"]) == ("ns/j", 3)
    assert second == {**{k: second[k] for k in KEYS}, "job": "ns/j"}  # Kopf's extras: no keys
    assert second["level"] == "info"
    assert third["level"] == "error" and "ValueError: boom" in str(third["exc_info"])


def test_the_context_names_the_work_of_every_later_line(captured) -> None:
    out, handler = captured
    handler.setFormatter(logs.JsonLines())
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)
    logs.set_context(job="ns/j", partition=2, pod="j-p2-a1")
    logging.getLogger("kuzk_prover").info("proving")
    (line,) = _lines(out)
    assert {k: line[k] for k in ("job", "partition", "pod")} == {
        "job": "ns/j", "partition": 2, "pod": "j-p2-a1"}


def test_text_lines_carry_the_same_fields(captured) -> None:
    out, handler = captured
    handler.setFormatter(logs.TextLines())
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("kuzk.x").info("hello", extra={"pod": "p"})
    time, level, rest = out.getvalue().strip().split(" ", 2)
    assert RFC3339.match(time) and level == "info" and rest == "kuzk.x: hello pod=p"


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logs.configure("xml")


def test_the_prover_logs_the_same_json(tmp_path: Path) -> None:
    flags = ["--local", "--proof-kind", "snap-update", "--partition", "1", "--circuit-log2", "6",
             "--miner", "1", "--sector", "2", "--randomness", "0x" + "ab" * 32,
             "--log-format", "json", "--backend", "numpy"]
    done = subprocess.run([sys.executable, "-m", "kuzk_prover.entrypoint", *flags],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert lines
    assert all(list(line)[:4] == list(KEYS) for line in lines)


def test_the_prover_refuses_an_unknown_format_from_its_environment() -> None:
    done = subprocess.run([sys.executable, "-m", "kuzk_prover.entrypoint", "--local"],
                          capture_output=True, text=True, timeout=60,
                          env={"KUZK_LOG_FORMAT": "xml", "PATH": ""})
    assert done.returncode == 2
    assert "KUZK_LOG_FORMAT='xml'" in done.stderr and "Traceback" not in done.stderr
