"""contract.crds: strict, described, structural schemas, and the chart's copies kept current."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kuzk.contract import api, crds, proofjob
from kuzk.contract.api import PHASES, STATES

ROOT = Path(__file__).resolve().parents[3]
CHART_CRDS = ROOT / "charts" / "kuzk" / "crds"
EXAMPLES = ROOT / "examples"
CRDS = {crd["spec"]["names"]["kind"]: crd for crd in crds.all_crds()}


def schema_of(kind: str) -> dict[str, Any]:
    return CRDS[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def fields(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every field schema under ``schema``, with its path (object keys, [] and {})."""
    for name, child in (schema.get("properties") or {}).items():
        yield f"{path}.{name}", child
        yield from fields(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield f"{path}[]", schema["items"]
        yield from fields(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield f"{path}{{}}", schema["additionalProperties"]
        yield from fields(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", list(CRDS), ids=str)
def test_every_field_is_described(kind):
    undescribed = [
        path
        for path, field in fields(schema_of(kind))
        if path != ".metadata" and not field.get("description", "").strip()
    ]
    assert undescribed == []


@pytest.mark.parametrize("kind", list(CRDS), ids=str)
def test_schema_is_structural(kind):
    """Every field has a type (int-or-string aside); nothing is left open."""
    for path, field in fields(schema_of(kind)):
        assert field.get("type") or field.get("x-kubernetes-int-or-string"), path
        assert not field.get("x-kubernetes-preserve-unknown-fields"), path


@pytest.mark.parametrize(
    ("kind", "scope", "short", "plural"),
    [
        ("ProofJob", "Namespaced", "pj", "proofjobs"),
        ("WorkerStatus", "Cluster", "ws", "workerstatuses"),
    ],
    ids=["ProofJob", "WorkerStatus"],
)
def test_names_scope_and_subresource(kind, scope, short, plural):
    crd = CRDS[kind]
    assert crd["metadata"]["name"] == f"{plural}.kuzk.io"
    assert crd["spec"]["scope"] == scope
    assert crd["spec"]["names"]["shortNames"] == [short]
    assert crd["spec"]["names"]["categories"] == ["kuzk"]
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            "ProofJob",
            {
                "Kind": ".spec.proofKind",
                "Partitions": ".status.partitionCount",
                "Done": ".status.succeeded",
                "Phase": ".status.phase",
                "Age": ".metadata.creationTimestamp",
            },
        ),
        (
            "WorkerStatus",
            {
                "Node": ".spec.nodeName",
                "GPU": ".spec.gpu.uuid",
                "State": ".status.workers[0].state",
                "Holder": ".status.workers[0].holder.pod.name",
                "Lanes": ".status.lanes",
                "Age": ".metadata.creationTimestamp",
            },
        ),
    ],
    ids=["ProofJob", "WorkerStatus"],
)
def test_printer_columns(kind, columns):
    printed = CRDS[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    default = {c["name"]: c["jsonPath"] for c in printed if not c.get("priority")}
    assert default == columns


def test_proofjob_spec_rules():
    spec = schema_of("ProofJob")["properties"]["spec"]
    props = spec["properties"]
    assert spec["required"] == ["proofKind", "sector"]
    assert props["proofKind"]["enum"] == list(api.PROOF_KINDS)
    assert props["proofKind"]["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "proofKind is immutable"}
    ]
    bounds = {name: (props[name].get("minimum"), props[name].get("maximum")) for name in props}
    assert bounds["partitions"] == (1, 64)
    assert bounds["circuitLog2"] == (4, 27)
    assert bounds["backoffLimitPerPartition"] == (0, None)
    assert bounds["activeDeadlineSeconds"] == (1, None)
    assert bounds["ttlSecondsAfterFinished"] == (0, None)
    (randomness,) = props["randomness"]["x-kubernetes-validations"]
    assert randomness["rule"] == "self.matches('^0x[0-9a-fA-F]{64}$')"
    assert "randomness" in randomness["message"]
    rules: dict[str, list[str]] = {}
    for rule in spec["x-kubernetes-validations"]:
        rules.setdefault(rule["fieldPath"], []).append(rule["rule"])
    assert rules[".partitions"] == [
        "!has(self.filecoin) || !has(self.partitions)",
        "!has(oldSelf.partitions)"
        " || (has(self.partitions) && self.partitions == oldSelf.partitions)",
    ]
    assert rules[".filecoin"] == [
        "!has(self.filecoin)"
        " || self.proofKind in ['window-post', 'winning-post', 'porep-c2', 'snap-update']",
        "!has(self.filecoin) || self.proofKind in ['window-post', 'winning-post']"
        " || (!has(self.randomness) && size(self.filecoin.sectors) == 1)",
    ]
    assert rules[".randomness"][0] == (
        "!has(self.filecoin) || !(self.proofKind in ['window-post', 'winning-post'])"
        " || has(self.randomness)")
    porep = next(r for r in rules[".filecoin.sectors"] if "'porep-c2'" in r)
    assert "has(s.commD) && has(s.ticket) && has(s.seed) && has(s.c1Output)" in porep
    assert "!has(s.replica)" in porep
    assert len(rules[".filecoin.sectors"]) == 4
    assert set(rules) == {".partitions", ".circuitLog2", ".randomness", ".filecoin",
                          ".filecoin.sectors"}


def test_status_enums_follow_the_code():
    status = schema_of("ProofJob")["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == list(PHASES)
    assert status["partitions"]["items"]["properties"]["state"]["enum"] == list(STATES)
    workers = schema_of("WorkerStatus")["properties"]["status"]["properties"]["workers"]
    worker = workers["items"]["properties"]
    assert worker["state"]["enum"] == ["idle", "waiting", "gpu"]
    lane = worker["lanes"]["items"]["properties"]
    assert lane["stage"]["enum"] == ["starting", "synthesizing", "synth_done", "gpu", "committing"]
    assert set(lane) >= {"pod", "job", "partition", "attempt", "priority", "since", "notLiveSince",
                         "readyAt"}
    assert set(worker) >= {"id", "gpu", "lanes", "holder", "completed", "since"}


@pytest.mark.parametrize("crd", crds.all_crds(), ids=lambda crd: crd["metadata"]["name"])
def test_chart_copy_is_current(crd):
    path = CHART_CRDS / crds.file_name(crd)
    assert path.is_file(), (
        f"{path} is missing: run `python -m kuzk.contract.crds --write {CHART_CRDS}`")
    assert path.read_text() == crds.render(crd), (
        f"{path} is out of date: run `python -m kuzk.contract.crds --write charts/kuzk/crds`"
    )


def test_module_prints_a_yaml_stream(capsys):
    assert crds.main([]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert documents == crds.all_crds()


def test_module_writes_the_files(tmp_path):
    written = crds.main(["--write", str(tmp_path)])
    assert written == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "clusterkopfpeerings.kopf.dev.yaml",
        "kopfpeerings.kopf.dev.yaml",
        "proofjobs.kuzk.io.yaml",
        "workerstatuses.kuzk.io.yaml",
    ]


def conforms(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """A small validator for what the examples use: types, required, enums, bounds."""
    problems: list[str] = []
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            return [f"{path}: not an object"]
        props = schema.get("properties")
        problems += [
            f"{path}.{key}: required" for key in schema.get("required", []) if key not in value
        ]
        for key, item in value.items():
            child = (props or {}).get(key, schema.get("additionalProperties"))
            if child is None:
                problems.append(f"{path}.{key}: unknown field")
            elif isinstance(child, dict):
                problems += conforms(item, child, f"{path}.{key}")
    elif kind == "array":
        problems += [
            p
            for i, item in enumerate(value)
            for p in conforms(item, schema["items"], f"{path}[{i}]")
        ]
    elif kind == "integer":
        if not isinstance(value, int) or not schema.get("minimum", value) <= value <= schema.get(
            "maximum", value
        ):
            problems.append(f"{path}: {value!r} out of range")
    elif kind == "string" and (
        not isinstance(value, str) or value not in schema.get("enum", [value])
    ):
        problems.append(f"{path}: {value!r} is not allowed")
    elif kind == "boolean" and not isinstance(value, bool):
        problems.append(f"{path}: not a boolean")
    return problems


EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
REAL_EXAMPLE_FILES = sorted(EXAMPLES.glob("filecoin/*.yaml"))


def test_one_example_per_kind():
    kinds = sorted(yaml.safe_load(path.read_text())["spec"]["proofKind"] for path in EXAMPLE_FILES)
    assert kinds == sorted(api.PROOF_KINDS)


def test_one_real_example_per_kind():
    assert sorted(path.stem for path in REAL_EXAMPLE_FILES) == sorted(api.PROOF_KINDS)


@pytest.mark.parametrize("path", EXAMPLE_FILES + REAL_EXAMPLE_FILES,
                         ids=lambda path: str(path.relative_to(EXAMPLES)))
def test_examples_are_valid(path):
    job = yaml.safe_load(path.read_text())
    assert (job["apiVersion"], job["kind"]) == ("kuzk.io/v1alpha1", "ProofJob")
    spec_schema = schema_of("ProofJob")["properties"]["spec"]
    assert conforms(job["spec"], spec_schema, ".spec") == []
    job["metadata"]["uid"] = "uid"
    assert proofjob.resolve(job).proof_kind == path.stem


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"partitions": 0}, ".spec.partitions: 0 out of range"),
        ({"proofKind": "nope"}, ".spec.proofKind: 'nope' is not allowed"),
        ({"suspend": "yes"}, ".spec.suspend: not a boolean"),
        ({"surprise": 1}, ".spec.surprise: unknown field"),
        ({"sector": {"miner": 1}}, ".spec.sector.number: required"),
    ],
    ids=["range", "enum", "type", "unknown", "required"],
)
def test_the_example_check_catches_mistakes(change, problem):
    spec = {**yaml.safe_load(EXAMPLE_FILES[0].read_text())["spec"], **change}
    spec_schema = schema_of("ProofJob")["properties"]["spec"]
    assert problem in conforms(spec, spec_schema, ".spec")
