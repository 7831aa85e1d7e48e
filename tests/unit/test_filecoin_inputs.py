"""A real proof's inputs (``spec.filecoin``): the chain's partitions, what each partition pod is
given, and the reasons a bad spec is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kuzk.contract import api, filecoin, pod, proofjob
from kuzk.operator.decide.partitions import NO_PROOF
from kuzk.operator.decide.pods import PodSettings, pod_manifest
from kuzk.operator.decide.reconcile import reconcile
from tests.unit.operator.decide.objects import T0, Make


def sectors(*numbers: int) -> list[dict[str, Any]]:
    return [{"number": n, "commR": "0x" + f"{n:02x}" * 32, "replica": f"s-t01000-{n}/sealed",
             "cache": f"s-t01000-{n}/cache"} for n in numbers]


HEX = {name: "0x" + f"{i + 10:02x}" * 32
       for i, name in enumerate(("commD", "ticket", "seed", "commROld"))}
C2_SECTOR = {"number": 7, "commR": "0x" + "07" * 32, "commD": HEX["commD"],
             "ticket": HEX["ticket"], "seed": HEX["seed"], "c1Output": "s-t01000-7/c1.json"}
UPDATE_SECTOR = {"number": 7, "commROld": HEX["commROld"], "commR": "0x" + "07" * 32,
                 "commD": HEX["commD"], "replica": "s-t01000-7/update/sealed",
                 "cache": "s-t01000-7/update/cache", "sectorKey": "s-t01000-7/sealed",
                 "sectorKeyCache": "s-t01000-7/cache"}


def job(kind: str = "window-post", **real: Any) -> dict[str, Any]:
    one = {"porep-c2": [C2_SECTOR], "snap-update": [UPDATE_SECTOR]}
    spec: dict[str, Any] = {
        "proofKind": kind,
        "sector": {"miner": 1000, "number": 1},
        "filecoin": {"sectorSize": "2KiB", "volume": {"claimName": "sealed"},
                     "sectors": one.get(kind, sectors(8, 3, 1, 5, 2, 7, 4, 6)), **real},
    }
    if kind in filecoin.RANDOMNESS_KINDS:
        spec["randomness"] = "0x" + "ab" * 32
    return {"metadata": {"name": "wpost", "namespace": "sp", "uid": "u-1"}, "spec": spec}


def test_a_window_post_has_the_chains_partitions_over_sorted_sectors() -> None:
    spec = proofjob.resolve(job())
    assert spec.filecoin is not None
    assert spec.partitions == 4
    assert [s.number for s in spec.filecoin.partition_sectors("window-post", 2)] == [5, 6]
    odd = proofjob.resolve(job(sectors=sectors(9, 1, 4)))
    assert odd.partitions == 2
    assert odd.filecoin is not None
    assert [s.number for s in odd.filecoin.partition_sectors("window-post", 1)] == [9]


def test_a_winning_post_is_one_partition_over_the_whole_set() -> None:
    spec = proofjob.resolve(job("winning-post"))
    assert spec.partitions == 1
    assert spec.filecoin is not None
    assert len(spec.filecoin.partition_sectors("winning-post", 0)) == 8


def test_a_real_partition_pod_runs_the_real_prover_on_its_sectors_read_only() -> None:
    settings = PodSettings(image="prover:1", filecoin_command=("kuzk-lane", "run", "--", "p"),
                           filecoin_parameters_host_path="/srv/params")
    manifest = pod_manifest(proofjob.resolve(job()), 1, 1, settings)
    container = manifest["spec"]["containers"][0]
    assert container["command"] == ["kuzk-lane", "run", "--", "p"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[pod.PARAMETER_CACHE_ENV] == filecoin.PARAMETERS_MOUNT
    real = json.loads(env[pod.INPUT_ENV])[pod.FILECOIN_INPUT_KEY]
    assert real == {
        "sectorSize": 2048, "proverId": 1000, "randomness": "0x" + "ab" * 32,
        "partition": 1, "partitions": 4,
        "sectors": [{"number": n, "commR": "0x" + f"{n:02x}" * 32,
                     "replica": f"{filecoin.SECTORS_MOUNT}/s-t01000-{n}/sealed",
                     "cache": f"{filecoin.SECTORS_MOUNT}/s-t01000-{n}/cache"} for n in (3, 4)],
    }
    volumes = {v["name"]: v for v in manifest["spec"]["volumes"]}
    assert volumes[filecoin.SECTORS_VOLUME]["persistentVolumeClaim"] == {
        "claimName": "sealed", "readOnly": True}
    assert volumes[filecoin.PARAMETERS_VOLUME]["hostPath"] == {
        "path": "/srv/params", "type": "Directory"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts[filecoin.SECTORS_VOLUME]["readOnly"] is True
    assert mounts[filecoin.PARAMETERS_VOLUME]["readOnly"] is True


@pytest.mark.parametrize(("kind", "entry"), [("porep-c2", C2_SECTOR),
                                            ("snap-update", UPDATE_SECTOR)])
def test_a_porep_or_update_is_one_partition_given_its_sectors_own_fields(
        kind: str, entry: dict[str, Any]) -> None:
    spec = proofjob.resolve(job(kind))
    assert spec.partitions == 1
    manifest = pod_manifest(spec, 0, 1, PodSettings(image="prover:1"))
    env = {e["name"]: e.get("value") for e in manifest["spec"]["containers"][0]["env"]}
    real = json.loads(env[pod.INPUT_ENV])[pod.FILECOIN_INPUT_KEY]
    assert "randomness" not in real
    assert real["partitions"] == 1
    (given,) = real["sectors"]
    assert given == {k: f"{filecoin.SECTORS_MOUNT}/{v}" if k in filecoin.PATH_FIELDS else v
                     for k, v in entry.items()}


@pytest.mark.parametrize(
    ("kind", "change", "reason"),
    [
        ("porep-c2", {"sectors": [C2_SECTOR, {**C2_SECTOR, "number": 8}]},
         "a real porep-c2 proves one sector, not 2"),
        ("porep-c2", {"sectors": [{**C2_SECTOR, "replica": "s/sealed"}]},
         "sectors[0]: a porep-c2 sector has no replica"),
        ("porep-c2", {"sectors": [{k: v for k, v in C2_SECTOR.items() if k != "seed"}]},
         "sectors[0].seed must be 0x followed by 64 hex digits, got None"),
        ("snap-update", {"sectors": [{**UPDATE_SECTOR, "sectorKey": "/abs"}]},
         "sectors[0].sectorKey must be a relative path inside the volume"),
        ("window-post", {"sectors": [{**sectors(1)[0], "c1Output": "c1.json"}]},
         "sectors[0]: a window-post sector has no c1Output"),
    ],
)
def test_each_kind_takes_only_its_own_sector_fields(kind: str, change: dict[str, Any],
                                                    reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        proofjob.resolve(job(kind, **change))


@pytest.mark.parametrize(("kind", "randomness", "reason"), [
    ("porep-c2", "0x" + "ab" * 32, "a real porep-c2 uses its sector's own randomness"),
    ("window-post", None, "a real window-post needs the chain's randomness"),
])
def test_randomness_is_the_chains_for_a_post_only(kind: str, randomness: str | None,
                                                  reason: str) -> None:
    changed = job(kind)
    changed["spec"]["randomness"] = randomness
    if randomness is None:
        del changed["spec"]["randomness"]
    with pytest.raises(ValueError, match=reason):
        proofjob.resolve(changed)


def test_a_synthetic_job_keeps_the_built_in_prover() -> None:
    plain = job()
    del plain["spec"]["filecoin"]
    manifest = pod_manifest(proofjob.resolve(plain), 0, 1, PodSettings(image="prover:1"))
    container = manifest["spec"]["containers"][0]
    assert container["command"] == ["kuzk-prover"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert pod.FILECOIN_INPUT_KEY not in json.loads(env[pod.INPUT_ENV])
    assert pod.PARAMETER_CACHE_ENV not in env


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"sectorSize": "4KiB"}, "spec.filecoin.sectorSize must be one of"),
        ({"volume": {}}, "spec.filecoin.volume.claimName must name"),
        ({"sectors": []}, "spec.filecoin.sectors must list at least one sector"),
        ({"sectors": [*sectors(1), *sectors(1)]}, "names a sector number twice"),
        ({"sectors": [{**sectors(1)[0], "commR": "0x12"}]},
         "spec.filecoin.sectors[0].commR must be 0x followed by 64 hex digits"),
        ({"sectors": [{**sectors(1)[0], "replica": "../etc/passwd"}]},
         "spec.filecoin.sectors[0].replica must be a relative path inside the volume"),
        ({"sectors": [{**sectors(1)[0], "cache": "/var/lib"}]},
         "spec.filecoin.sectors[0].cache must be a relative path"),
    ],
)
def test_a_bad_real_spec_is_refused_naming_its_field(change: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        proofjob.resolve(job(**change))


def test_every_kind_proves_for_real() -> None:
    assert set(filecoin.REAL_KINDS) == set(api.PROOF_KINDS)


@pytest.mark.parametrize("path", ["a", "a/b.c", ".hidden/x", "..x/y", "s-t01000-1/sealed"])
def test_relative_paths_inside_the_volume_are_accepted(path: str) -> None:
    sector = filecoin._sector("window-post", 0, {**sectors(1)[0], "replica": path})
    assert sector.field("replica") == path


def test_a_proof_is_read_only_once_a_real_job_succeeded() -> None:
    done = {**job(), "status": {"phase": "Succeeded", "proof": {"bytes": "0x0102"}}}
    assert proofjob.proof_bytes(done) == b"\x01\x02"
    running = {**job(), "status": {"phase": "Running", "succeeded": 1, "partitionCount": 4}}
    with pytest.raises(ValueError, match="Running, 1 of 4 partitions done"):
        proofjob.proof_bytes(running)
    failed = {**job(), "status": {"phase": "Failed", "succeeded": 3, "partitionCount": 4}}
    with pytest.raises(ValueError, match="Failed with 3 of 4 partitions done: a failed job has"):
        proofjob.proof_bytes(failed)
    synthetic = {"spec": {"proofKind": "window-post"}, "status": done["status"]}
    with pytest.raises(ValueError, match="not a real proof"):
        proofjob.proof_bytes(synthetic)


@pytest.mark.parametrize(("proof", "state", "message"), [
    ("0x" + "ab" * 192, "done", None),
    (None, "pending", NO_PROOF),
])
def test_a_real_partition_is_done_only_with_its_proof(proof: str | None, state: str,
                                                       message: str | None) -> None:
    real = {**job("winning-post"), "status": {}}
    real["spec"]["backoffLimitPerPartition"] = 1
    result = {"commitment": "0x" + "cd" * 32, **({"proof": proof} if proof else {})}
    pod = Make.pod(real, 0, 1, phase="Succeeded", node="n1", exit_code=0,
                   message=json.dumps(result))
    decision = reconcile(real, [pod], [], T0, settings=PodSettings(image="prover:1"))
    (entry,) = decision.status["partitions"]
    assert (entry["state"], entry.get("proof"), entry.get("message")) == (
        state, proof, message)


@pytest.mark.parametrize(("kind", "size", "memory"), [
    ("window-post", "2KiB", "64Mi"), ("porep-c2", "2KiB", "4Gi"),
    ("window-post", "32GiB", "128Gi"), ("porep-c2", "32GiB", "182Gi"),
    ("snap-update", "64GiB", "254Gi"),
])
def test_a_real_partition_pod_requests_its_kinds_memory(kind: str, size: str,
                                                        memory: str) -> None:
    manifest = pod_manifest(proofjob.resolve(job(kind, sectorSize=size)), 0, 1,
                            PodSettings(image="prover:1"))
    resources = manifest["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"memory": memory}


@pytest.mark.parametrize(("resources", "requests"), [
    ({"requests": {"memory": "1Gi", "cpu": "2"}}, {"memory": "1Gi", "cpu": "2"}),
    ({"limits": {"memory": "1Gi"}}, None),
    ({"requests": {"cpu": "2"}}, {"cpu": "2", "memory": "256Mi"}),
])
def test_a_jobs_own_memory_wins(resources: dict[str, Any],
                                requests: dict[str, str] | None) -> None:
    chosen = job("winning-post")
    chosen["spec"]["prover"] = {"resources": resources}
    manifest = pod_manifest(proofjob.resolve(chosen), 0, 1, PodSettings(image="prover:1"))
    assert manifest["spec"]["containers"][0]["resources"].get("requests") == requests


def test_a_synthetic_partition_pod_requests_no_memory() -> None:
    plain = job()
    del plain["spec"]["filecoin"]
    manifest = pod_manifest(proofjob.resolve(plain), 0, 1, PodSettings(image="prover:1"))
    assert "requests" not in manifest["spec"]["containers"][0]["resources"]
