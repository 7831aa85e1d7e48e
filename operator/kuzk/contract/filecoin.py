"""A real Filecoin proof's inputs, as a ProofJob's ``spec.filecoin`` states them, and the chain's
partitioning of them.

A ProofJob with ``spec.filecoin`` proves sealed sectors with filecoin-proofs (the real prover,
``kuzk-fil-prover``, run under the lane agent) instead of the built-in prover's synthetic
witness. Its partitions are the chain's: a WindowPoSt over N sectors has ceil(N / sectors per
partition) partitions, each proving its slice of the sectors sorted by number (the order of the
verifier's sector map); a WinningPoSt is one partition over the whole sector set, whose
challenged sector the prover picks; a PoRep C2 and a SnapDeals update are one partition over
one sector (the library proves all of a sector's circuit partitions in one call). Each kind
lists its sectors with its own fields (``SECTOR_FIELDS``). Paths are relative to the
PersistentVolumeClaim the job names, which every partition pod mounts read-only at
``SECTORS_MOUNT``.

Only the standard library and ``pod`` are imported: the operator and the CRD read it alike.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kuzk.contract.pod import RANDOMNESS_PATTERN

# The kinds the real prover proves, and what each lists of a sector beside its number and
# commR (hex values and paths inside the volume): a PoSt's replicas; a PoRep C2's unsealed
# commitment, randomness and C1 output; a SnapDeals update's sector key (the replica as first
# sealed, commROld) and the updated replica with its new unsealed commitment.
SECTOR_FIELDS = {
    "window-post": ("replica", "cache"),
    "winning-post": ("replica", "cache"),
    "porep-c2": ("commD", "ticket", "seed", "c1Output"),
    "snap-update": ("commROld", "commD", "replica", "cache", "sectorKey", "sectorKeyCache"),
}
REAL_KINDS = tuple(SECTOR_FIELDS)
# The kinds proven with the chain's randomness (spec.randomness); the others carry their
# sector's own (a PoRep's ticket and seed) or none (an update), and prove one sector.
RANDOMNESS_KINDS = ("window-post", "winning-post")
HEX_FIELDS = ("commD", "ticket", "seed", "commROld")
PATH_FIELDS = ("replica", "cache", "c1Output", "sectorKey", "sectorKeyCache")
# filecoin-proofs' sector sizes, by the name a ProofJob uses, in bytes.
SECTOR_SIZES = {
    "2KiB": 2 << 10,
    "8MiB": 8 << 20,
    "512MiB": 512 << 20,
    "32GiB": 32 << 30,
    "64GiB": 64 << 30,
}
# Sectors in one WindowPoSt partition (filecoin-proofs' WINDOW_POST_SECTOR_COUNT).
WINDOW_POST_SECTORS_PER_PARTITION = {
    "2KiB": 2,
    "8MiB": 2,
    "512MiB": 2,
    "32GiB": 2349,
    "64GiB": 2300,
}
# The most sectors a job names: two full partitions at 32 GiB fit one API object (each entry
# is about 200 bytes); at the small test sizes the 64-partition limit is the bound.
MAX_SECTORS = 4700
SMALL_SIZE_MAX_SECTORS = 128
COMM_R_PATTERN = RANDOMNESS_PATTERN
# A relative path inside the volume: no leading /, no empty, "." or ".." segment.
_SEGMENT = r"([^/.][^/]*|\.[^/.][^/]*|\.\.[^/]+)"
RELATIVE_PATH_PATTERN = rf"^{_SEGMENT}(/{_SEGMENT})*$"
PATH_MAX = 1024

# The memory a real proof's partition pod requests unless its job asks otherwise
# (spec.prover.resources): the scheduler then places no more proofs on a node than its
# allocatable memory holds, instead of the kernel's OOM killer deciding. At 32 GiB and 64 GiB,
# Lotus' scheduler resource table (storiface/resources.go), per proof: its MaxMemory plus its
# BaseMinMemory, the parameters, which each pod loads for itself (PoRep C2 150 + 32 GiB; a
# SnapDeals update Lotus schedules as a C2; WindowPoSt 96 + 32 GiB; WinningPoSt 1 + 32 GiB;
# at 64 GiB 190 + 64, 120 + 64 and 1 + 64). At the test sizes, the peak resident memory
# measured at 2 KiB with headroom (WindowPoSt 38 MB, WinningPoSt 131 MB, C2 2.8 GB,
# SnapDeals 1.5 GB); 8 MiB and 512 MiB are not measured and take the 2 KiB figures.
MEMORY_REQUESTS = {
    "32GiB": {"window-post": "128Gi", "winning-post": "33Gi", "porep-c2": "182Gi",
              "snap-update": "182Gi"},
    "64GiB": {"window-post": "184Gi", "winning-post": "65Gi", "porep-c2": "254Gi",
              "snap-update": "254Gi"},
}
TEST_SIZE_MEMORY_REQUESTS = {"window-post": "64Mi", "winning-post": "256Mi",
                             "porep-c2": "4Gi", "snap-update": "2Gi"}

# The real prover, and the command a real proof's partition pods run by default: the prover
# under the lane agent, which holds its lane and writes its result.
PROVER = "kuzk-fil-prover"
PROVER_COMMAND = ("kuzk-lane", "run", "--calls", "--", PROVER, "prove")
# Where paramfetch puts filecoin-proofs' parameters on a node, by default.
PARAMETERS_HOST_PATH = "/var/tmp/filecoin-proof-parameters"
# Where a partition pod sees the job's volume and the proof parameters (read-only both).
SECTORS_VOLUME, SECTORS_MOUNT = "sectors", "/var/lib/kuzk/sectors"
PARAMETERS_VOLUME, PARAMETERS_MOUNT = "filecoin-parameters", "/var/tmp/filecoin-proof-parameters"


@dataclass(frozen=True)
class Sector:
    """One sealed sector a proof covers: its number, its sealed commitment, and its kind's
    other fields (``SECTOR_FIELDS``: hex values, and paths inside the job's volume)."""

    number: int
    comm_r: str
    fields: tuple[tuple[str, str], ...]

    def field(self, name: str) -> str:
        return dict(self.fields)[name]


@dataclass(frozen=True)
class FilecoinSpec:
    """A ProofJob's real-proof inputs, its sectors sorted by number."""

    sector_size: str
    claim_name: str
    sectors: tuple[Sector, ...]

    def memory_request(self, proof_kind: str) -> str:
        """The memory a partition pod of this proof requests by default."""
        return MEMORY_REQUESTS.get(self.sector_size, TEST_SIZE_MEMORY_REQUESTS)[proof_kind]

    def partitions(self, proof_kind: str) -> int:
        """The chain's number of partitions of this proof."""
        if proof_kind != "window-post":
            return 1
        per = WINDOW_POST_SECTORS_PER_PARTITION[self.sector_size]
        return math.ceil(len(self.sectors) / per)

    def partition_sectors(self, proof_kind: str, partition: int) -> tuple[Sector, ...]:
        """The sectors partition ``partition`` proves: its slice of the sorted set for a
        WindowPoSt, the whole set for a WinningPoSt (the prover picks the challenged one)."""
        if proof_kind != "window-post":
            return self.sectors
        per = WINDOW_POST_SECTORS_PER_PARTITION[self.sector_size]
        return self.sectors[partition * per:(partition + 1) * per]

    def prover_input(self, proof_kind: str, prover_id: int, randomness: str,
                     partition: int) -> dict[str, Any]:
        """What the real prover reads of one partition (the ``filecoin`` key of the pod's
        input): paths made absolute under the volume's mount."""
        given: dict[str, Any] = {
            "sectorSize": SECTOR_SIZES[self.sector_size],
            "proverId": prover_id,
            "partition": partition,
            "partitions": self.partitions(proof_kind),
            "sectors": [
                {"number": s.number, "commR": s.comm_r,
                 **{k: posixpath.join(SECTORS_MOUNT, v) if k in PATH_FIELDS else v
                    for k, v in s.fields}}
                for s in self.partition_sectors(proof_kind, partition)
            ],
        }
        if proof_kind in RANDOMNESS_KINDS:
            given["randomness"] = randomness
        return given


def parse(spec: Mapping[str, Any]) -> FilecoinSpec | None:
    """``spec.filecoin`` of a ProofJob's spec, checked (the CRD's own rules, for objects stored
    before them); None when the job proves with the built-in prover. ValueError naming the
    field."""
    raw = spec.get("filecoin")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        msg = f"spec.filecoin must be an object, got {raw!r}"
        raise ValueError(msg)
    kind = spec.get("proofKind")
    if kind not in REAL_KINDS:
        msg = f"spec.filecoin: real proofs are {', '.join(REAL_KINDS)}, not {kind!r}"
        raise ValueError(msg)
    if (kind in RANDOMNESS_KINDS) != (spec.get("randomness") is not None):
        msg = (f"spec.randomness: a real {kind} needs the chain's randomness"
               if kind in RANDOMNESS_KINDS else
               f"spec.randomness: a real {kind} uses its sector's own randomness; leave it out")
        raise ValueError(msg)
    size = raw.get("sectorSize")
    if size not in SECTOR_SIZES:
        msg = f"spec.filecoin.sectorSize must be one of {list(SECTOR_SIZES)}, got {size!r}"
        raise ValueError(msg)
    claim = (raw.get("volume") or {}).get("claimName")
    if not isinstance(claim, str) or not claim:
        msg = "spec.filecoin.volume.claimName must name a PersistentVolumeClaim"
        raise ValueError(msg)
    entries = raw.get("sectors")
    if not isinstance(entries, list) or not entries:
        msg = "spec.filecoin.sectors must list at least one sector"
        raise ValueError(msg)
    if kind not in RANDOMNESS_KINDS and len(entries) != 1:
        msg = f"spec.filecoin.sectors: a real {kind} proves one sector, not {len(entries)}"
        raise ValueError(msg)
    sectors = sorted((_sector(kind, i, e) for i, e in enumerate(entries)),
                     key=lambda s: s.number)
    numbers = [s.number for s in sectors]
    if len(set(numbers)) != len(numbers):
        msg = "spec.filecoin.sectors names a sector number twice"
        raise ValueError(msg)
    return FilecoinSpec(size, claim, tuple(sectors))


def _sector(kind: str, index: int, entry: Any) -> Sector:
    field = f"spec.filecoin.sectors[{index}]"
    if not isinstance(entry, Mapping):
        msg = f"{field} must be an object, got {entry!r}"
        raise ValueError(msg)
    number = entry.get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        msg = f"{field}.number must be a sector number, got {number!r}"
        raise ValueError(msg)
    wanted = SECTOR_FIELDS[kind]
    stray = sorted(set(entry) - {"number", "commR", *wanted})
    if stray:
        msg = f"{field}: a {kind} sector has no {', '.join(stray)}"
        raise ValueError(msg)
    fields = []
    for key in ("commR", *wanted):
        value = entry.get(key)
        if key in PATH_FIELDS:
            if not isinstance(value, str) or not re.fullmatch(RELATIVE_PATH_PATTERN, value):
                msg = f"{field}.{key} must be a relative path inside the volume, got {value!r}"
                raise ValueError(msg)
        elif not isinstance(value, str) or not re.fullmatch(COMM_R_PATTERN, value):
            msg = f"{field}.{key} must be 0x followed by 64 hex digits, got {value!r}"
            raise ValueError(msg)
        else:
            value = value.lower()
        fields.append((key, value))
    return Sector(number, fields[0][1], tuple(fields[1:]))
