"""Whole jobs through the in-memory cluster: convergence, idempotence and operator restarts.

The handler layer writes the status first and then applies the actions; an operator killed
part-way leaves the status written and only a prefix of the actions applied. Whatever the
interleaving, a job must converge with exactly one pod per partition attempt and exact counts.
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter

import pytest

from kuzk.contract import api, proofjob
from kuzk.operator.controller import without_nulls
from kuzk.operator.decide.actions import CreatePod, Event
from kuzk.operator.decide.reconcile import reconcile
from tests.unit.operator.decide.objects import (
    SETTINGS,
    Cluster,
    Make,
    commitment_for,
)

STAGES = ("synthesizing", "synth_done", "gpu")


def live(cluster: Cluster) -> list[dict]:
    return [
        pod
        for pod in sorted(cluster.pods.values(), key=lambda p: p["metadata"]["name"])
        if pod["status"]["phase"] in ("Pending", "Running")
        and pod["spec"].get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
    ]


def test_a_16_partition_job_runs_on_4_gpus_and_settles():
    cluster = Cluster(Make.job("snap-update"))
    most_at_once = 0
    for _ in range(100):
        cluster.reconcile()
        cluster.schedule()
        running = live(cluster)
        most_at_once = max(most_at_once, len(running))
        for pod in running:
            name = pod["metadata"]["name"]
            if pod["status"]["phase"] == "Pending":
                cluster.start(name)
            else:
                cluster.finish(name)
        cluster.tick()
        if cluster.job.get("status", {}).get("phase") == "Succeeded":
            break
    status = cluster.job["status"]
    assert status["phase"] == "Succeeded"
    assert (status["succeeded"], status["completedPartitions"], status["retries"]) == (
        16,
        "0-15",
        0,
    )
    assert status["proof"]["commitment"] == proofjob.proof_commitment(
        [commitment_for(i) for i in range(16)]
    )
    assert most_at_once == 4
    assert sorted(cluster.created) == sorted(f"job-p{i}-a1" for i in range(16))
    reasons = Counter(event.reason for event in cluster.events)
    # Four waves of four partitions, each wave ending in one sync: one PartitionDone a wave.
    assert reasons == {"PartitionDone": 4, "JobComplete": 1}
    settled = cluster.reconcile()
    assert settled.actions == []
    assert not any(pod["metadata"]["finalizers"] for pod in cluster.pods.values())


def test_reconcile_is_pure():
    cluster = Cluster(Make.job(partitions=3))
    cluster.reconcile()
    cluster.schedule()
    cluster.start("job-p0-a1", "gpu")
    cluster.finish("job-p1-a1", exit_code=1, message="flaky")
    job, pods, workers = cluster.inputs()
    before = copy.deepcopy((job, pods, workers))
    first = reconcile(job, pods, workers, cluster.now, settings=SETTINGS)
    assert (job, pods, workers) == before, "reconcile changed its inputs"
    assert reconcile(job, pods, workers, cluster.now, settings=SETTINGS) == first


def test_repeating_a_reconcile_after_applying_it_decides_nothing_new():
    cluster = Cluster(Make.job(partitions=4))
    for step in range(12):
        first = cluster.reconcile()
        second = cluster.reconcile()
        assert second.of_type(CreatePod) == []
        assert second.of_type(Event) == []
        assert second.status == first.status or step == 0
        cluster.schedule()
        for pod in live(cluster):
            name = pod["metadata"]["name"]
            if pod["status"]["phase"] == "Pending":
                cluster.start(name)
            elif step % 3 == 0:
                cluster.finish(name, exit_code=1, message="flaky")
            else:
                cluster.finish(name)
        cluster.tick()
    assert cluster.job["status"]["phase"] == "Succeeded"


def kubelet_step(cluster: Cluster, rng: random.Random, failures: Counter[int]) -> None:
    """Randomly advance every pod: start, move through stages, succeed, fail or be preempted.

    ``failures`` counts the failures the operator must count: those of current attempts.
    """
    cluster.terminate_deleting()
    cluster.schedule()
    for pod in live(cluster):
        name = pod["metadata"]["name"]
        uid = pod["metadata"]["uid"]
        partition = int(pod["metadata"]["labels"][api.LABEL_PARTITION])
        roll = rng.random()
        if pod["status"]["phase"] == "Pending":
            if roll < 0.7:
                cluster.start(name)
        elif uid in cluster.claims and cluster.claims[uid][2] != "gpu":
            if roll < 0.5:
                cluster.stage(name, STAGES[STAGES.index(cluster.claims[uid][2]) + 1])
        elif roll < 0.08:
            # A superseded attempt (its deletion was lost in a crash) fails unnoticed.
            if (
                int(pod["metadata"]["labels"][api.LABEL_ATTEMPT])
                == cluster.partition(partition)["attempt"]
            ):
                failures[partition] += 1
            cluster.finish(name, exit_code=rng.choice([1, 137]), message="flaky")
        elif roll < 0.16:
            cluster.preempt(name)
        elif roll < 0.6:
            cluster.finish(name)


def operator_step(cluster: Cluster, rng: random.Random) -> None:
    """One reconcile; the operator may die after the status write, mid-way through actions."""
    decision = cluster.decide()
    for create in decision.of_type(CreatePod):
        assert create.name not in cluster.pods, f"duplicate create of {create.name}"
    roll = rng.random()
    if roll < 0.1:
        return  # the status write lost a conflict: nothing happened
    if roll < 0.35:
        cut = rng.randrange(len(decision.actions) + 1)
        cluster.job["status"] = without_nulls(decision.status)
        for action in decision.actions[:cut]:
            cluster.apply_action(action)
        return
    cluster.apply(decision)


@pytest.mark.parametrize("seed", range(12), ids=lambda seed: f"seed-{seed}")
def test_converges_through_failures_preemptions_suspends_and_operator_crashes(seed):
    rng = random.Random(seed)
    cluster = Cluster(Make.job("snap-update", backoffLimitPerPartition=20))
    failures: Counter[int] = Counter()
    for _ in range(3000):
        operator_step(cluster, rng)
        if cluster.job.get("status", {}).get("phase") == "Succeeded" and not live(cluster):
            break
        kubelet_step(cluster, rng, failures)
        cluster.tick(rng.choice([0, 1, 2]))
        if rng.random() < 0.04:
            cluster.job["spec"]["suspend"] = not cluster.job["spec"].get("suspend", False)
    cluster.job["spec"]["suspend"] = False
    for _ in range(3):
        cluster.reconcile()
    status = cluster.job["status"]
    assert status["phase"] == "Succeeded", status
    assert status["proof"]["commitment"] == proofjob.proof_commitment(
        [commitment_for(i) for i in range(16)]
    )
    for entry in status["partitions"]:
        index, attempt = entry["index"], entry["attempt"]
        assert entry["retries"] == failures[index]
        assert attempt == 1 + entry["retries"] + entry["disruptions"]
        mine = [name for name in cluster.created if name.startswith(f"job-p{index}-")]
        assert sorted(mine) == sorted(f"job-p{index}-a{a}" for a in range(1, attempt + 1))
    assert len(cluster.created) == len(set(cluster.created))
    assert status["retries"] == sum(e["retries"] + e["disruptions"] for e in status["partitions"])
    assert cluster.reconcile().actions == []
    assert not any(pod["metadata"]["finalizers"] for pod in cluster.pods.values())
    assert cluster.claims == {}


def test_a_real_jobs_proof_is_its_partitions_proofs_in_partition_order():
    sectors = [{"number": n, "commR": "0x" + "11" * 32, "replica": f"s{n}/sealed",
                "cache": f"s{n}/cache"} for n in (4, 3, 2, 1)]
    cluster = Cluster(Make.job("window-post", randomness="0x" + "22" * 32, filecoin={
        "sectorSize": "2KiB", "volume": {"claimName": "sealed"}, "sectors": sectors}))
    proofs = {i: f"0x{i + 10:02x}" + "ab" * 191 for i in range(2)}
    for _ in range(20):
        cluster.reconcile()
        cluster.schedule()
        for pod in live(cluster):
            name = pod["metadata"]["name"]
            if pod["status"]["phase"] == "Pending":
                cluster.start(name)
            else:
                index = int(pod["metadata"]["labels"][api.LABEL_PARTITION])
                cluster.finish(name, message=json.dumps(
                    {"commitment": commitment_for(index), "proof": proofs[index]}))
        cluster.tick()
        if cluster.job.get("status", {}).get("phase") == "Succeeded":
            break
    status = cluster.job["status"]
    assert (status["phase"], status["partitionCount"]) == ("Succeeded", 2)
    assert [p["proof"] for p in status["partitions"]] == [proofs[0], proofs[1]]
    assert status["proof"]["bytes"] == "0x" + proofs[0][2:] + proofs[1][2:]


def test_a_result_whose_proof_is_not_hex_fails_the_attempt():
    cluster = Cluster(Make.job("winning-post"))
    cluster.reconcile()
    cluster.schedule()
    (pod,) = live(cluster)
    cluster.start(pod["metadata"]["name"])
    cluster.reconcile()
    cluster.finish(pod["metadata"]["name"], message=json.dumps(
        {"commitment": commitment_for(0), "proof": "not hex"}))
    cluster.reconcile()
    (part,) = cluster.job["status"]["partitions"]
    assert part["attempt"] == 2
    assert "proof is not hex" in part["message"]
