"""The ProofJob CustomResourceDefinition: what to prove (a proof kind, a sector, and how its
partition pods run), and what the operator reports about every partition.
"""

from __future__ import annotations

from typing import Any

from kuzk.contract import api, filecoin, pod, proofjob
from kuzk.contract.api import PHASES, STATES
from kuzk.contract.crd_schema import (
    arr,
    boolean,
    condition_list,
    immutable_once_set,
    integer,
    kuzk_crd,
    obj,
    quantity_map,
    rule,
    string,
    string_map,
    timestamp,
    tolerations,
    with_rules,
)


def _kind_table() -> str:
    rows = []
    for kind, defaults in api.PROOF_KINDS.items():
        deadline = defaults.active_deadline_seconds
        rows.append(
            f"{kind} (partitions {defaults.partitions}, circuitLog2 {defaults.circuit_log2},"
            f" priority class {defaults.priority_class_name},"
            f" deadline {f'{deadline} s' if deadline else 'none'})"
        )
    return "; ".join(rows)


def _filecoin() -> dict[str, Any]:
    def path(what: str) -> dict[str, Any]:
        return string(f"{what} inside the volume, relative (no leading /, no .. segment).",
                      pattern=filecoin.RELATIVE_PATH_PATTERN, maxLength=filecoin.PATH_MAX)

    def hex32(what: str) -> dict[str, Any]:
        return string(f"{what}, 0x and 64 hex digits.", pattern=filecoin.COMM_R_PATTERN)

    sector = obj(
        "One sealed sector, with its kind's fields: window-post and winning-post: replica,"
        " cache; porep-c2: commD, ticket, seed, c1Output; snap-update: commROld, commD,"
        " replica, cache, sectorKey, sectorKeyCache.",
        {
            "number": integer("Sector number.", minimum=0),
            "commR": hex32(
                "The sector's sealed commitment (comm_r; for snap-update the updated"
                " replica's); the prover checks it against the replica's cache or the C1"
                " output before proving"),
            "replica": path("The sealed replica's file (snap-update: the updated replica)"),
            "cache": path("The replica's cache directory (p_aux, t_aux, tree_r_last)"),
            "commD": hex32("The unsealed commitment (comm_d; for snap-update the new data's)"),
            "ticket": hex32("porep-c2: the ticket (sealing randomness) the sector was sealed"
                            " with"),
            "seed": hex32("porep-c2: the seed (interactive randomness) of its commit"),
            "c1Output": path("porep-c2: the sector's commit phase 1 output (JSON)"),
            "commROld": hex32("snap-update: the sector key's sealed commitment (the comm_r"
                              " before the update)"),
            "sectorKey": path("snap-update: the sector key (the replica as first sealed)"),
            "sectorKeyCache": path("snap-update: the sector key's cache directory"),
        },
        required=["number", "commR"],
    )
    spec = obj(
        "A real Filecoin proof of sealed sectors, proven with filecoin-proofs (kinds"
        f" {', '.join(filecoin.REAL_KINDS)}); spec.sector.miner is the prover (miner actor)"
        " ID. window-post and winning-post need spec.randomness, the chain's randomness;"
        " porep-c2 and snap-update prove one sector with its own randomness and leave it"
        " out. The partitions are the chain's: a WindowPoSt over N sectors has"
        " ceil(N / sectors per partition) (2 at 2KiB, 8MiB and 512MiB; 2349 at 32GiB; 2300"
        " at 64GiB), the other kinds one. Unset: the built-in prover's synthetic witness."
        " Immutable.",
        {
            "sectorSize": string("The sectors' size.", enum=list(filecoin.SECTOR_SIZES)),
            "volume": obj(
                "Where the sectors are: a PersistentVolumeClaim of the job's namespace, which"
                f" every partition pod mounts read-only at {filecoin.SECTORS_MOUNT}.",
                {"claimName": string("The PersistentVolumeClaim's name.", minLength=1,
                                     maxLength=api.DNS_SUBDOMAIN_MAX)},
                required=["claimName"],
            ),
            "sectors": arr(
                "The sectors the proof covers (WindowPoSt: the partitions' sectors; WinningPoSt:"
                " the set the challenge picks from; porep-c2, snap-update: one sector), in any"
                " order: partitions take them sorted by number.",
                sector,
                key="number",
                minItems=1,
                maxItems=filecoin.MAX_SECTORS,
            ),
        },
        required=["sectorSize", "volume", "sectors"],
    )
    small = "', '".join(s for s in filecoin.SECTOR_SIZES if not s.endswith("GiB"))
    return with_rules(
        spec,
        rule("self == oldSelf", "filecoin is immutable"),
        rule(f"!(self.sectorSize in ['{small}'])"
             f" || size(self.sectors) <= {filecoin.SMALL_SIZE_MAX_SECTORS}",
             f"at most {filecoin.SMALL_SIZE_MAX_SECTORS} sectors below 32GiB (64 partitions)"),
    )


def _sector_fields_rules() -> list[dict[str, Any]]:
    """Per real kind: each sector has that kind's fields and no other kind's."""
    every = {f for fields in filecoin.SECTOR_FIELDS.values() for f in fields}
    rules = []
    for kind, fields in filecoin.SECTOR_FIELDS.items():
        present = [f"has(s.{f})" for f in fields]
        absent = [f"!has(s.{f})" for f in sorted(every - set(fields))]
        rules.append(rule(
            f"!has(self.filecoin) || self.proofKind != '{kind}'"
            f" || self.filecoin.sectors.all(s, {' && '.join(present + absent)})",
            f"a {kind} sector has number, commR, {', '.join(fields)} and nothing else",
            ".filecoin.sectors"))
    return rules


def _proofjob_spec() -> dict[str, Any]:
    prover = obj(
        "Overrides for the partition pods.",
        {
            "image": string(
                "Prover image; defaults to the operator's --prover-image.", minLength=1
            ),
            "resources": obj(
                "Resources of the prover container. The GPU limit (one GPU) is always set;"
                " these add to it or replace it.",
                {
                    "limits": quantity_map("Resource limits, by resource name."),
                    "requests": quantity_map("Resource requests, by resource name."),
                },
            ),
            "nodeSelector": string_map("Node labels a partition pod requires."),
            "tolerations": tolerations(),
            "priorityClassName": string(
                "PriorityClass of the partition pods; defaults to the proof kind's class.",
                minLength=1,
                maxLength=253,
            ),
        },
    )
    spec = obj(
        "What to prove and how to run it.",
        {
            "proofKind": with_rules(
                string(
                    f"The Filecoin proof kind. Its defaults: {_kind_table()}. Immutable.",
                    enum=list(api.PROOF_KINDS),
                ),
                rule("self == oldSelf", "proofKind is immutable"),
            ),
            "partitions": integer(
                "Number of partitions, one pod each; defaults by proof kind. Immutable once set.",
                minimum=proofjob.PARTITIONS_MIN,
                maximum=proofjob.PARTITIONS_MAX,
            ),
            "sector": with_rules(
                obj(
                    "The sector being proven; it seeds each partition's witness. Immutable.",
                    {
                        "miner": integer("Miner (actor) ID.", minimum=0),
                        "number": integer("Sector number.", minimum=0),
                    },
                    required=["miner", "number"],
                ),
                rule("self == oldSelf", "sector is immutable"),
            ),
            "randomness": with_rules(
                string(
                    "The 32-byte challenge as 0x and 64 hex digits; by default derived from"
                    " the sector. Immutable.",
                    maxLength=66,
                ),
                rule(
                    f"self.matches('{pod.RANDOMNESS_PATTERN}')",
                    "randomness must be 0x followed by 64 hex digits",
                ),
            ),
            "circuitLog2": integer(
                "Constraints per partition, as a power of two (2^circuitLog2); defaults by"
                " proof kind. Immutable.",
                minimum=proofjob.CIRCUIT_LOG2_MIN,
                maximum=proofjob.CIRCUIT_LOG2_MAX,
            ),
            "backoffLimitPerPartition": integer(
                "Failed attempts of one partition that are retried before the job fails"
                f" (default {proofjob.DEFAULT_BACKOFF_LIMIT_PER_PARTITION}). Disruptions such as"
                " preemption or eviction don't count; exit code"
                f" {pod.INVALID_INPUT_EXIT_CODE} (invalid input) is never retried.",
                minimum=0,
            ),
            "activeDeadlineSeconds": integer(
                "Seconds the job may run, counted from status.startTime (restarted on"
                " resume), before it fails with reason DeadlineExceeded; defaults by proof"
                " kind.",
                minimum=1,
            ),
            "ttlSecondsAfterFinished": integer(
                "Seconds after the job finished (Succeeded or Failed) when it is deleted,"
                " and its pods with it. Unset: kept.",
                minimum=0,
            ),
            "suspend": boolean(
                "True deletes the running partition pods and keeps the job Suspended;"
                " false again resumes the partitions that are not done."
            ),
            "prover": prover,
            "filecoin": _filecoin(),
        },
        required=["proofKind", "sector"],
    )
    real = "', '".join(filecoin.REAL_KINDS)
    chain = "', '".join(filecoin.RANDOMNESS_KINDS)
    return with_rules(
        spec,
        rule(f"!has(self.filecoin) || self.proofKind in ['{real}']",
             f"real proofs are {', '.join(filecoin.REAL_KINDS)}", ".filecoin"),
        rule(f"!has(self.filecoin) || !(self.proofKind in ['{chain}']) || has(self.randomness)",
             "a real window-post or winning-post needs the chain's randomness", ".randomness"),
        rule(f"!has(self.filecoin) || self.proofKind in ['{chain}']"
             " || (!has(self.randomness) && size(self.filecoin.sectors) == 1)",
             "a real porep-c2 or snap-update proves one sector with its own randomness:"
             " leave spec.randomness out", ".filecoin"),
        *_sector_fields_rules(),
        rule("!has(self.filecoin) || !has(self.partitions)",
             "a real proof's partitions are the chain's, from filecoin.sectors: leave"
             " partitions unset", ".partitions"),
        immutable_once_set("partitions"),
        immutable_once_set("circuitLog2", strict=True),
        immutable_once_set("randomness", strict=True),
    )


def _proofjob_status() -> dict[str, Any]:
    partition = obj(
        "One partition: its state and its current (or last) attempt.",
        {
            "index": integer("Partition index, from 0.", minimum=0),
            "state": string(
                "pending (no pod, or not scheduled), scheduled, synthesizing, synth_done, gpu"
                " (its lane holds its GPU's GPU phase), committing (the CPU work after the GPU"
                " phase, the GPU given up), done or failed. done and failed are written at"
                " once; a live attempt's stage, node, worker and startedAt may trail its pod"
                " and its lane in the WorkerStatus (which the status server shows) by up to"
                " 30 s.",
                enum=list(STATES),
            ),
            "attempt": integer(
                "Current attempt, from 1; the pod is <job>-p<index>-a<attempt>.", minimum=1
            ),
            "retries": integer(
                "Failed attempts retried, counted against backoffLimitPerPartition.", minimum=0
            ),
            "disruptions": integer(
                "Attempts ended by preemption, eviction, node loss, deletion or suspend;"
                " retried without counting.",
                minimum=0,
            ),
            "pod": string("Name of the current attempt's pod."),
            "node": string("Node the current attempt runs (or ran) on."),
            "worker": string("ID of the GPU worker that holds (or held) the attempt."),
            "synthMs": integer("Synthesis time of the finished attempt, ms.", minimum=0),
            "gpuMs": integer("GPU time of the finished attempt, ms.", minimum=0),
            "startedAt": timestamp("When the current attempt's pod started."),
            "finishedAt": timestamp("When the partition finished (done or failed)."),
            "commitment": string("The partition's commitment (hex), when done."),
            "proof": string(
                "A real proof's partition (spec.filecoin), when done: its Groth16 proof bytes,"
                " 0x and hex (192 bytes)."
            ),
            "reason": string(
                "Why the last attempt ended early: Failed, Disrupted, Suspended or"
                " AttemptRecordLost (retried), InvalidInput, BackoffLimitExceeded, PodInvalid"
                " (the API server refused the pod as invalid) or JobFailed (failed); or"
                " PodRefused while the API server refuses the current attempt's pod for now"
                " (403: a ResourceQuota, Pod Security admission) and it is asked for again"
                " after a backoff."
            ),
            "message": string(
                "What the last early-ended attempt said, e.g. the prover's error, or what the"
                " API server answered when it refused the pod."
            ),
            "refusals": integer(
                "Times the API server refused the current attempt's pod (the backoff before"
                " asking again doubles from 5 s to 300 s).",
                minimum=1,
            ),
            "refusedAt": timestamp("When the API server last refused the current attempt's pod."),
        },
        required=["index", "state", "attempt"],
    )
    counts = "Partitions {}."
    return obj(
        "What the operator observed; written only by the operator.",
        {
            "observedGeneration": integer("The spec generation this status reflects."),
            "phase": string("Pending, Running, Succeeded, Failed or Suspended.", enum=list(PHASES)),
            "partitionCount": integer(
                "The job's number of partitions, fixed at its first reconcile.", minimum=1
            ),
            "resolved": obj(
                "Values the job runs with, after the proof kind's defaults.",
                {
                    "circuitLog2": integer("Constraints per partition as a power of two."),
                    "priorityClassName": string("PriorityClass of the partition pods."),
                    "activeDeadlineSeconds": integer("Deadline in seconds; unset: none."),
                    "randomness": string("The challenge in use (0x and 64 hex digits)."),
                },
            ),
            "startTime": timestamp(
                "When the job started: its creation, or when it last resumed from suspension."
            ),
            "completionTime": timestamp("When the job finished (Succeeded or Failed)."),
            "active": integer(counts.format("with a pod that is not finished"), minimum=0),
            "succeeded": integer(counts.format("done"), minimum=0),
            "failed": integer(counts.format("failed"), minimum=0),
            "retries": integer("Retried attempts over all partitions, counted or not.", minimum=0),
            "completedPartitions": string("Done partitions as compressed ranges, e.g. 0-9,11."),
            "failedPartitions": string("Failed partitions as compressed ranges."),
            "partitions": arr(
                "Every partition, by index.",
                partition,
                key="index",
                maxItems=proofjob.PARTITIONS_MAX,
            ),
            "proof": obj(
                "The job-level proof, when Succeeded.",
                {
                    "commitment": string(
                        "SHA-256 (hex) over the partition commitments' bytes, in index order."
                    ),
                    "partitions": integer("Number of partition commitments it covers."),
                    "bytes": string(
                        "A real proof (spec.filecoin): the whole proof as the chain takes it,"
                        " 0x and hex, the partitions' proofs in partition order; `kuzk proof`"
                        " writes it to a file and `kuzk-fil-prover verify` checks it."
                    ),
                },
            ),
            "conditions": condition_list(
                "Running, Complete, Failed, Suspended, PodsRefused and Rejected (the job chose"
                " a prover image or PriorityClass the operator does not allow)."
            ),
        },
    )


def proofjob_crd() -> dict[str, Any]:
    """The ProofJob CRD (namespaced, short name pj)."""
    return kuzk_crd(
        api.PROOFJOB_KIND,
        api.PROOFJOB_PLURAL,
        api.PROOFJOB_SINGULAR,
        api.PROOFJOB_SHORT_NAME,
        "Namespaced",
        "A partitioned GPU proof: the operator runs one pod per partition and reports every"
        " partition here.",
        _proofjob_spec(),
        _proofjob_status(),
        [
            {"name": "Kind", "type": "string", "jsonPath": ".spec.proofKind"},
            {"name": "Partitions", "type": "integer", "jsonPath": ".status.partitionCount"},
            {"name": "Done", "type": "integer", "jsonPath": ".status.succeeded"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Active", "type": "integer", "jsonPath": ".status.active", "priority": 1},
            {"name": "Retries", "type": "integer", "jsonPath": ".status.retries", "priority": 1},
        ],
    )
