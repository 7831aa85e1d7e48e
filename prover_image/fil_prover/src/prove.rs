//! `prove`: the partition pod's prover. It reads the job from the environment, checks every
//! input, makes the vanilla proofs (CPU), then makes the SNARK while holding the lane's GPU
//! phase, and hands the result to the lane agent (or prints it).

use std::path::PathBuf;
use std::time::Instant;

use filecoin_proofs::types::{
    FallbackPoStSectorProof, PoStConfig, ProverId, SealCommitPhase1Output,
};
use filecoin_proofs::{
    generate_fallback_sector_challenges, generate_single_vanilla_proof,
    generate_single_window_post_with_vanilla, generate_winning_post_sector_challenge,
    generate_winning_post_with_vanilla,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use storage_proofs_core::sector::SectorId;

use crate::args::{env_optional, env_required, Flags};
use crate::config::{
    self, check_sector_bytes, field_randomness, prover_id, ProofKind, Tree, BACKEND,
};
use crate::fail::{bad_input, Outcome};
use crate::hexio::{parse_32, to_hex};
use crate::lane::{Lane, SOCKET_ENV};
use crate::params;
use crate::porep;
use crate::progress;
use crate::sector::{self, Sector, SectorInput};

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
    /// PoSt: the challenge randomness.
    randomness: Option<String>,
    /// PoSt: a WindowPoSt partition's sectors, or WinningPoSt's whole sector set.
    #[serde(default)]
    sectors: Vec<SectorInput>,
    /// porep-c2: the sector's C1 output (a JSON file), and its number.
    c1_output: Option<PathBuf>,
    sector_number: Option<u64>,
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
    /// A PoSt: the sectors proven (a WindowPoSt partition's, or WinningPoSt's challenged one).
    Post {
        config: PoStConfig,
        randomness: [u8; 32],
        sectors: Vec<Sector>,
    },
    /// A PoRep C2: one sector's C1 output, whose vanilla proofs were made when it was sealed.
    Porep {
        sector: SectorId,
        c1: Box<SealCommitPhase1Output<Tree>>,
    },
}

/// The vanilla proofs the SNARK is made from, with what else it needs.
enum Vanilla {
    Post {
        config: PoStConfig,
        randomness: [u8; 32],
        proofs: Vec<FallbackPoStSectorProof<Tree>>,
    },
    Porep {
        sector: SectorId,
        c1: Box<SealCommitPhase1Output<Tree>>,
    },
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
    if kind == ProofKind::SnapUpdate {
        return Err(kind.unsupported(
            "KUZK_PROOF_KIND",
            "prove",
            "window-post, winning-post and porep-c2",
        ));
    }
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
    let lane = env_optional(SOCKET_ENV).map(Lane::new);
    run(job, lane.as_ref())
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
    let prover_id = prover_id(input.prover_id);
    let work = match kind.post_config() {
        Some(config) => check_post(kind, config, prover_id, &input)?,
        None => check_porep(&input)?,
    };
    Ok(Job {
        kind,
        prover_id,
        partition,
        work,
    })
}

fn check_post(
    kind: ProofKind,
    config: PoStConfig,
    prover: ProverId,
    input: &FilecoinInput,
) -> Outcome<Work> {
    let randomness = input
        .randomness
        .as_deref()
        .ok_or_else(|| bad_input("randomness: missing"))?;
    let randomness = field_randomness(parse_32("randomness", randomness)?);
    check_sector_count(kind, input.sectors.len())?;
    sector::check_order("sectors", input.sectors.iter().map(|s| s.number))?;
    // A WinningPoSt reads only its challenged sectors: the rest of the set is checked by
    // nothing but its order, so a large set costs no file access.
    let proven: Vec<usize> = if kind == ProofKind::WinningPost {
        let challenged = winning_challenged(&config, &randomness, input.sectors.len(), prover)?;
        progress!(
            "winning-post: challenged sector index {challenged:?} of {}",
            input.sectors.len()
        );
        challenged
    } else {
        (0..input.sectors.len()).collect()
    };
    let sectors = proven
        .into_iter()
        .map(|index| sector::check(index, &input.sectors[index]))
        .collect::<Outcome<Vec<_>>>()?;
    Ok(Work::Post {
        config,
        randomness,
        sectors,
    })
}

/// A WindowPoSt partition holds one to sectors-per-partition sectors; WinningPoSt needs a
/// non-empty sector set.
fn check_sector_count(kind: ProofKind, count: usize) -> Outcome<()> {
    let most = config::window_post_sectors_per_partition();
    if count == 0 {
        Err(bad_input("sectors: empty"))
    } else if kind == ProofKind::WindowPost && count > most {
        Err(bad_input(format!(
            "sectors: {count} sectors; a window-post partition at {} holds at most {most}",
            config::SECTOR_SIZE_NAME
        )))
    } else {
        Ok(())
    }
}

/// A porep-c2 job is all of the sector's partitions in one SNARK call (one at 2 KiB).
fn check_porep(input: &FilecoinInput) -> Outcome<Work> {
    let partitions = usize::from(config::porep_config().partitions);
    if input.partitions != partitions {
        return Err(bad_input(format!(
            "partitions: {}; a porep-c2 proof at {} has {partitions}",
            input.partitions,
            config::SECTOR_SIZE_NAME
        )));
    }
    let number = input
        .sector_number
        .ok_or_else(|| bad_input("sectorNumber: missing"))?;
    let path = input
        .c1_output
        .as_deref()
        .ok_or_else(|| bad_input("c1Output: missing"))?;
    let c1 = porep::read_c1(path, input.prover_id, number)?;
    Ok(Work::Porep {
        sector: SectorId::from(number),
        c1: Box::new(c1),
    })
}

/// The indices, in the sorted sector set of `count` sectors, of WinningPoSt's challenged
/// sectors; prover and verifier both derive them from the randomness and the prover id.
pub fn winning_challenged(
    config: &PoStConfig,
    randomness: &[u8; 32],
    count: usize,
    prover: ProverId,
) -> Outcome<Vec<usize>> {
    let indices =
        generate_winning_post_sector_challenge::<Tree>(config, randomness, count as u64, prover)?;
    Ok(indices.into_iter().map(|index| index as usize).collect())
}

fn run(job: Job, lane: Option<&Lane>) -> Outcome<()> {
    let Job {
        kind,
        prover_id,
        partition,
        work,
    } = job;
    call(lane, "stage synthesizing")?;
    let started = Instant::now();
    let vanilla = vanilla(work, prover_id)?;
    let synth_ms = millis(started);

    call(lane, "acquire")?;
    // bellperson synthesizes the circuit inside the SNARK call, so the phase held from here
    // includes the circuit's synthesis as well as the proof's multi-exponentiations.
    let started = Instant::now();
    let proof = snark(vanilla, prover_id, partition)?;
    let gpu_ms = millis(started);
    call(lane, "release-gpu")?;
    progress!(
        "{} partition {partition}: SNARK of {} bytes in {gpu_ms} ms",
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
    match lane {
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

/// The vanilla proofs: PoSt's merkle inclusion proofs of its sectors at their challenges;
/// PoRep's are in the C1 output already.
fn vanilla(work: Work, prover: ProverId) -> Outcome<Vanilla> {
    match work {
        Work::Post {
            config,
            randomness,
            sectors,
        } => {
            let started = Instant::now();
            let proofs = post_vanilla_proofs(&config, &randomness, &sectors, prover)?;
            progress!(
                "vanilla proofs of {} sectors in {} ms",
                sectors.len(),
                millis(started)
            );
            Ok(Vanilla::Post {
                config,
                randomness,
                proofs,
            })
        }
        Work::Porep { sector, c1 } => {
            progress!(
                "porep-c2: sector {}'s vanilla proofs are its C1 output",
                u64::from(sector)
            );
            Ok(Vanilla::Porep { sector, c1 })
        }
    }
}

fn post_vanilla_proofs(
    config: &PoStConfig,
    randomness: &[u8; 32],
    sectors: &[Sector],
    prover: ProverId,
) -> Outcome<Vec<FallbackPoStSectorProof<Tree>>> {
    let ids: Vec<SectorId> = sectors.iter().map(|sector| sector.id).collect();
    let challenges = generate_fallback_sector_challenges::<Tree>(config, randomness, &ids, prover)?;
    sectors
        .iter()
        .map(|sector| {
            let replica = sector.private_replica()?;
            let challenged = &challenges[&sector.id];
            Ok(generate_single_vanilla_proof::<Tree>(
                config, sector.id, &replica, challenged,
            )?)
        })
        .collect()
}

/// The Groth16 proof of the job's partition from its vanilla proofs.
fn snark(vanilla: Vanilla, prover: ProverId, partition: usize) -> Outcome<Vec<u8>> {
    match vanilla {
        Vanilla::Post {
            config,
            randomness,
            proofs,
        } => Ok(match config.typ {
            filecoin_proofs::PoStType::Window => {
                generate_single_window_post_with_vanilla::<Tree>(
                    &config,
                    &randomness,
                    prover,
                    proofs,
                    partition,
                )?
                .0
            }
            filecoin_proofs::PoStType::Winning => {
                generate_winning_post_with_vanilla::<Tree>(&config, &randomness, prover, proofs)?
            }
        }),
        Vanilla::Porep { sector, c1 } => porep::commit(*c1, prover, sector),
    }
}

fn millis(started: Instant) -> u64 {
    started.elapsed().as_millis() as u64
}
