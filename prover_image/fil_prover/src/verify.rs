//! `verify`: checks a ProofJob's proof against the public inputs the job names, as a chain
//! verifier would: the proof kind, the miner, and per kind the randomness and the sectors'
//! comm_r (PoSt), the sector's commitments, ticket and seed (PoRep C2), or the old and new
//! comm_r and the new comm_d (snap-update).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use bellperson::groth16;
use blstrs::Bls12;
use filecoin_proofs::types::{Commitment, PoStConfig, ProverId, PublicReplicaInfo};
use filecoin_proofs::{verify_window_post, verify_winning_post, SINGLE_PARTITION_PROOF_LEN};
use serde::de::DeserializeOwned;
use serde_json::Value;
use storage_proofs_core::sector::SectorId;

use crate::args::Flags;
use crate::config::{
    self, check_sector_bytes, check_sector_size, field_randomness, prover_id, ProofKind, Tree,
};
use crate::fail::{bad_input, failed, Failure, Outcome};
use crate::hexio::{parse_32, parse_hex};
use crate::params;
use crate::porep::{self, PorepInput};
use crate::post::winning_challenged;
use crate::sector::{self, file_error, parse_comm_r};
use crate::update::{self, UpdateInput};

/// The public inputs a ProofJob names.
struct Statement {
    kind: ProofKind,
    prover_id: ProverId,
    /// How many sectors the proof covers.
    sectors: usize,
    inputs: Inputs,
}

/// The public inputs by kind.
enum Inputs {
    Post {
        config: PoStConfig,
        randomness: [u8; 32],
        /// By sector number, ascending.
        sectors: Vec<(SectorId, Commitment)>,
    },
    Porep(porep::Statement),
    Update {
        comm_r_old: Commitment,
        comm_r_new: Commitment,
        comm_d_new: Commitment,
    },
}

/// `verify --job JOB.json [--proof FILE]`.
pub fn command(args: &[String]) -> Outcome<()> {
    let flags = Flags::parse("verify", args, &["job", "proof"])?;
    let job_path = Path::new(flags.required("job")?);
    let text =
        fs::read_to_string(job_path).map_err(|error| file_error("--job", job_path, &error))?;
    let job: Value = serde_json::from_str(&text).map_err(|error| {
        bad_input(format!(
            "--job: {} is not JSON: {error}",
            job_path.display()
        ))
    })?;
    let statement = read_statement(&job)?;
    let proof = match flags.optional("proof") {
        Some(file) => {
            fs::read(file).map_err(|error| file_error("--proof", Path::new(file), &error))?
        }
        None => parse_hex(".status.proof.bytes", text_at(&job, ".status.proof.bytes")?)?,
    };
    let partitions = partition_count(&statement);
    check_proof(&proof, partitions)?;
    params::require(statement.kind)?;
    if !holds(&statement, &proof)? {
        return Err(failed(format!(
            "the proof does not verify: {} of {} sectors, {partitions} partitions, {} bytes",
            statement.kind.name(),
            statement.sectors,
            proof.len()
        )));
    }
    println!(
        "verified: {}, {} sectors, {partitions} partitions, {} bytes",
        statement.kind.name(),
        statement.sectors,
        proof.len()
    );
    Ok(())
}

fn read_statement(job: &Value) -> Outcome<Statement> {
    let kind = ProofKind::parse(".spec.proofKind", text_at(job, ".spec.proofKind")?)?;
    let miner = at(job, ".spec.sector.miner")?
        .as_u64()
        .ok_or_else(|| bad_input(".spec.sector.miner: not a miner id (a non-negative integer)"))?;
    match at(job, ".spec.filecoin.sectorSize")? {
        Value::Number(bytes) => {
            check_sector_bytes(".spec.filecoin.sectorSize", bytes.as_u64().unwrap_or(0))?
        }
        size => check_sector_size(
            ".spec.filecoin.sectorSize",
            size.as_str().unwrap_or_default(),
        )?,
    }
    let list = at(job, ".spec.filecoin.sectors")?;
    let inputs = match kind.post_config() {
        Some(config) => Inputs::Post {
            config,
            randomness: field_randomness(parse_32(
                ".spec.randomness",
                text_at(job, ".spec.randomness")?,
            )?),
            sectors: read_sectors(list)?,
        },
        None => {
            let entry = one_sector(kind, list)?;
            if kind == ProofKind::PorepC2 {
                Inputs::Porep(porep::statement(0, &spec_entry::<PorepInput>(entry)?)?)
            } else {
                let input = spec_entry::<UpdateInput>(entry)?;
                let field = |name: &str| format!(".spec.filecoin.sectors[0].{name}");
                Inputs::Update {
                    comm_r_old: parse_comm_r(&field("commROld"), &input.comm_r_old)?,
                    comm_r_new: parse_comm_r(&field("commR"), &input.comm_r)?,
                    comm_d_new: parse_comm_r(&field("commD"), &input.comm_d)?,
                }
            }
        }
    };
    let sectors = match &inputs {
        Inputs::Post { sectors, .. } => sectors.len(),
        _ => 1,
    };
    Ok(Statement {
        kind,
        prover_id: prover_id(miner),
        sectors,
        inputs,
    })
}

/// The one sector of a porep-c2 or snap-update job.
fn one_sector(kind: ProofKind, list: &Value) -> Outcome<&Value> {
    match list.as_array().map(Vec::as_slice) {
        Some([entry]) => Ok(entry),
        _ => Err(bad_input(format!(
            ".spec.filecoin.sectors: a {} job lists one sector",
            kind.name()
        ))),
    }
}

/// `.spec.filecoin.sectors[0]` read as the kind's entry (paths relative to the volume).
fn spec_entry<T: DeserializeOwned>(entry: &Value) -> Outcome<T> {
    T::deserialize(entry)
        .map_err(|error| bad_input(format!(".spec.filecoin.sectors[0]: {error}")))
}

/// `.spec.filecoin.sectors`: each `{number, commR, ...}`, sorted here by number.
fn read_sectors(list: &Value) -> Outcome<Vec<(SectorId, Commitment)>> {
    let field = ".spec.filecoin.sectors";
    let entries = list
        .as_array()
        .ok_or_else(|| bad_input(format!("{field}: not a list")))?;
    if entries.is_empty() {
        return Err(bad_input(format!("{field}: empty")));
    }
    let mut sectors = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let at_index = format!("{field}[{index}]");
        let number = entry.get("number").and_then(Value::as_u64).ok_or_else(|| {
            bad_input(format!("{at_index}.number: missing or not a sector number"))
        })?;
        let comm_r = entry
            .get("commR")
            .and_then(Value::as_str)
            .ok_or_else(|| bad_input(format!("{at_index}.commR: missing or not a string")))?;
        sectors.push((number, parse_comm_r(&format!("{at_index}.commR"), comm_r)?));
    }
    sectors.sort_by_key(|&(number, _)| number);
    sector::check_order(field, sectors.iter().map(|&(number, _)| number))?;
    Ok(sectors
        .into_iter()
        .map(|(number, comm_r)| (SectorId::from(number), comm_r))
        .collect())
}

/// WindowPoSt: one partition per sectors-per-partition sectors; the others: one (a 2 KiB
/// PoRep's and update's circuits are one partition each).
fn partition_count(statement: &Statement) -> usize {
    match (&statement.inputs, statement.kind) {
        (Inputs::Post { sectors, .. }, ProofKind::WindowPost) => sectors
            .len()
            .div_ceil(config::window_post_sectors_per_partition()),
        _ => 1,
    }
}

/// A proof is one Groth16 proof per partition: bad input if its length is wrong; it does not
/// verify if a partition's bytes are not a proof (points off the curve or its subgroup).
fn check_proof(proof: &[u8], partitions: usize) -> Outcome<()> {
    if proof.len() != partitions * SINGLE_PARTITION_PROOF_LEN {
        return Err(bad_input(format!(
            "proof: {} bytes; {partitions} partitions make {} ({SINGLE_PARTITION_PROOF_LEN} each)",
            proof.len(),
            partitions * SINGLE_PARTITION_PROOF_LEN
        )));
    }
    for (index, bytes) in proof.chunks(SINGLE_PARTITION_PROOF_LEN).enumerate() {
        groth16::Proof::<Bls12>::read(bytes).map_err(|error| {
            failed(format!("the proof does not verify: partition {index}'s bytes are not a Groth16 proof ({error})"))
        })?;
    }
    Ok(())
}

/// Whether the proof holds for the statement.
fn holds(statement: &Statement, proof: &[u8]) -> Outcome<bool> {
    let prover_id = statement.prover_id;
    let replica = |comm_r: &Commitment| PublicReplicaInfo::new(*comm_r).map_err(Failure::from);
    match &statement.inputs {
        Inputs::Post {
            config,
            randomness,
            sectors,
        } if statement.kind == ProofKind::WindowPost => {
            let replicas = sectors
                .iter()
                .map(|(id, comm_r)| Ok((*id, replica(comm_r)?)))
                .collect::<Outcome<BTreeMap<_, _>>>()?;
            Ok(verify_window_post::<Tree>(
                config, randomness, &replicas, prover_id, proof,
            )?)
        }
        Inputs::Post {
            config,
            randomness,
            sectors,
        } => {
            let challenged = winning_challenged(config, randomness, sectors.len(), prover_id)?;
            let replicas = challenged
                .iter()
                .map(|&index| {
                    let (id, comm_r) = &sectors[index];
                    Ok((*id, replica(comm_r)?))
                })
                .collect::<Outcome<Vec<_>>>()?;
            Ok(verify_winning_post::<Tree>(
                config, randomness, &replicas, prover_id, proof,
            )?)
        }
        Inputs::Porep(porep) => porep::holds(porep, prover_id, proof),
        Inputs::Update {
            comm_r_old,
            comm_r_new,
            comm_d_new,
        } => update::holds(proof, *comm_r_old, *comm_r_new, *comm_d_new),
    }
}

/// The value at a `.a.b.c` path; bad input naming the path if it is missing.
fn at<'a>(value: &'a Value, path: &str) -> Outcome<&'a Value> {
    path.split('.')
        .skip(1)
        .try_fold(value, |inner, key| inner.get(key))
        .ok_or_else(|| bad_input(format!("{path}: missing from the job")))
}

/// The string at a `.a.b.c` path; bad input if it is missing or not a string.
fn text_at<'a>(value: &'a Value, path: &str) -> Outcome<&'a str> {
    at(value, path)?
        .as_str()
        .ok_or_else(|| bad_input(format!("{path}: not a string")))
}
