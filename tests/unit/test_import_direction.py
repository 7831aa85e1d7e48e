"""ARCHITECTURE.md's direction of imports, checked on the source: the status server imports of
the operator's package only ``api``, ``workerstatus`` and ``ledger`` (pure models) and
``listwatch`` (the read-only list+watch loop it shares with the operator's streams); the pure
decision knows neither Kopf nor the Kubernetes client; the prover imports the operator's
package in ``reporter``, ``entrypoint`` and ``lane_agent``, ``inputs`` its vocabulary
(``kuzk.api``, the one table of proof kinds) and its proving core nothing of it. And the
operator's package reads the time only through ``kuzk.clock``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = ROOT / "operator" / "kuzk"
PROVER = ROOT / "prover_image" / "kuzk_prover"
PURE = ("api", "actions", "workerstatus", "ledger", "observe", "pods", "partitions", "conditions",
        "reconcile", "ranges")


def imported(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def of_operator(names: set[str]) -> set[str]:
    return {n for n in names if n == "kuzk" or n.startswith("kuzk.")}


@pytest.mark.parametrize("path", sorted((OPERATOR / "status").glob("*.py")), ids=lambda p: p.name)
def test_the_status_server_imports_only_its_models_and_the_list_watch_loop(path: Path) -> None:
    allowed = ("kuzk.api", "kuzk.workerstatus", "kuzk.ledger", "kuzk.listwatch", "kuzk.status")
    wrong = {n for n in of_operator(imported(path)) - {"kuzk"}
             if not n.startswith(allowed)}
    assert not wrong, f"{path.name} imports {sorted(wrong)}"


@pytest.mark.parametrize("module", PURE)
def test_the_decision_knows_neither_kopf_nor_the_client(module: str) -> None:
    names = imported(OPERATOR / f"{module}.py")
    assert not {n for n in names if n.split(".")[0] in ("kopf", "kubernetes")}


@pytest.mark.parametrize("path", sorted(PROVER.glob("*.py")), ids=lambda p: p.name)
def test_only_the_provers_reporter_entrypoint_and_lane_agent_import_the_operators_package(
        path: Path) -> None:
    names = of_operator(imported(path))
    if path.stem in ("reporter", "entrypoint", "lane_agent"):
        allowed = ("kuzk.api", "kuzk.workers", "kuzk.workerstatus", "kuzk.kubeconfig",
                   "kuzk.logs")
        # The lane agent checks a prover's result by the operator's own reading of it.
        allowed += ("kuzk.observe",) if path.stem == "lane_agent" else ()
        assert all(n.startswith(allowed) for n in names - {"kuzk"}), sorted(names)
    elif path.stem == "inputs":
        assert names <= {"kuzk", "kuzk.api"}, sorted(names)
    else:
        assert not names, f"{path.name} imports {sorted(names)}"


# Reading the time or waiting on it: what ``kuzk.clock.Clock`` is for. The status server keeps
# its own injected clock (``status.view``); the operator's metrics time the work they measure.
READS_TIME = re.compile(
    r"\b(datetime\.now|datetime\.utcnow|time\.time|time\.monotonic|time\.sleep"
    r"|asyncio\.sleep|(?<!clock)\.call_later|(?<!clock)\.call_at|loop\.time)\(")


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(OPERATOR.glob("*.py")) if p.stem not in ("clock", "operator_metrics")],
    ids=lambda p: p.name)
def test_only_the_clock_reads_the_time(path: Path) -> None:
    found = sorted({m.group(1) for m in READS_TIME.finditer(path.read_text())})
    assert not found, f"{path.name} reads the time itself ({found}); take a kuzk.clock.Clock"
