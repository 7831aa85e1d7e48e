"""kuzk.operator.decide.pods.pod_manifest: the partition pod contract."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kuzk.contract import proofjob
from kuzk.contract.proofjob import resolve
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from tests.unit.operator.decide.objects import Make

SETTINGS = PodSettings(image="kuzk/prover:1")


def env_of(pod):
    return {item["name"]: item for item in pod["spec"]["containers"][0]["env"]}


def test_identity_labels_and_owner():
    pod = pod_manifest(resolve(Make.job("porep-c2", name="pj-1")), 3, 2, SETTINGS)
    meta = pod["metadata"]
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert (meta["name"], meta["namespace"]) == ("pj-1-p3-a2", "ns")
    assert meta["labels"] == {
        "app.kubernetes.io/name": "kuzk-prover",
        "app.kubernetes.io/managed-by": "kuzk",
        "kuzk.io/job": "pj-1",
        "kuzk.io/partition": "3",
        "kuzk.io/attempt": "2",
        "kuzk.io/proof-kind": "porep-c2",
    }
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "kuzk.io/v1alpha1",
            "kind": "ProofJob",
            "name": "pj-1",
            "uid": "job-uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert meta["finalizers"] == ["kuzk.io/release-worker"]


def test_container_contract():
    pod = pod_manifest(resolve(Make.job()), 0, 1, SETTINGS)
    spec = pod["spec"]
    container = spec["containers"][0]
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "kuzk-prover"
    assert spec["priorityClassName"] == "kuzk-normal"
    assert container["image"] == SETTINGS.image
    assert container["command"] == ["kuzk-prover"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert "nodeSelector" not in spec
    assert "tolerations" not in spec


def test_env_and_downward_api():
    job = Make.job("snap-update", name="snap", circuitLog2=12, partitions=4)
    env = env_of(pod_manifest(resolve(job), 2, 3, SETTINGS))
    plain = {name: item.get("value") for name, item in env.items() if "value" in item}
    assert plain == {
        "KUZK_JOB": "snap",
        "KUZK_JOB_UID": "job-uid-1",
        "KUZK_PARTITION": "2",
        "KUZK_ATTEMPT": "3",
        "KUZK_PROOF_KIND": "snap-update",
        "KUZK_PRIORITY_CLASS": "kuzk-normal",
        "KUZK_INPUT": plain["KUZK_INPUT"],
        "CUPY_CACHE_DIR": "/var/cache/kuzk/cupy",
        "KUZK_LOG_FORMAT": "text",
    }
    json_logs = replace(SETTINGS, log_format="json")
    assert env_of(pod_manifest(resolve(job), 2, 3, json_logs))["KUZK_LOG_FORMAT"] == {
        "name": "KUZK_LOG_FORMAT", "value": "json"}
    assert json.loads(plain["KUZK_INPUT"]) == {
        "sector": {"miner": 1000, "number": 7},
        "randomness": proofjob.resolve(job).randomness,
        "circuitLog2": 12,
        "partitions": 4,
    }
    fields = {
        name: item["valueFrom"]["fieldRef"]["fieldPath"]
        for name, item in env.items()
        if "valueFrom" in item
    }
    assert fields == {
        "POD_NAME": "metadata.name",
        "POD_UID": "metadata.uid",
        "POD_NAMESPACE": "metadata.namespace",
        "NODE_NAME": "spec.nodeName",
        "POD_IP": "status.podIP",
    }


@pytest.mark.parametrize(
    ("kind", "priority"),
    [("winning-post", "kuzk-critical"), ("window-post", "kuzk-high"), ("porep-c2", "kuzk-normal")],
    ids=["winning-post", "window-post", "porep-c2"],
)
def test_priority_class_by_kind(kind, priority):
    """The pod's class, and the same name in its env, where its prover reads its lane's rank
    for the GPU phase from."""
    pod = pod_manifest(resolve(Make.job(kind)), 0, 1, SETTINGS)
    assert pod["spec"]["priorityClassName"] == priority
    assert env_of(pod)["KUZK_PRIORITY_CLASS"] == {"name": "KUZK_PRIORITY_CLASS",
                                                   "value": priority}


def test_prover_overrides():
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    job = Make.job(
        prover={
            "image": "other:2",
            "priorityClassName": "batch-low",
            "resources": {"limits": {"memory": "8Gi"}, "requests": {"cpu": "2"}},
            "nodeSelector": {"gpu": "h100"},
            "tolerations": [toleration],
        }
    )
    settings = PodSettings(
        image="ignored",
        command=["python", "-m", "stand_in"],
        gpu_resource="amd.com/gpu",
        service_account_name="sa",
    )
    pod = pod_manifest(resolve(job), 0, 1, settings)
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert container["image"] == "other:2"
    assert container["command"] == ["python", "-m", "stand_in"]
    assert container["resources"] == {
        "limits": {"amd.com/gpu": "1", "memory": "8Gi"},
        "requests": {"cpu": "2"},
    }
    assert spec["priorityClassName"] == "batch-low"
    assert env_of(pod)["KUZK_PRIORITY_CLASS"]["value"] == "batch-low"
    assert spec["serviceAccountName"] == "sa"
    assert spec["nodeSelector"] == {"gpu": "h100"}
    assert spec["tolerations"] == [toleration]


def test_long_job_names_stay_valid():
    pod = pod_manifest(resolve(Make.job(name="n" * 100)), 15, 4, SETTINGS)
    assert len(pod["metadata"]["name"]) <= 63
    assert len(pod["metadata"]["labels"]["kuzk.io/job"]) <= 63
    assert pod["metadata"]["ownerReferences"][0]["name"] == "n" * 100


@pytest.mark.parametrize(
    ("partition", "attempt", "match"),
    [(-1, 1, "partition -1"), (16, 1, "partition 16"), (0, 0, "attempt")],
    ids=["negative", "past-the-end", "attempt-0"],
)
def test_rejects_impossible_partitions(partition, attempt, match):
    with pytest.raises(ValueError, match=match):
        pod_manifest(resolve(Make.job()), partition, attempt, SETTINGS)


def test_pull_secrets_only_when_set():
    assert "imagePullSecrets" not in pod_manifest(resolve(Make.job()), 0, 1, SETTINGS)["spec"]
    settings = replace(SETTINGS, image_pull_secrets=("regcred", "mirror"))
    pod = pod_manifest(resolve(Make.job()), 0, 1, settings)
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
