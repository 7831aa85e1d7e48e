"""The partition pod's contract has one home, ``kuzk.contract.pod``: the operator and the
prover import its env names, its termination-message path and its exit codes, and write none
of them as literals. A literal would let one side change the contract without the other."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from kuzk.contract import pod
from kuzk.contract.proofjob import resolve
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from tests.unit.operator.decide.objects import Make

ROOT = Path(__file__).resolve().parents[1].parent
KUZK = ROOT / "operator" / "kuzk"
PROVER = ROOT / "prover_image" / "kuzk_prover"
POD = KUZK / "contract" / "pod.py"
SOURCES = [p for p in [*sorted(KUZK.rglob("*.py")), *sorted(PROVER.rglob("*.py"))] if p != POD]
EXIT_CODES = {pod.OK_EXIT_CODE, pod.FAILED_EXIT_CODE, pod.INVALID_INPUT_EXIT_CODE,
              pod.NOT_STARTED_EXIT_CODE, pod.TERMINATED_EXIT_CODE}
# The modules whose functions' int results are a process's exit code: the pod's commands
# (the prover's console scripts) and the lane agent that ``kuzk-lane run`` is.
COMMANDS = {
    PROVER / f"{target.split(':')[0].removeprefix('kuzk_prover.')}.py"
    for target in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "scripts"].values() if target.startswith("kuzk_prover.")
} | {PROVER / "lane_agent.py"}
# Names that hold an exit code: a Popen's returncode, a container's exitCode.
EXIT_NAME = re.compile(r"(?i)exit_?code|returncode")
EXITS = ("sys.exit", "os._exit", "SystemExit", "exit", "quit")
# The same name meaning something else: the operator's own pod's name, which the chart's
# Deployment sets for the operator (the reporting instance of its Events), not the partition
# pod's.
ELSEWHERE = {(KUZK / "operator" / "startup.py", pod.POD_NAME_ENV)}
# An exit code written into a sentence: "exited 2", "exit code 2".
EXIT_TEXT = re.compile(r"(?i)\bexit(?:s|ed)?(?: with)?(?: code)? (\d+)\b")


def ids(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def is_code(node: ast.AST | None) -> bool:
    """Whether ``node`` is an int literal equal to one of the contract's exit codes, or a
    tuple, list or set of literals holding one."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(is_code(e) for e in node.elts)
    return (isinstance(node, ast.Constant) and type(node.value) is int
            and node.value in EXIT_CODES)


def holds_exit_code(node: ast.AST) -> bool:
    """Whether ``node`` reads an exit code: a name or attribute called like one, or
    ``x["exitCode"]`` and ``x.get("exitCode")``."""
    if isinstance(node, ast.Name):
        return bool(EXIT_NAME.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(EXIT_NAME.search(node.attr))
    key = None
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        key = node.args[0] if node.func.attr == "get" else None
    return isinstance(key, ast.Constant) and isinstance(key.value, str) and bool(
        EXIT_NAME.search(key.value))


def docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string statements (docstrings, a constant's docstring): prose, which
    may state the contract's codes."""
    return {id(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}


def int_functions(tree: ast.AST) -> Iterator[ast.FunctionDef]:
    """The functions that return an int, or a tuple starting with one."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.returns is not None:
            returns = ast.unparse(node.returns)
            if returns == "int" or returns.startswith("tuple[int"):
                yield node


def literals(path: Path) -> list[str]:
    """Where ``path`` writes the pod contract as a literal, as 'file:line: what'."""
    tree = ast.parse(path.read_text(), str(path))
    prose = docstrings(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in pod.ENV_NAMES and (path, node.value) not in ELSEWHERE:
                found.append((node.lineno, f"env name {node.value!r}: use kuzk.contract.pod"))
            elif pod.TERMINATION_MESSAGE_PATH in node.value:
                found.append((node.lineno, "the termination-message path: use"
                                           " pod.TERMINATION_MESSAGE_PATH"))
            else:
                said = [m for m in EXIT_TEXT.findall(node.value) if int(m) in EXIT_CODES]
                if said and id(node) not in prose:
                    found.append((node.lineno, f"exit code {said[0]} in a text: format the"
                                               " constant into it"))
        elif isinstance(node, ast.Call):
            if ast.unparse(node.func) in EXITS and node.args and is_code(node.args[0]):
                found.append((node.lineno, f"{ast.unparse(node)}: exit with a pod constant"))
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops) \
                    and any(holds_exit_code(o) for o in operands) \
                    and any(is_code(o) for o in operands):
                found.append((node.lineno, f"{ast.unparse(node)}: compare with a pod constant"))
        elif isinstance(node, ast.Assign):
            named = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if any("EXIT" in n.upper() for n in named) and is_code(node.value):
                found.append((node.lineno, f"{ast.unparse(node)}: import the pod constant"))
    if path in COMMANDS:
        for function in int_functions(tree):
            for node in ast.walk(function):
                if isinstance(node, ast.Return) and node.value is not None and (
                        is_code(node.value) if not isinstance(node.value, ast.Tuple)
                        else is_code(node.value.elts[0])):
                    found.append((node.lineno, f"{function.name} returns"
                                               f" {ast.unparse(node.value)}: an exit code"))
    return [f"{ids(path)}:{line}: {what}" for line, what in sorted(found)]


@pytest.mark.parametrize("path", SOURCES, ids=ids)
def test_the_contract_is_written_only_in_contract_pod(path: Path) -> None:
    found = literals(path)
    assert not found, "\n".join(found)


def test_the_scan_finds_a_literal_put_back(tmp_path: Path) -> None:
    """The checks above catch each way of writing the contract out (so that they can fail)."""
    source = tmp_path / "bad.py"
    source.write_text(
        "import sys\n"
        "NAME = 'KUZK_INPUT'\n"
        "PATH = '/dev/termination-log'\n"
        "EXIT_OK, EXIT_INVALID = 0, 2\n"
        "def f(terminated: dict, child) -> None:\n"
        "    if terminated.get('exitCode') == 2 or child.returncode in (1, 143):\n"
        "        raise SystemExit(2)\n"
        "    text = 'failed with exit code 2'\n"
        "    sys.exit(127)\n"
        "    '''A docstring may say: exit 2.'''\n")
    found = literals(source)
    assert [f.split(":")[1] for f in found] == ["2", "3", "4", "6", "6", "7", "8", "9"], found


def test_a_command_returning_a_code_is_caught() -> None:
    tree = ast.parse("def main() -> int:\n    return 2\n")
    assert [f.name for f in int_functions(tree)] == ["main"]
    commands = {p.stem for p in COMMANDS}
    assert commands >= {"entrypoint", "lane", "alive", "lane_agent"}, commands


def test_the_pod_env_is_exactly_the_contract() -> None:
    """The env ``pods.pod_manifest`` gives the prover's container is ``pod.ENV_NAMES``: a new
    variable is added to the contract, or the pod does not get it."""
    manifest = pod_manifest(resolve(Make.job()), 0, 1, PodSettings(image="kuzk/prover:1"))
    container = manifest["spec"]["containers"][0]
    names = [item["name"] for item in container["env"]]
    assert sorted(names) == sorted(set(pod.ENV_NAMES) - set(pod.REAL_PROOF_ENV_NAMES))
    real = Make.job()
    real["spec"] |= {"proofKind": "winning-post", "randomness": "0x" + "11" * 32, "filecoin": {
        "sectorSize": "2KiB", "volume": {"claimName": "sealed"}, "sectors": [
            {"number": 1, "commR": "0x" + "22" * 32, "replica": "r", "cache": "c"}]}}
    manifest = pod_manifest(resolve(real), 0, 1, PodSettings(image="kuzk/prover:1"))
    names = [item["name"] for item in manifest["spec"]["containers"][0]["env"]]
    assert sorted(names) == sorted(pod.ENV_NAMES)
    assert len(set(pod.ENV_NAMES)) == len(pod.ENV_NAMES)
    assert container["terminationMessagePath"] == pod.TERMINATION_MESSAGE_PATH


def test_contract_pod_imports_only_the_standard_library() -> None:
    """``kuzk-alive``, the pod's probe, imports it and must start quickly."""
    tree = ast.parse(POD.read_text())
    modules = {alias.name for n in ast.walk(tree) if isinstance(n, ast.Import)
               for alias in n.names}
    modules |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    foreign = sorted(m for m in modules if m.split(".")[0] not in sys.stdlib_module_names)
    assert not foreign, foreign
