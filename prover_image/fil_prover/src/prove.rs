//! `prove`: the partition pod's prover. It reads the job from the environment, checks every
//! input, makes the vanilla proofs (CPU), then the SNARK, holding the lane's GPU phase around
//! its GPU part only (after the circuits' synthesis: gpu_phase), and hands the result to the
//! lane agent (or prints it).

use std::time::Instant;

use filecoin_proofs::types::ProverId;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::args::{env_optional, env_required, Flags};
use crate::config::{self, check_sector_bytes, prover_id, ProofKind, BACKEND};
use crate::fail::{bad_input, Outcome};
use crate::gpu_phase::{self, Times};
use crate::hexio::to_hex;
use crate::lane::{Lane, SOCKET_ENV};
use crate::params;
use crate::porep::{self, Porep, PorepInput};
use crate::post::{self, Post};
use crate::progress;
use crate::sector;
use crate::update::{self, Update, UpdateInput};

/// `KUZK_INPUT`: a JSON object whose `filecoin` key is read (other keys are the operator's).
#[derive(Deserialize)]
struct Input {
    filecoin: FilecoinInput,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FilecoinInput {
    sector_size: u64,
    prover_id: u64,
    partition: usize,
    partitions: usize,
    /// PoSt: the challenge randomness (a PoRep's and an update's are their sector's own).
    randomness: Option<String>,
    /// The sectors, each as its kind lists it: a WindowPoSt partition's, WinningPoSt's whole
    /// set, or a porep-c2's or snap-update's one sector.
    sectors: Vec<Value>,
}

/// A checked job.
struct Job {
    kind: ProofKind,
    prover_id: ProverId,
    partition: usize,
    work: Work,
}

/// What the proof is made from.
enum Work {
    Post(Post),
    /// A PoRep C2: one sector's C1 output, whose vanilla proofs were made when it was sealed.
    Porep(Porep),
    Update(Update),
}

/// The vanilla proofs the SNARK is made from.
enum Vanilla {
    Post(post::Vanilla),
    Porep,
    Update(update::Vanilla),
}

/// The result the operator reads (kuzk.contract.pod.parse_result).
#[derive(Serialize)]
struct ProofResult {
    commitment: String,
    proof: String,
    synth_ms: u64,
    gpu_ms: u64,
    backend: &'static str,
    kind: &'static str,
    partition: usize,
}

/// `prove`, configured by KUZK_PROOF_KIND, KUZK_PARTITION, KUZK_INPUT,
/// FIL_PROOFS_PARAMETER_CACHE and (optional) KUZK_LANE_SOCKET.
pub fn command(args: &[String]) -> Outcome<()> {
    Flags::parse("prove", args, &[])?;
    let kind = ProofKind::parse("KUZK_PROOF_KIND", &env_required("KUZK_PROOF_KIND")?)?;
    let partition = env_required("KUZK_PARTITION")?;
    let partition: usize = partition.parse().map_err(|_| {
        bad_input(format!(
            "KUZK_PARTITION: {partition:?} is not a decimal number"
        ))
    })?;
    let input: Input = serde_json::from_str(&env_required("KUZK_INPUT")?)
        .map_err(|error| bad_input(format!("KUZK_INPUT: {error}")))?;
    let job = check_job(kind, partition, input.filecoin)?;
    params::require(kind)?;
    run(job, env_optional(SOCKET_ENV).map(Lane::new))
}

fn check_job(kind: ProofKind, partition: usize, input: FilecoinInput) -> Outcome<Job> {
    check_sector_bytes("sectorSize", input.sector_size)?;
    if input.partition != partition {
        return Err(bad_input(format!(
            "partition: {} differs from KUZK_PARTITION ({partition})",
            input.partition
        )));
    }
    if partition >= input.partitions {
        return Err(bad_input(format!(
            "partition: {partition} is not below partitions ({})",
            input.partitions
        )));
    }
    let prover = prover_id(input.prover_id);
    let work = match kind.post_config() {
        Some(config) => Work::Post(post::check(
            kind,
            config,
            prover,
            input.randomness.as_deref(),
            &input.sectors,
        )?),
        None => {
            check_one_sector_proof(kind, &input)?;
            let entry = &input.sectors[0];
            match kind {
                ProofKind::PorepC2 => Work::Porep(porep::check(
                    &sector::entry::<PorepInput>(0, entry)?,
                    input.prover_id,
                )?),
                _ => Work::Update(update::check(&sector::entry::<UpdateInput>(0, entry)?)?),
            }
        }
    };
    Ok(Job {
        kind,
        prover_id: prover,
        partition,
        work,
    })
}

/// A porep-c2 or snap-update job proves one sector, all of its circuit partitions in one
/// SNARK call (one at 2 KiB), with the sector's own randomness.
fn check_one_sector_proof(kind: ProofKind, input: &FilecoinInput) -> Outcome<()> {
    if input.partitions != 1 {
        return Err(bad_input(format!(
            "partitions: {}; a {} job at {} is one partition",
            input.partitions,
            kind.name(),
            config::SECTOR_SIZE_NAME
        )));
    }
    if input.sectors.len() != 1 {
        return Err(bad_input(format!(
            "sectors: {} sectors; a {} job proves one",
            input.sectors.len(),
            kind.name()
        )));
    }
    if input.randomness.is_some() {
        return Err(bad_input(format!(
            "randomness: a {} job uses its sector's own randomness, not the job's",
            kind.name()
        )));
    }
    Ok(())
}

fn run(job: Job, lane: Option<Lane>) -> Outcome<()> {
    let Job {
        kind,
        prover_id,
        partition,
        work,
    } = job;
    call(lane.as_ref(), "stage synthesizing")?;
    // The GPU phase is held around the GPU's part of the SNARK only, from inside it
    // (gpu_phase): synthesis, the vanilla proofs' and the circuits', runs before it.
    gpu_phase::start(lane.clone());
    let vanilla = vanilla(&work, prover_id)?;
    let proof = snark(work, vanilla, prover_id, partition)?;
    let Times { synth_ms, gpu_ms } = gpu_phase::times();
    progress!(
        "{} partition {partition}: SNARK of {} bytes; synthesis {synth_ms} ms, GPU part {gpu_ms} ms",
        kind.name(),
        proof.len()
    );

    let result = ProofResult {
        commitment: to_hex(&Sha256::digest(&proof)),
        proof: to_hex(&proof),
        synth_ms,
        gpu_ms,
        backend: BACKEND,
        kind: kind.name(),
        partition,
    };
    let json = serde_json::to_string(&result).expect("the result serializes");
    match &lane {
        Some(lane) => lane.call(&format!("result {json}")).map(drop),
        None => {
            println!("{json}");
            Ok(())
        }
    }
}

/// Makes a lane call when a lane agent is there; nothing otherwise.
fn call(lane: Option<&Lane>, line: &str) -> Outcome<()> {
    match lane {
        Some(lane) => lane.call(line).map(drop),
        None => Ok(()),
    }
}

/// The vanilla proofs: PoSt's and an update's merkle inclusion proofs at their challenges;
/// PoRep's are in the C1 output already.
fn vanilla(work: &Work, prover: ProverId) -> Outcome<Vanilla> {
    let started = Instant::now();
    let vanilla = match work {
        Work::Post(post) => Vanilla::Post(post::vanilla(post, prover)?),
        Work::Porep(porep) => {
            progress!(
                "porep-c2: sector {}'s vanilla proofs are its C1 output",
                u64::from(porep.statement.sector)
            );
            return Ok(Vanilla::Porep);
        }
        Work::Update(update) => Vanilla::Update(update::vanilla(update)?),
    };
    progress!("vanilla proofs in {} ms", millis(started));
    Ok(vanilla)
}

/// The Groth16 proof of the job's partition from its vanilla proofs.
fn snark(work: Work, vanilla: Vanilla, prover: ProverId, partition: usize) -> Outcome<Vec<u8>> {
    match (work, vanilla) {
        (Work::Post(post), Vanilla::Post(proofs)) => post::snark(&post, proofs, prover, partition),
        (Work::Porep(porep), Vanilla::Porep) => porep::commit(porep, prover),
        (Work::Update(update), Vanilla::Update(proofs)) => update::snark(&update, proofs),
        _ => unreachable!("vanilla proofs are made from the same work"),
    }
}

fn millis(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}
