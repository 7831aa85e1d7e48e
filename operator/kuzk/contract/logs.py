"""One log format for the operator, the status server and the prover (``--log-format``).

``json`` writes one object per line with the same keys from every program, in this order:
``time`` (RFC 3339, UTC, milliseconds), ``level`` (lower case: debug, info, warning, error,
critical), ``logger``, ``message``, then what is known of the work it is about: ``job``
(namespace/name), ``partition`` and ``pod`` (the prover sets them for its whole run, Kopf's
object loggers name their object), and ``exc_info`` for a traceback. ``text`` writes the same
fields as one line for a terminal. The formatter is python-json-logger's.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

from kuzk.contract import api

FORMATS = ("text", "json")
KEYS = ("time", "level", "logger", "message")  # every JSON line's first keys, in order
CONTEXT = ("job", "partition", "pod")
# Attributes of Kopf's object loggers: what it posts as Events and how it names the object.
KOPF_EXTRAS = ("k8s_skip", "k8s_ref", "settings")


def _time(record: logging.LogRecord) -> str:
    return api.format_time(datetime.fromtimestamp(record.created, UTC), millis=True)


def _context(record: logging.LogRecord) -> dict[str, Any]:
    """job, partition and pod, from the record's extras or Kopf's reference to its object."""
    found = {key: getattr(record, key) for key in CONTEXT
             if getattr(record, key, None) is not None}
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, Mapping) and ref.get("name"):
        named = f"{ref.get('namespace')}/{ref['name']}" if ref.get("namespace") else ref["name"]
        key = {"ProofJob": "job", "Pod": "pod"}.get(str(ref.get("kind")), "object")
        found.setdefault(key, named)
    return found


class JsonLines(JsonFormatter):
    def __init__(self) -> None:
        super().__init__("%(message)s", reserved_attrs=[
            *RESERVED_ATTRS, "taskName", *CONTEXT, *KOPF_EXTRAS])

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord,
                   message_dict: dict[str, Any]) -> None:
        log_data["time"] = _time(record)
        log_data["level"] = record.levelname.lower()
        log_data["logger"] = record.name
        super().add_fields(log_data, record, message_dict)
        log_data.update(_context(record))


class TextLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        context = "".join(f" {k}={v}" for k, v in _context(record).items())
        line = (f"{_time(record)} {record.levelname.lower()} {record.name}:"
                f" {record.getMessage()}{context}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure(log_format: str, level: int = logging.INFO) -> None:
    """Send every record at ``level`` or above to stderr in ``log_format`` (text or json),
    replacing what was there (Kopf's own handler included)."""
    if log_format not in FORMATS:
        msg = f"unknown log format {log_format!r}; expected one of {FORMATS}"
        raise ValueError(msg)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else TextLines())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.captureWarnings(True)  # Python's warnings too, as records, not bare stderr lines


def set_context(**fields: Any) -> None:
    """Name the work every later record of this process is about (the prover's job,
    partition and pod)."""
    known = {k: v for k, v in fields.items() if k in CONTEXT and v is not None}

    def add(record: logging.LogRecord) -> bool:
        for key, value in known.items():
            if getattr(record, key, None) is None:
                setattr(record, key, value)
        return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(add)
