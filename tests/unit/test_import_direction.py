"""ARCHITECTURE.md's layering, checked on the source. Three programs share one contract:

- ``kuzk.contract`` (what the operator, the prover and the status server share) imports only
  itself;
- ``kuzk.operator`` imports the contract and itself, never the status server;
- ``kuzk.status`` imports the contract and itself, never the operator, and of the contract
  never the write protocol: it reads and writes nothing;
- the prover imports only the contract, and its proving core (``kuzk_prover/core/``) nothing
  of kuzk at all.

The rules read folders, not lists: the pure decision (``kuzk/operator/decide/``) imports only
the contract and itself, and it and every contract module but the few that speak through the
client know neither Kopf nor the Kubernetes client; nothing reads the time but
``kuzk.contract.clock``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KUZK = ROOT / "operator" / "kuzk"
CONTRACT = KUZK / "contract"
OPERATOR = KUZK / "operator"
DECIDE = OPERATOR / "decide"
STATUS = KUZK / "status"
PROVER = ROOT / "prover_image" / "kuzk_prover"
CORE = PROVER / "core"
# The contract's modules that speak to the API server through the client; every other one is
# a model or a rule, as pure as the decision.
CONTRACT_CLIENT = [CONTRACT / "kubeconfig.py", CONTRACT / "listwatch.py", CONTRACT / "rawjson.py",
                   CONTRACT / "retry.py", CONTRACT / "workerstatus" / "writes.py"]
# The WorkerStatus write protocol: the status server only reads.
WRITES = ("kuzk.contract.workerstatus.decisions", "kuzk.contract.workerstatus.writes")


def sources(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module of kuzk ``path`` imports, at any depth of its code, as dotted names
    (``from kuzk.contract import api`` gives ``kuzk.contract`` and ``kuzk.contract.api``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def of_kuzk(names: set[str]) -> set[str]:
    return {n for n in names if n.startswith("kuzk.")}


def outside(names: set[str], *allowed: str) -> list[str]:
    return sorted(n for n in of_kuzk(names)
                  if not any(n == a or n.startswith(a + ".") for a in allowed))


def ids(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", sources(CONTRACT), ids=ids)
def test_the_contract_imports_only_the_contract(path: Path) -> None:
    names = imported(path)
    assert not outside(names, "kuzk.contract"), outside(names, "kuzk.contract")
    assert not {n for n in names if n.split(".")[0] == "kopf"}


@pytest.mark.parametrize("path", sources(OPERATOR), ids=ids)
def test_the_operator_imports_the_contract_and_itself(path: Path) -> None:
    wrong = outside(imported(path), "kuzk.contract", "kuzk.operator")
    assert not wrong, f"{path.name} imports {wrong}"


@pytest.mark.parametrize("path", sources(STATUS), ids=ids)
def test_the_status_server_imports_the_contract_and_itself_and_never_writes(path: Path) -> None:
    names = imported(path)
    wrong = outside(names, "kuzk.contract", "kuzk.status")
    wrong += sorted(n for n in of_kuzk(names) if n in WRITES or n.startswith(
        tuple(w + "." for w in WRITES)))
    assert not wrong, f"{path.name} imports {wrong}"


@pytest.mark.parametrize("path", sources(DECIDE), ids=ids)
def test_the_decision_imports_the_contract_and_itself(path: Path) -> None:
    wrong = outside(imported(path), "kuzk.contract", "kuzk.operator.decide")
    assert not wrong, f"{path.name} imports {wrong}"


@pytest.mark.parametrize("path", [p for p in sources(PROVER) if CORE not in p.parents], ids=ids)
def test_the_prover_imports_only_the_contract(path: Path) -> None:
    names = of_kuzk(imported(path))
    assert not outside(names, "kuzk.contract"), outside(names, "kuzk.contract")


@pytest.mark.parametrize("path", sources(CORE), ids=ids)
def test_the_proving_core_imports_nothing_of_kuzk(path: Path) -> None:
    names = of_kuzk(imported(path))
    assert not names, f"{path.name}, of the proving core, imports {sorted(names)}"


PURE = sources(DECIDE) + [p for p in sources(CONTRACT) if p not in CONTRACT_CLIENT]


@pytest.mark.parametrize("path", PURE, ids=ids)
def test_the_decision_knows_neither_kopf_nor_the_client(path: Path) -> None:
    names = imported(path)
    assert not {n for n in names if n.split(".")[0] in ("kopf", "kubernetes")}


# Reading the time or waiting on it: what ``kuzk.contract.clock.Clock`` is for. The status
# server keeps its own injected clock (``status.view``); the operator's metrics time the work
# they measure.
READS_TIME = re.compile(
    r"\b(datetime\.now|datetime\.utcnow|time\.time|time\.monotonic|time\.sleep"
    r"|asyncio\.sleep|(?<!clock)\.call_later|(?<!clock)\.call_at|loop\.time)\(")
CLOCKED = [p for p in [*sources(CONTRACT), *sources(OPERATOR), KUZK / "cli.py"]
           if p not in (CONTRACT / "clock.py", OPERATOR / "metrics.py")]


@pytest.mark.parametrize("path", CLOCKED, ids=ids)
def test_only_the_clock_reads_the_time(path: Path) -> None:
    found = sorted({m.group(1) for m in READS_TIME.finditer(path.read_text())})
    assert not found, f"{path.name} reads the time itself ({found}); take a contract.clock.Clock"
