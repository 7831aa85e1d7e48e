//! What each proof kind is proven with: the sector size, the filecoin-proofs configurations
//! and the identities (prover id, PoRep id) as Lotus derives them.

use filecoin_proofs::constants::{
    SectorShape2KiB, SECTOR_SIZE_2_KIB, WINDOW_POST_CHALLENGE_COUNT, WINDOW_POST_SECTOR_COUNT,
    WINNING_POST_CHALLENGE_COUNT, WINNING_POST_SECTOR_COUNT,
};
use filecoin_proofs::types::{PoRepConfig, PoStConfig, ProverId, SectorSize};
use filecoin_proofs::PoStType;
use storage_proofs_core::api_version::ApiVersion;

use crate::args::Flags;
use crate::fail::{bad_input, Failure, Outcome};

/// The only sector size this binary proves.
pub const SECTOR_SIZE: u64 = SECTOR_SIZE_2_KIB;
pub const SECTOR_SIZE_NAME: &str = "2KiB";

/// The merkle tree shape of a 2 KiB sector.
pub type Tree = SectorShape2KiB;

/// The backend named in every result: the CUDA build (the `cuda` feature; it proves on the CPU
/// where no GPU is) or the CPU one.
#[cfg(feature = "cuda")]
pub const BACKEND: &str = "filecoin-proofs 19.1.0 (cuda build)";
#[cfg(not(feature = "cuda"))]
pub const BACKEND: &str = "filecoin-proofs 19.1.0 (cpu)";

/// Lotus's RegisteredSealProof::StackedDrg2KiBV1_1, the PoRep sealed and proven here.
const REGISTERED_SEAL_PROOF_2KIB_V1_1: u64 = 5;

/// The proof kinds of kuzk's ProofJob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProofKind {
    WindowPost,
    WinningPost,
    PorepC2,
    SnapUpdate,
}

impl ProofKind {
    pub const ALL: [ProofKind; 4] = [
        ProofKind::WindowPost,
        ProofKind::WinningPost,
        ProofKind::PorepC2,
        ProofKind::SnapUpdate,
    ];

    /// The kind `text` names; bad input naming `field` otherwise.
    pub fn parse(field: &str, text: &str) -> Outcome<ProofKind> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|kind| kind.name()).collect();
                bad_input(format!(
                    "{field}: unknown proof kind {text:?}; expected one of {}",
                    names.join(", ")
                ))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            ProofKind::WindowPost => "window-post",
            ProofKind::WinningPost => "winning-post",
            ProofKind::PorepC2 => "porep-c2",
            ProofKind::SnapUpdate => "snap-update",
        }
    }

    /// The PoSt configuration of a PoSt kind.
    pub fn post_config(self) -> Option<PoStConfig> {
        match self {
            ProofKind::WindowPost => Some(window_post_config()),
            ProofKind::WinningPost => Some(winning_post_config()),
            ProofKind::PorepC2 | ProofKind::SnapUpdate => None,
        }
    }

    /// Bad input: `command` does not do this kind, only the `supported` ones.
    pub fn unsupported(self, field: &str, command: &str, supported: &str) -> Failure {
        bad_input(format!(
            "{field}: {command} does not support {}; it supports {supported}",
            self.name()
        ))
    }
}

/// Checks the `--sector-size` flag of `flags` (2KiB where it is absent).
pub fn check_sector_size_flag(flags: &Flags) -> Outcome<()> {
    let size = flags.optional("sector-size").unwrap_or(SECTOR_SIZE_NAME);
    check_sector_size("--sector-size", size)
}

/// Checks a sector size given as `2KiB` or in bytes (`2048`).
pub fn check_sector_size(field: &str, text: &str) -> Outcome<()> {
    if text == SECTOR_SIZE_NAME || text.parse::<u64>() == Ok(SECTOR_SIZE) {
        Ok(())
    } else {
        Err(unsupported_sector_size(field, text))
    }
}

/// Checks a sector size given in bytes.
pub fn check_sector_bytes(field: &str, bytes: u64) -> Outcome<()> {
    if bytes == SECTOR_SIZE {
        Ok(())
    } else {
        Err(unsupported_sector_size(field, &bytes.to_string()))
    }
}

fn unsupported_sector_size(field: &str, text: &str) -> Failure {
    bad_input(format!(
        "{field}: sector size {text} is not supported; only {SECTOR_SIZE_NAME} ({SECTOR_SIZE} bytes) is"
    ))
}

/// Sectors per WindowPoSt partition at 2 KiB.
pub fn window_post_sectors_per_partition() -> usize {
    *WINDOW_POST_SECTOR_COUNT
        .read()
        .expect("WINDOW_POST_SECTOR_COUNT poisoned")
        .get(&SECTOR_SIZE)
        .expect("2 KiB is a supported sector size")
}

/// WindowPoSt as Lotus runs it today (RegisteredPoStProof StackedDrgWindow2KiBV1_2, API 1.2.0).
/// In API 1.2.0 a sector's challenges do not depend on its position in the whole sector list,
/// so one partition's proof is made from that partition's sectors alone.
pub fn window_post_config() -> PoStConfig {
    PoStConfig {
        sector_size: SectorSize(SECTOR_SIZE),
        challenge_count: WINDOW_POST_CHALLENGE_COUNT,
        sector_count: window_post_sectors_per_partition(),
        typ: PoStType::Window,
        priority: false,
        api_version: ApiVersion::V1_2_0,
    }
}

/// WinningPoSt as Lotus runs it (RegisteredPoStProof StackedDrgWinning2KiBV1, API 1.0.0): one
/// challenged sector out of the set, one partition. It must not be API 1.2.0: there the
/// verifier gives all of the circuit's per-challenge sectors the same challenge index, while
/// the prover numbers them, so no WinningPoSt made at 1.2.0 verifies.
pub fn winning_post_config() -> PoStConfig {
    PoStConfig {
        sector_size: SectorSize(SECTOR_SIZE),
        challenge_count: WINNING_POST_CHALLENGE_COUNT,
        sector_count: WINNING_POST_SECTOR_COUNT,
        typ: PoStType::Winning,
        priority: false,
        api_version: ApiVersion::V1_0_0,
    }
}

/// The PoRep of a 2 KiB sector as Lotus seals it (StackedDrg2KiBV1_1, API 1.1.0): the PoRep id
/// is the registered proof's number, little-endian, in 32 bytes.
pub fn porep_config() -> PoRepConfig {
    let mut porep_id = [0u8; 32];
    porep_id[..8].copy_from_slice(&REGISTERED_SEAL_PROOF_2KIB_V1_1.to_le_bytes());
    PoRepConfig::new_groth16(SECTOR_SIZE, porep_id, ApiVersion::V1_1_0)
}

/// The prover id of miner actor `miner`, as Lotus makes it (ffiwrapper's toProverID): the
/// payload of the ID address f0<miner>, i.e. the miner id as an unsigned LEB128 varint,
/// zero-padded to 32 bytes. It is always a valid field element (at most 10 bytes are set).
pub fn prover_id(miner: u64) -> ProverId {
    let mut id = [0u8; 32];
    let mut rest = miner;
    for byte in id.iter_mut() {
        *byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            break;
        }
        *byte |= 0x80;
    }
    id
}

/// Randomness masked into the BLS12-381 scalar field as Lotus does before proving and
/// verifying: the top two bits of the last byte are cleared.
pub fn field_randomness(mut randomness: [u8; 32]) -> [u8; 32] {
    randomness[31] &= 0x3f;
    randomness
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prover_id_is_the_varint_of_the_miner_id() {
        assert_eq!(prover_id(0)[..2], [0, 0]);
        assert_eq!(prover_id(1000)[..3], [0xe8, 0x07, 0]);
        assert_eq!(prover_id(u64::MAX)[9..11], [0x01, 0]);
    }

    #[test]
    fn randomness_loses_its_top_two_bits() {
        assert_eq!(field_randomness([0xff; 32])[31], 0x3f);
        assert_eq!(field_randomness([0xff; 32])[30], 0xff);
    }
}
