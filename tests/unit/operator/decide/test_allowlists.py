"""What a ProofJob author may choose is allowlisted by the operator too: a job naming a prover
image or a PriorityClass off the lists fails at once with reason Rejected and a message that
names the field and the allowed values, and no pod is created; the allowed values, and the
defaults the operator fills in, pass."""

from __future__ import annotations

import copy

import pytest

from kuzk.operator.decide.actions import CreatePod
from kuzk.operator.decide.pods import PodSettings
from kuzk.operator.decide.reconcile import reconcile
from tests.unit.operator.decide.objects import T0, Make

STRICT = PodSettings(image="kuzk/prover:1",
                     allowed_images=("kuzk/prover:1", "registry.example/kuzk/*"),
                     allowed_priority_classes=("kuzk-normal", "kuzk-high"))


def decide(prover: dict, settings: PodSettings = STRICT):
    return reconcile(copy.deepcopy(Make.job(partitions=2, prover=prover)), [], [], T0,
                     settings=settings)


@pytest.mark.parametrize(("prover", "field", "allowed"), [
    ({"image": "evil/miner:latest"}, "spec.prover.image 'evil/miner:latest'",
     "allowed images: kuzk/prover:1, registry.example/kuzk/* (an entry ending in * is a prefix)"),
    ({"image": "registry.example/kuzkx:1"}, "spec.prover.image 'registry.example/kuzkx:1'",
     "allowed images:"),
    ({"priorityClassName": "system-node-critical"},
     "spec.prover.priorityClassName 'system-node-critical'",
     "allowed classes: kuzk-normal, kuzk-high"),
], ids=["image", "image-outside-the-prefix", "priority-class"])
def test_a_choice_off_the_lists_is_rejected_with_no_pod(prover, field, allowed):
    decision = decide(prover)
    status = decision.status
    assert status["phase"] == "Failed"
    assert decision.of_type(CreatePod) == []
    conditions = {c["type"]: c for c in status["conditions"]}
    rejected, failed = conditions["Rejected"], conditions["Failed"]
    assert (rejected["status"], rejected["reason"]) == ("True", "Rejected")
    assert f"{field} is not allowed" in rejected["message"] and allowed in rejected["message"]
    assert (failed["status"], failed["reason"]) == ("True", "Rejected")
    assert failed["message"] == rejected["message"]


@pytest.mark.parametrize("prover", [
    {}, {"image": "kuzk/prover:1"}, {"image": "registry.example/kuzk/prover:2"},
    {"priorityClassName": "kuzk-high"},
], ids=["defaults", "exact-image", "prefixed-image", "listed-class"])
def test_allowed_choices_and_defaults_run(prover):
    decision = decide(prover)
    assert decision.status["phase"] == "Pending"
    assert len(decision.of_type(CreatePod)) == 2
    conditions = {c["type"]: c for c in decision.status["conditions"]}
    assert (conditions["Rejected"]["status"], conditions["Rejected"]["reason"]) == \
        ("False", "Allowed")


def test_without_lists_anything_goes():
    decision = decide({"image": "any/image:1", "priorityClassName": "any"},
                      PodSettings(image="kuzk/prover:1"))
    assert decision.status["phase"] == "Pending"
