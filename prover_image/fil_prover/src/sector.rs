//! A sealed sector as PoSt reads it: its replica file, its cache directory and its comm_r,
//! checked against each other before any proving.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use blstrs::Scalar;
use filecoin_hashers::{HashFunction, Hasher};
use filecoin_proofs::constants::{DefaultTreeDomain, DefaultTreeHasher};
use filecoin_proofs::types::{Commitment, PersistentAux, PrivateReplicaInfo, StoreConfig};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use storage_proofs_core::cache_key::CacheKey;
use storage_proofs_core::sector::SectorId;

use crate::config::{Tree, SECTOR_SIZE, SECTOR_SIZE_NAME};
use crate::fail::{bad_input, Failure, Outcome};
use crate::hexio::{parse_32, to_hex};

/// A PoSt's sector as the job lists it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SectorInput {
    pub number: u64,
    pub comm_r: String,
    pub replica: PathBuf,
    pub cache: PathBuf,
}

/// A sector whose replica, cache and comm_r were found to agree.
#[derive(Clone)]
pub struct Sector {
    pub id: SectorId,
    pub comm_r: Commitment,
    pub replica: PathBuf,
    pub cache: PathBuf,
}

impl Sector {
    /// The replica as filecoin-proofs proves it.
    pub fn private_replica(&self) -> anyhow::Result<PrivateReplicaInfo<Tree>> {
        PrivateReplicaInfo::new(self.replica.clone(), self.comm_r, self.cache.clone())
    }
}

/// `sectors[index]` read as the kind's entry `T`; bad input naming the entry otherwise.
pub fn entry<T: DeserializeOwned>(index: usize, value: &Value) -> Outcome<T> {
    T::deserialize(value).map_err(|error| bad_input(format!("sectors[{index}]: {error}")))
}

/// Checks `sectors[index]`: its comm_r is 32 bytes of hex, its replica a file of the sector
/// size, its cache a directory with p_aux and tree-r-last, and comm_r is the one p_aux makes.
pub fn check(index: usize, input: &SectorInput) -> Outcome<Sector> {
    let field = format!("sectors[{index}]");
    let names = Names {
        comm_r: format!("{field}.commR"),
        replica: format!("{field}.replica"),
        cache: format!("{field}.cache"),
    };
    let comm_r = check_sealed(&names, &input.comm_r, &input.replica, &input.cache)?;
    Ok(Sector {
        id: SectorId::from(input.number),
        comm_r,
        replica: input.replica.clone(),
        cache: input.cache.clone(),
    })
}

/// The fields a sealed replica is named by in the job, for messages.
pub struct Names {
    pub comm_r: String,
    pub replica: String,
    pub cache: String,
}

/// Checks one sealed replica: `comm_r` is 32 bytes of hex, `replica` a file of the sector
/// size, `cache` a directory with p_aux and tree-r-last, and comm_r is the one p_aux makes.
/// Returns the comm_r.
pub fn check_sealed(
    names: &Names,
    comm_r: &str,
    replica: &Path,
    cache: &Path,
) -> Outcome<Commitment> {
    let comm_r = parse_comm_r(&names.comm_r, comm_r)?;
    check_replica(&names.replica, replica)?;
    check_directory(&names.cache, cache)?;
    let tree_r_last = StoreConfig::data_path(cache, &CacheKey::CommRLastTree.to_string());
    check_exists(&names.cache, &tree_r_last)?;
    let actual = comm_r_of_cache(&names.cache, cache)?;
    if actual != comm_r {
        return Err(bad_input(format!(
            "{} {} does not match the replica's {} (cache p_aux)",
            names.comm_r,
            to_hex(&comm_r),
            to_hex(&actual)
        )));
    }
    Ok(comm_r)
}

/// A comm_r (or comm_d) given as `0x<64 hex>`: 32 bytes that are a non-zero field element
/// (little-endian), as filecoin-proofs requires of every commitment.
pub fn parse_comm_r(field: &str, text: &str) -> Outcome<Commitment> {
    let bytes = parse_32(field, text)?;
    if bytes == [0; 32] {
        return Err(bad_input(format!(
            "{field}: {text} is zero, which no sector's commitment is"
        )));
    }
    if Scalar::from_bytes_le(&bytes).is_none().into() {
        return Err(bad_input(format!(
            "{field}: {text} is not a BLS12-381 scalar (little-endian)"
        )));
    }
    Ok(bytes)
}

/// Checks that the sectors are listed by number, ascending, each once.
pub fn check_order(field: &str, numbers: impl Iterator<Item = u64>) -> Outcome<()> {
    let mut previous: Option<u64> = None;
    for number in numbers {
        if let Some(before) = previous.filter(|&before| before >= number) {
            return Err(bad_input(format!(
                "{field}: not sorted by number, each once (sector {number} after {before})"
            )));
        }
        previous = Some(number);
    }
    Ok(())
}

/// The comm_r that a sector's cache records: H(comm_c || comm_r_last), from p_aux, as
/// filecoin-proofs computes it when sealing (Poseidon over the two field elements).
pub fn comm_r_of_cache(field: &str, cache: &Path) -> Outcome<Commitment> {
    let path = cache.join(CacheKey::PAux.to_string());
    let bytes = fs::read(&path).map_err(|error| file_error(field, &path, &error))?;
    let aux: PersistentAux<DefaultTreeDomain> = bincode::deserialize(&bytes).map_err(|error| {
        bad_input(format!(
            "{field}: {} is not a p_aux file: {error}",
            path.display()
        ))
    })?;
    let comm_r = <DefaultTreeHasher as Hasher>::Function::hash2(&aux.comm_c, &aux.comm_r_last);
    let mut commitment = [0u8; 32];
    commitment.copy_from_slice(comm_r.as_ref());
    Ok(commitment)
}

fn check_replica(field: &str, path: &Path) -> Outcome<()> {
    let metadata = fs::metadata(path).map_err(|error| file_error(field, path, &error))?;
    if !metadata.is_file() {
        return Err(bad_input(format!(
            "{field}: {} is not a file",
            path.display()
        )));
    }
    if metadata.len() != SECTOR_SIZE {
        return Err(bad_input(format!(
            "{field}: {} has {} bytes; a {SECTOR_SIZE_NAME} replica has {SECTOR_SIZE}",
            path.display(),
            metadata.len()
        )));
    }
    Ok(())
}

fn check_directory(field: &str, path: &Path) -> Outcome<()> {
    let metadata = fs::metadata(path).map_err(|error| match error.kind() {
        ErrorKind::NotFound => bad_input(format!("{field}: {}: no such directory", path.display())),
        _ => file_error(field, path, &error),
    })?;
    if metadata.is_dir() {
        Ok(())
    } else {
        Err(bad_input(format!(
            "{field}: {} is not a directory",
            path.display()
        )))
    }
}

fn check_exists(field: &str, path: &Path) -> Outcome<()> {
    fs::metadata(path)
        .map(|_| ())
        .map_err(|error| file_error(field, path, &error))
}

/// A file that cannot be read, as bad input: `field: path: no such file`.
pub fn file_error(field: &str, path: &Path, error: &std::io::Error) -> Failure {
    let what = match error.kind() {
        ErrorKind::NotFound => "no such file".to_string(),
        _ => error.to_string(),
    };
    bad_input(format!("{field}: {}: {what}", path.display()))
}
