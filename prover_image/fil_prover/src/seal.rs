//! `seal`: a test and demo fixture that seals 2 KiB sectors for PoSt (and keeps each one's C1
//! output for porep-c2), with piece data derived from the miner and the sector number. It
//! prints the sectors as a job of `--kind` lists them (window-post, winning-post: number, commR,
//! replica, cache; porep-c2: number, commR, commD, ticket, seed, c1Output).
//!
//! Each sector lives in `DIR/s-t0<miner>-<number>/`: `sealed` (the replica), `cache/` (p_aux,
//! t_aux, tree-r-last: what PoSt reads), `c1.json` (SealCommitPhase1Output) and `seal.json`
//! (the commitments, ticket and seed). `seal.json` is written last: a sector that has it is
//! complete and is reused; one without it is sealed again from scratch.

use std::fs::{self, File};
use std::io::{BufWriter, Cursor, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use filecoin_proofs::types::{
    PaddedBytesAmount, PieceInfo, Ticket, UnpaddedBytesAmount,
};
use filecoin_proofs::{
    add_piece, clear_cache, seal_commit_phase1, seal_pre_commit_phase1, seal_pre_commit_phase2,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use storage_proofs_core::sector::SectorId;

use crate::args::Flags;
use crate::config::{self, check_sector_size_flag, prover_id, ProofKind, Tree, SECTOR_SIZE};
use crate::fail::{bad_input, failed, Outcome};
use crate::hexio::to_hex;
use crate::progress;

/// The ticket (PreCommit randomness) every fixture sector is sealed with.
const TICKET: Ticket = [1; 32];
/// The seed (interactive PoRep randomness) of every fixture sector's C1.
const SEED: Ticket = [2; 32];
/// What a sealed sector's piece data is derived from, beside the miner and the sector number.
const PIECE_DOMAIN: &[u8] = b"kuzk-fil-prover piece";

/// What seal.json records.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SealRecord {
    miner: u64,
    number: u64,
    comm_r: String,
    comm_d: String,
    ticket: String,
    seed: String,
}

/// `seal --dir DIR --miner ID --first N --count K [--kind KIND] [--sector-size 2KiB]`.
pub fn command(args: &[String]) -> Outcome<()> {
    let flags = Flags::parse(
        "seal",
        args,
        &["dir", "miner", "first", "count", "kind", "sector-size"],
    )?;
    let kind = ProofKind::parse("--kind", flags.optional("kind").unwrap_or("window-post"))?;
    if kind == ProofKind::SnapUpdate {
        return Err(kind.unsupported(
            "--kind",
            "seal",
            "window-post, winning-post and porep-c2 (snap-update sectors come from update)",
        ));
    }
    let dir = PathBuf::from(flags.required("dir")?);
    let miner: u64 = flags.number("miner")?;
    let first: u64 = flags.number("first")?;
    let count: u64 = flags.number("count")?;
    check_sector_size_flag(&flags)?;
    let end = first
        .checked_add(count)
        .ok_or_else(|| bad_input("--first + --count is past the largest sector number"))?;
    fs::create_dir_all(&dir)
        .map_err(|error| bad_input(format!("--dir: cannot create {}: {error}", dir.display())))?;

    let listed = (first..end)
        .map(|number| Ok(listed(kind, miner, number, &seal_sector(&dir, miner, number)?)))
        .collect::<Outcome<Vec<_>>>()?;
    println!(
        "{}",
        serde_json::to_string(&listed).expect("the listing serializes")
    );
    Ok(())
}

/// The directory, under `seal`'s DIR, of sector `number` of `miner`.
pub fn sector_name(miner: u64, number: u64) -> String {
    format!("s-t0{miner}-{number}")
}

/// A sealed sector as a job of `kind` lists it (paths relative to DIR).
fn listed(kind: ProofKind, miner: u64, number: u64, record: &SealRecord) -> Value {
    let name = sector_name(miner, number);
    match kind {
        ProofKind::PorepC2 => json!({
            "number": number,
            "commR": record.comm_r,
            "commD": record.comm_d,
            "ticket": record.ticket,
            "seed": record.seed,
            "c1Output": format!("{name}/c1.json"),
        }),
        _ => json!({
            "number": number,
            "commR": record.comm_r,
            "replica": format!("{name}/sealed"),
            "cache": format!("{name}/cache"),
        }),
    }
}

/// Seals sector `number` of `miner` under `dir`, or reuses it if it is complete.
fn seal_sector(dir: &Path, miner: u64, number: u64) -> Outcome<SealRecord> {
    let sector_dir = dir.join(sector_name(miner, number));
    let record_path = sector_dir.join("seal.json");
    if record_path.is_file() {
        progress!(
            "sector {number}: already sealed in {}",
            sector_dir.display()
        );
        return read_record(&record_path);
    }
    let started = Instant::now();
    let record = seal_afresh(&sector_dir, miner, number)?;
    progress!(
        "sector {number}: sealed in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(record)
}

fn read_record(path: &Path) -> Outcome<SealRecord> {
    let field = path.display().to_string();
    let text = fs::read_to_string(path).map_err(|error| failed(format!("{field}: {error}")))?;
    serde_json::from_str(&text).map_err(|error| bad_input(format!("{field}: {error}")))
}

/// Seals into an empty `sector_dir`: add the piece, PreCommit 1 and 2, Commit 1, then drop the
/// files PoSt does not read (staged data, layers, tree-c, tree-d).
fn seal_afresh(sector_dir: &Path, miner: u64, number: u64) -> Outcome<SealRecord> {
    let io = |what: &str, error: std::io::Error| {
        failed(format!("{}: {what}: {error}", sector_dir.display()))
    };
    if sector_dir.exists() {
        fs::remove_dir_all(sector_dir).map_err(|e| io("cannot remove an unfinished seal", e))?;
    }
    let cache = sector_dir.join("cache");
    let staged = sector_dir.join("staged");
    let replica = sector_dir.join("sealed");
    fs::create_dir_all(&cache).map_err(|e| io("cannot create", e))?;
    File::create(&replica).map_err(|e| io("cannot create the replica", e))?;

    let piece = stage_piece(&staged, PIECE_DOMAIN, miner, number).map_err(|e| io("cannot stage the piece", e))?;
    let pieces = [piece];
    let porep = config::porep_config();
    let prover = prover_id(miner);
    let id = SectorId::from(number);
    let phase1 = seal_pre_commit_phase1::<_, _, _, Tree>(
        &porep, &cache, &staged, &replica, prover, id, TICKET, &pieces,
    )?;
    let pre_commit = seal_pre_commit_phase2(&porep, phase1, &cache, &replica)?;
    let c1 = seal_commit_phase1::<_, Tree>(
        &porep,
        &cache,
        &replica,
        prover,
        id,
        TICKET,
        SEED,
        pre_commit.clone(),
        &pieces,
    )?;
    write_json(&sector_dir.join("c1.json"), &c1).map_err(|e| io("cannot write c1.json", e))?;
    clear_cache(&cache)?;
    fs::remove_file(&staged).map_err(|e| io("cannot remove the staged piece", e))?;

    let record = SealRecord {
        miner,
        number,
        comm_r: to_hex(&pre_commit.comm_r),
        comm_d: to_hex(&pre_commit.comm_d),
        ticket: to_hex(&TICKET),
        seed: to_hex(&SEED),
    };
    write_json(&sector_dir.join("seal.json"), &record)
        .map_err(|e| io("cannot write seal.json", e))?;
    Ok(record)
}

/// Writes one piece filling the sector into `staged` (padded as sectors store data), its
/// bytes derived from `domain`, the miner and the sector number.
pub fn stage_piece(
    staged: &Path,
    domain: &[u8],
    miner: u64,
    number: u64,
) -> std::io::Result<PieceInfo> {
    let size = UnpaddedBytesAmount::from(PaddedBytesAmount(SECTOR_SIZE));
    let data = piece_data(domain, miner, number, size.0 as usize);
    let mut target = BufWriter::new(File::create(staged)?);
    let (piece, _) =
        add_piece(Cursor::new(data), &mut target, size, &[]).map_err(std::io::Error::other)?;
    target.flush()?;
    Ok(piece)
}

/// `len` bytes that depend only on the domain, the miner and the sector number: SHA-256 in
/// counter mode.
fn piece_data(domain: &[u8], miner: u64, number: u64, len: usize) -> Vec<u8> {
    (0u64..)
        .flat_map(|block| {
            Sha256::new()
                .chain_update(domain)
                .chain_update(miner.to_le_bytes())
                .chain_update(number.to_le_bytes())
                .chain_update(block.to_le_bytes())
                .finalize()
        })
        .take(len)
        .collect()
}

/// Writes `value` as JSON to `path` through a temporary file, so `path` is whole or absent.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let partial = path.with_extension("json.partial");
    let mut out = BufWriter::new(File::create(&partial)?);
    serde_json::to_writer(&mut out, value).map_err(std::io::Error::other)?;
    out.flush()?;
    fs::rename(&partial, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piece_data_is_deterministic_and_distinct() {
        let data = |domain: &[u8], number| piece_data(domain, 1000, number, 2032);
        assert_eq!(data(PIECE_DOMAIN, 1), data(PIECE_DOMAIN, 1));
        assert_ne!(data(PIECE_DOMAIN, 1), data(PIECE_DOMAIN, 2));
        assert_ne!(data(PIECE_DOMAIN, 1), data(b"another", 1));
        assert_eq!(data(PIECE_DOMAIN, 1).len(), 2032);
    }
}
