//! PoRep C2: the SNARK over one sector's C1 output (the vanilla proofs made when it was sealed,
//! kept by `seal` as c1.json), and the chain's check of it.

use std::fs;
use std::path::{Path, PathBuf};

use filecoin_proofs::constants::DefaultTreeHasher;
use filecoin_proofs::types::{Commitment, ProverId, SealCommitPhase1Output, Ticket};
use filecoin_proofs::{seal_commit_phase2, verify_seal};
use serde::Deserialize;
use storage_proofs_core::sector::SectorId;
use storage_proofs_porep::stacked::generate_replica_id;

use crate::config::{self, Tree};
use crate::fail::{bad_input, Outcome};
use crate::hexio::{parse_32, to_hex};
use crate::sector::{file_error, parse_comm_r};

/// A porep-c2's sector as the job lists it: the commitments and randomness the chain checks
/// the proof against, and the C1 output it is made from.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PorepInput {
    pub number: u64,
    pub comm_r: String,
    pub comm_d: String,
    pub ticket: String,
    pub seed: String,
    pub c1_output: PathBuf,
}

/// A PoRep's public inputs: what the chain verifies a C2 proof against.
pub struct Statement {
    pub sector: SectorId,
    pub comm_r: Commitment,
    pub comm_d: Commitment,
    pub ticket: Ticket,
    pub seed: Ticket,
}

/// A checked C2 job: its statement, and the C1 output that proves it.
pub struct Porep {
    pub statement: Statement,
    pub c1: Box<SealCommitPhase1Output<Tree>>,
}

/// The statement of `sectors[index]` (its C1 output is not read).
pub fn statement(index: usize, input: &PorepInput) -> Outcome<Statement> {
    let field = |name: &str| format!("sectors[{index}].{name}");
    Ok(Statement {
        sector: SectorId::from(input.number),
        comm_r: parse_comm_r(&field("commR"), &input.comm_r)?,
        comm_d: parse_comm_r(&field("commD"), &input.comm_d)?,
        ticket: parse_32(&field("ticket"), &input.ticket)?,
        seed: parse_32(&field("seed"), &input.seed)?,
    })
}

/// Checks `sectors[0]` of a porep-c2 job of miner `miner`: its C1 output is the sector's (its
/// replica id is derived from the prover id, the sector, the ticket and comm_d) and was made
/// for the job's comm_r and seed.
pub fn check(input: &PorepInput, miner: u64) -> Outcome<Porep> {
    let statement = statement(0, input)?;
    let c1 = read_c1(&input.c1_output)?;
    let porep_id = config::porep_config().porep_id;
    let replica_id = generate_replica_id::<DefaultTreeHasher, _>(
        &config::prover_id(miner),
        input.number,
        &statement.ticket,
        statement.comm_d,
        &porep_id,
    );
    let path = input.c1_output.display();
    let differs = |what: &str, theirs: &[u8], ours: &[u8]| {
        bad_input(format!(
            "sectors[0].c1Output: {path} was made for {what} {}, the job states {}",
            to_hex(theirs),
            to_hex(ours)
        ))
    };
    if c1.comm_d != statement.comm_d {
        return Err(differs("commD", &c1.comm_d, &statement.comm_d));
    }
    if c1.ticket != statement.ticket {
        return Err(differs("ticket", &c1.ticket, &statement.ticket));
    }
    if c1.seed != statement.seed {
        return Err(differs("seed", &c1.seed, &statement.seed));
    }
    if c1.comm_r != statement.comm_r {
        return Err(differs("commR", &c1.comm_r, &statement.comm_r));
    }
    if replica_id != c1.replica_id {
        return Err(bad_input(format!(
            "sectors[0].c1Output: {path} was not sealed as sector {} of miner {miner} (its replica id differs)",
            input.number
        )));
    }
    Ok(Porep {
        statement,
        c1: Box::new(c1),
    })
}

fn read_c1(path: &Path) -> Outcome<SealCommitPhase1Output<Tree>> {
    let field = "sectors[0].c1Output";
    let text = fs::read_to_string(path).map_err(|error| file_error(field, path, &error))?;
    serde_json::from_str(&text).map_err(|error| {
        bad_input(format!(
            "{field}: {} is not a C1 output: {error}",
            path.display()
        ))
    })
}

/// The PoRep proof (all of a 2 KiB sector's partitions); filecoin-proofs verifies it before
/// returning it.
pub fn commit(porep: Porep, prover: ProverId) -> Outcome<Vec<u8>> {
    Ok(seal_commit_phase2::<Tree>(
        &config::porep_config(),
        *porep.c1,
        prover,
        porep.statement.sector,
    )?
    .proof)
}

/// The chain's check of a C2 proof.
pub fn holds(statement: &Statement, prover: ProverId, proof: &[u8]) -> Outcome<bool> {
    Ok(verify_seal::<Tree>(
        &config::porep_config(),
        statement.comm_r,
        statement.comm_d,
        prover,
        statement.sector,
        statement.ticket,
        statement.seed,
        proof,
    )?)
}
