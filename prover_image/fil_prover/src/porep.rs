//! PoRep C2: the SNARK over one sector's C1 output (the vanilla proofs made when it was sealed,
//! kept by `seal` as c1.json).

use std::fs;
use std::path::Path;

use filecoin_proofs::constants::DefaultTreeHasher;
use filecoin_proofs::seal_commit_phase2;
use filecoin_proofs::types::{ProverId, SealCommitPhase1Output};
use storage_proofs_core::sector::SectorId;
use storage_proofs_porep::stacked::generate_replica_id;

use crate::config::{self, Tree};
use crate::fail::{bad_input, Outcome};
use crate::sector::file_error;

/// The C1 output of sector `number` of miner `miner`: read from `path`, and checked to be that
/// sector's (its replica id is derived from the prover id, the sector, the ticket and comm_d).
pub fn read_c1(path: &Path, miner: u64, number: u64) -> Outcome<SealCommitPhase1Output<Tree>> {
    let text = fs::read_to_string(path).map_err(|error| file_error("c1Output", path, &error))?;
    let c1: SealCommitPhase1Output<Tree> = serde_json::from_str(&text).map_err(|error| {
        bad_input(format!(
            "c1Output: {} is not a C1 output: {error}",
            path.display()
        ))
    })?;
    let porep_id = config::porep_config().porep_id;
    let replica_id = generate_replica_id::<DefaultTreeHasher, _>(
        &config::prover_id(miner),
        number,
        &c1.ticket,
        c1.comm_d,
        &porep_id,
    );
    if replica_id != c1.replica_id {
        return Err(bad_input(format!(
            "c1Output: {} was not sealed as sector {number} of miner {miner} (its replica id differs)",
            path.display()
        )));
    }
    Ok(c1)
}

/// The PoRep proof (all of a 2 KiB sector's partitions); filecoin-proofs verifies it before
/// returning it.
pub fn commit(
    c1: SealCommitPhase1Output<Tree>,
    prover: ProverId,
    sector: SectorId,
) -> Outcome<Vec<u8>> {
    Ok(seal_commit_phase2::<Tree>(&config::porep_config(), c1, prover, sector)?.proof)
}
