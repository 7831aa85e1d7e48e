"""A lane's rank for the GPU phase (``kuzk.contract.workerstatus.lanes.lane_priority``) follows
its job's resolved PriorityClass, and the PriorityClasses the chart creates order the classes (and
so the proof kinds' defaults) the same way: the class values come from the chart as ``helm
template`` renders it, or, without helm, from its values.yaml through the template's table of class
names."""

from __future__ import annotations

import itertools
import re

import pytest
import yaml

from kuzk.contract import api
from kuzk.contract.workerstatus.lanes import PRIORITY_CLASSES, lane_priority
from testenv import binaries
from tests.unit.test_chart import CHART, render

TEMPLATE = "templates/priorityclasses.yaml"


def _rendered() -> dict[str, int] | None:
    """Each PriorityClass's value as helm renders the chart; None without helm."""
    try:
        docs = render(extra=("--show-only", TEMPLATE))
    except binaries.MissingBinaryError:
        return None
    return {d["metadata"]["name"]: int(d["value"]) for d in docs}


def _from_values() -> dict[str, int]:
    """Each PriorityClass's value as values.yaml sets it, named as the template names it."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["priorityClasses"]
    table = re.findall(r'"(kuzk-[a-z]+)" \$pc\.(\w+)', (CHART / TEMPLATE).read_text())
    assert table, f"no class table in {TEMPLATE}"
    return {name: int(values[key]) for name, key in table}


@pytest.fixture(scope="module")
def class_values() -> dict[str, int]:
    return _rendered() or _from_values()


def test_the_rule_ranks_every_class_the_chart_creates(class_values: dict[str, int]) -> None:
    assert set(PRIORITY_CLASSES) == set(class_values)
    assert {d.priority_class_name for d in api.PROOF_KINDS.values()} <= set(PRIORITY_CLASSES)


def test_the_ranks_ascend_with_the_chart_values(class_values: dict[str, int]) -> None:
    values = [class_values[name] for name in PRIORITY_CLASSES]
    assert values == sorted(values) and len(set(values)) == len(values), class_values


def test_lanes_order_the_proof_kinds_as_their_priority_classes_do(
        class_values: dict[str, int]) -> None:
    """A job that names no class of its own resolves to its kind's default (``proofjob.resolve``);
    a pod without the env (an earlier release) ranks the same."""
    def value(kind: str) -> int:
        return class_values[api.PROOF_KINDS[kind].priority_class_name]

    def rank(kind: str) -> int:
        default = lane_priority(kind, api.PROOF_KINDS[kind].priority_class_name)
        assert lane_priority(kind, "") == default, kind
        return default

    for a, b in itertools.permutations(api.PROOF_KINDS, 2):
        assert (rank(a) > rank(b)) == (value(a) > value(b)), (a, b)
        assert (rank(a) == rank(b)) == (value(a) == value(b)), (a, b)


def test_a_jobs_own_class_ranks_its_lanes_whatever_its_kind(
        class_values: dict[str, int]) -> None:
    """Lanes of any two kinds, each job naming any class kuzk knows: they rank as the chart's
    values of their classes, so a snap-update an administrator marks kuzk-critical goes
    before a winning-post left at kuzk-high, and a winning-post marked kuzk-normal waits
    behind a window-post."""
    lanes = list(itertools.product(api.PROOF_KINDS, PRIORITY_CLASSES))
    for (kind_a, class_a), (kind_b, class_b) in itertools.permutations(lanes, 2):
        a, b = lane_priority(kind_a, class_a), lane_priority(kind_b, class_b)
        assert (a > b) == (class_values[class_a] > class_values[class_b]), (class_a, class_b)
        assert (a == b) == (class_a == class_b), (class_a, class_b)
    assert lane_priority("snap-update", "kuzk-critical") > lane_priority(
        "winning-post", "kuzk-high")
    assert lane_priority("winning-post", "kuzk-normal") < lane_priority("window-post", "")


@pytest.mark.parametrize("foreign", ["system-node-critical", "team-urgent", "KUZK-CRITICAL"])
def test_a_class_kuzk_does_not_know_ranks_as_the_kinds_default(foreign: str) -> None:
    for kind, defaults in api.PROOF_KINDS.items():
        assert lane_priority(kind, foreign) == lane_priority(
            kind, defaults.priority_class_name), (kind, foreign)


def test_the_values_yaml_and_the_rendered_chart_agree() -> None:
    rendered = _rendered()
    if rendered is None:
        pytest.skip("helm is not built here")
    assert rendered == _from_values()


def test_a_kind_kuzk_does_not_know_waits_last_unless_its_job_names_a_class() -> None:
    assert lane_priority("no-such-kind", "") == 0 == min(
        lane_priority(kind, "") for kind in api.PROOF_KINDS)
    assert lane_priority("no-such-kind", "kuzk-critical") == len(PRIORITY_CLASSES) - 1
