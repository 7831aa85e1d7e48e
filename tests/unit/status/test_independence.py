"""The status server runs, scales and restarts on its own: importing it loads nothing of the
operator's handlers or controller (nor Kopf), and of the operator it imports only the
vocabulary, the WorkerStatus model, the ledger and the read-only list+watch loop."""

from __future__ import annotations

import ast
import subprocess
import sys

from kuzk.status import app

PACKAGE = app.STATIC.parent

CHECK = """
import sys
import kuzk.status.app, kuzk.status.metrics, kuzk.status.watches
loaded = sorted(m for m in sys.modules
                if m in ("kuzk.handlers", "kuzk.controller", "kopf") or m.startswith("kopf."))
print(",".join(loaded))
"""


def test_status_package_loads_no_operator_code() -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          timeout=120, check=True)
    assert proc.stdout.strip() == ""


def test_status_package_imports_only_api_and_the_workerstatus_model() -> None:
    """ARCHITECTURE.md: status/* imports only ``api``, ``workerstatus`` and ``ledger`` of the
    operator, so it reads WorkerStatuses and the ledger through their one model and never
    the write protocol, and ``listwatch``, the list+watch loop it shares with the
    operator's streams, which only reads."""
    allowed = {"kuzk.api", "kuzk.workerstatus", "kuzk.ledger", "kuzk.listwatch"}
    found: dict[str, set[str]] = {}
    for source in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] if node.module != "kuzk" else [
                    f"kuzk.{alias.name}" for alias in node.names]
            for name in names:
                if name.startswith("kuzk.") and not name.startswith("kuzk.status"):
                    found.setdefault(source.name, set()).add(
                        ".".join(name.split(".")[:2]))
    assert {m for modules in found.values() for m in modules} <= allowed, found
    assert "kuzk.workerstatus" in found["objects.py"]
