//! SnapDeals (snap-update): new data encoded into a sealed sector's replica, and the proof that
//! the new replica is the old one (the sector key) encoded with data of the stated comm_d.
//!
//! `update` is the test and demo fixture: for each sector `seal` made, it encodes piece data
//! derived from the miner and the sector number into `DIR/s-t0<miner>-<number>/update/`
//! (`sealed`, `cache/`) and records the commitments in `update.json`, written last (a sector
//! that has it is complete and is reused). The partition pod's side is `check`, `vanilla` and
//! `snark`; `holds` is the chain's verifier.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::Instant;

use filecoin_proofs::types::{Commitment, SectorUpdateConfig};
use filecoin_proofs::{
    encode_into, generate_empty_sector_update_proof_with_vanilla, generate_partition_proofs,
    verify_empty_sector_update_proof,
};
use serde::{Deserialize, Serialize};
use storage_proofs_update::vanilla::PartitionProof;

use crate::args::Flags;
use crate::config::{self, check_sector_size_flag, Tree, SECTOR_SIZE};
use crate::fail::{bad_input, failed, Outcome};
use crate::hexio::to_hex;
use crate::progress;
use crate::seal;
use crate::sector::{self, parse_comm_r, Names};

/// A snap-update's sector as the job lists it: the sector key (the replica as sealed) and its
/// cache, the updated replica and its cache, and the three commitments the chain checks.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateInput {
    pub number: u64,
    #[serde(rename = "commROld")]
    pub comm_r_old: String,
    pub comm_r: String,
    pub comm_d: String,
    pub replica: PathBuf,
    pub cache: PathBuf,
    pub sector_key: PathBuf,
    pub sector_key_cache: PathBuf,
}

/// A checked update: both replicas agree with their caches and commitments.
pub struct Update {
    number: u64,
    pub comm_r_old: Commitment,
    pub comm_r_new: Commitment,
    pub comm_d_new: Commitment,
    replica: PathBuf,
    cache: PathBuf,
    sector_key: PathBuf,
    sector_key_cache: PathBuf,
}

/// The vanilla proofs of an update, one per partition (one at 2 KiB).
pub type Vanilla = Vec<PartitionProof<Tree>>;

/// Checks `sectors[0]` of a snap-update job.
pub fn check(input: &UpdateInput) -> Outcome<Update> {
    let field = "sectors[0]";
    let names = |comm_r: &str, replica: &str, cache: &str| Names {
        comm_r: format!("{field}.{comm_r}"),
        replica: format!("{field}.{replica}"),
        cache: format!("{field}.{cache}"),
    };
    let comm_r_old = sector::check_sealed(
        &names("commROld", "sectorKey", "sectorKeyCache"),
        &input.comm_r_old,
        &input.sector_key,
        &input.sector_key_cache,
    )?;
    let comm_r_new = sector::check_sealed(
        &names("commR", "replica", "cache"),
        &input.comm_r,
        &input.replica,
        &input.cache,
    )?;
    let comm_d_new = parse_comm_r(&format!("{field}.commD"), &input.comm_d)?;
    Ok(Update {
        number: input.number,
        comm_r_old,
        comm_r_new,
        comm_d_new,
        replica: input.replica.clone(),
        cache: input.cache.clone(),
        sector_key: input.sector_key.clone(),
        sector_key_cache: input.sector_key_cache.clone(),
    })
}

fn update_config() -> SectorUpdateConfig {
    SectorUpdateConfig::from_porep_config(&config::porep_config())
}

/// The vanilla proofs: merkle inclusion proofs of both replicas and of the new data at every
/// challenge (CPU).
pub fn vanilla(update: &Update) -> Outcome<Vanilla> {
    progress!(
        "snap-update: sector {}: proving {} -> {}",
        update.number,
        to_hex(&update.comm_r_old),
        to_hex(&update.comm_r_new)
    );
    Ok(generate_partition_proofs::<Tree>(
        update_config(),
        update.comm_r_old,
        update.comm_r_new,
        update.comm_d_new,
        &update.sector_key,
        &update.sector_key_cache,
        &update.replica,
        &update.cache,
    )?)
}

/// The update's Groth16 proof, all partitions in one call.
pub fn snark(update: &Update, vanilla: Vanilla) -> Outcome<Vec<u8>> {
    Ok(generate_empty_sector_update_proof_with_vanilla::<Tree>(
        &config::porep_config(),
        vanilla,
        update.comm_r_old,
        update.comm_r_new,
        update.comm_d_new,
    )?
    .0)
}

/// The chain's check of an update proof.
pub fn holds(
    proof: &[u8],
    comm_r_old: Commitment,
    comm_r_new: Commitment,
    comm_d_new: Commitment,
) -> Outcome<bool> {
    Ok(verify_empty_sector_update_proof::<Tree>(
        &config::porep_config(),
        proof,
        comm_r_old,
        comm_r_new,
        comm_d_new,
    )?)
}

/// What update.json records.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateRecord {
    #[serde(rename = "commROld")]
    comm_r_old: String,
    comm_r: String,
    comm_d: String,
}

/// One updated sector in the listing `update` prints: a snap-update job's sector entry (paths
/// relative to DIR).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Listed {
    number: u64,
    #[serde(rename = "commROld")]
    comm_r_old: String,
    comm_r: String,
    comm_d: String,
    replica: String,
    cache: String,
    sector_key: String,
    sector_key_cache: String,
}

/// `update --dir DIR --miner ID --first N --count K [--sector-size 2KiB]`: the sectors must be
/// sealed (`seal`) first.
pub fn command(args: &[String]) -> Outcome<()> {
    let flags = Flags::parse(
        "update",
        args,
        &["dir", "miner", "first", "count", "sector-size"],
    )?;
    let dir = PathBuf::from(flags.required("dir")?);
    let miner: u64 = flags.number("miner")?;
    let first: u64 = flags.number("first")?;
    let count: u64 = flags.number("count")?;
    check_sector_size_flag(&flags)?;
    let end = first
        .checked_add(count)
        .ok_or_else(|| bad_input("--first + --count is past the largest sector number"))?;
    let listed = (first..end)
        .map(|number| update_sector(&dir, miner, number))
        .collect::<Outcome<Vec<_>>>()?;
    println!(
        "{}",
        serde_json::to_string(&listed).expect("the listing serializes")
    );
    Ok(())
}

fn update_sector(dir: &Path, miner: u64, number: u64) -> Outcome<Listed> {
    let name = seal::sector_name(miner, number);
    let sector_dir = dir.join(&name);
    if !sector_dir.join("seal.json").is_file() {
        return Err(bad_input(format!(
            "--dir: sector {number} of miner {miner} is not sealed in {} (run seal first)",
            dir.display()
        )));
    }
    let record_path = sector_dir.join("update.json");
    let record = if record_path.is_file() {
        progress!("sector {number}: already updated in {}", sector_dir.display());
        let text = fs::read_to_string(&record_path)
            .map_err(|error| failed(format!("{}: {error}", record_path.display())))?;
        serde_json::from_str(&text)
            .map_err(|error| bad_input(format!("{}: {error}", record_path.display())))?
    } else {
        let started = Instant::now();
        let record = encode_afresh(&sector_dir, miner, number)?;
        progress!(
            "sector {number}: updated in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        record
    };
    Ok(Listed {
        number,
        comm_r_old: record.comm_r_old,
        comm_r: record.comm_r,
        comm_d: record.comm_d,
        replica: format!("{name}/update/sealed"),
        cache: format!("{name}/update/cache"),
        sector_key: format!("{name}/sealed"),
        sector_key_cache: format!("{name}/cache"),
    })
}

/// Encodes new piece data into a fresh `update/` beside the sealed sector.
fn encode_afresh(sector_dir: &Path, miner: u64, number: u64) -> Outcome<UpdateRecord> {
    let update_dir = sector_dir.join("update");
    let io = |what: &str, error: std::io::Error| {
        failed(format!("{}: {what}: {error}", update_dir.display()))
    };
    if update_dir.exists() {
        fs::remove_dir_all(&update_dir).map_err(|e| io("cannot remove an unfinished update", e))?;
    }
    let cache = update_dir.join("cache");
    let staged = update_dir.join("staged");
    let replica = update_dir.join("sealed");
    fs::create_dir_all(&cache).map_err(|e| io("cannot create", e))?;
    File::create(&replica)
        .and_then(|file| file.set_len(SECTOR_SIZE))
        .map_err(|e| io("cannot create the replica", e))?;
    let piece = seal::stage_piece(&staged, b"kuzk-fil-prover update", miner, number)
        .map_err(|e| io("cannot stage the piece", e))?;
    let sector_key = sector_dir.join("sealed");
    let sector_key_cache = sector_dir.join("cache");
    let comm_r_old = sector::comm_r_of_cache("sector key cache", &sector_key_cache)?;
    let encoded = encode_into::<Tree>(
        &update_config(),
        &replica,
        &cache,
        &sector_key,
        &sector_key_cache,
        &staged,
        &[piece],
    )?;
    fs::remove_file(&staged).map_err(|e| io("cannot remove the staged piece", e))?;
    let record = UpdateRecord {
        comm_r_old: to_hex(&comm_r_old),
        comm_r: to_hex(&encoded.comm_r_new),
        comm_d: to_hex(&encoded.comm_d_new),
    };
    seal::write_json(&sector_dir.join("update.json"), &record)
        .map_err(|e| io("cannot write update.json", e))?;
    Ok(record)
}

