"""The real prover's tools for the test bed and the demo: ``kuzk-fil-prover`` and the 2 KiB
Groth16 parameters (built and made once per machine by ``testenv/build_filecoin``), sealed
2 KiB sectors to prove, and the volume a ProofJob reads them from (a PersistentVolume on the
sectors' directory, bound to a claim of the job's namespace)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from kuzk.contract.filecoin import PROVER, PROVER_COMMAND
from testenv.waiting import wait_for

BUILD = Path(__file__).resolve().parent / "build_filecoin"


@dataclass(frozen=True)
class Tools:
    """The real prover's binary and the directory of its parameters."""

    bin: Path
    params: Path

    @property
    def prover(self) -> Path:
        return self.bin / PROVER

    def command(self, lane: str = "kuzk-lane") -> list[str]:
        """A real proof's pod command (the operator's default) with this build's binary, under
        the lane agent ``lane``."""
        return [lane, *(str(self.prover) if a == PROVER else a for a in PROVER_COMMAND[1:])]

    def env(self) -> dict[str, str]:
        """What the prover's commands need besides the caller's env."""
        return {"FIL_PROOFS_PARAMETER_CACHE": str(self.params)}


def build(*, only_print: bool = False, kinds: Sequence[str] = ()) -> Tools:
    """Build what is missing (``testenv/build_filecoin``, minutes on first use) and say where it
    is; with ``only_print``, where it would be. The parameters of window-post and winning-post
    are always made; ``kinds`` asks for others' too (porep-c2, snap-update: 10 to 20 minutes
    each on first use)."""
    wanted = ["--params", *kinds] if kinds else []
    done = subprocess.run([str(BUILD), *(["--print"] if only_print else wanted)], check=True,
                          stdout=subprocess.PIPE, text=True, timeout=3600)
    bin_dir, params = done.stdout.strip().splitlines()[-2:]
    return Tools(Path(bin_dir), Path(params))


def seal(tools: Tools, directory: Path, *, miner: int, first: int, count: int,
         kind: str = "window-post") -> list[dict[str, Any]]:
    """Seal ``count`` 2 KiB sectors of ``miner`` numbered from ``first`` into ``directory``
    (those already there are reused): their entries for the ``spec.filecoin.sectors`` of a
    ProofJob of ``kind`` (window-post, winning-post or porep-c2), paths relative to
    ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return _listing(tools, "seal", directory, miner, first, count, "--kind", kind)


def update(tools: Tools, directory: Path, *, miner: int, first: int,
           count: int) -> list[dict[str, Any]]:
    """Encode new data into ``count`` sectors ``seal`` made (SnapDeals; those updated already
    are reused): their entries for a snap-update ProofJob's ``spec.filecoin.sectors``."""
    return _listing(tools, "update", directory, miner, first, count)


def _listing(tools: Tools, command: str, directory: Path, miner: int, first: int, count: int,
             *extra: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(tools.prover), command, "--dir", str(directory), "--miner", str(miner),
         "--first", str(first), "--count", str(count), *extra],
        check=True, stdout=subprocess.PIPE, text=True, timeout=600)
    sectors: list[dict[str, Any]] = json.loads(done.stdout)
    return sectors


def create_volume(core: client.CoreV1Api, namespace: str, claim: str, directory: Path) -> str:
    """A read-only PersistentVolume on ``directory`` (a node path every test node shares, as
    the process kubelet's nodes share this machine), bound to the claim ``claim`` of
    ``namespace``; the volume's name, for ``delete_volume``."""
    volume = f"{namespace}-{claim}"[:253]
    core.create_persistent_volume({
        "metadata": {"name": volume},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(directory), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    })
    core.create_namespaced_persistent_volume_claim(namespace, {
        "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": volume,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    # Bound by kube-controller-manager's volume controller: a pod asked for before that is
    # unschedulable for it ("unbound immediate PersistentVolumeClaims"), not for what a test
    # arranged (its node's memory, say).
    wait_for(lambda: core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase
             == "Bound", 60, f"the claim {namespace}/{claim} bound")
    return volume


def delete_volume(core: client.CoreV1Api, volume: str) -> None:
    core.delete_persistent_volume(volume)
