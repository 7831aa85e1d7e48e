//! WindowPoSt and WinningPoSt: a partition's sectors checked, their vanilla proofs (merkle
//! inclusion proofs at the challenges, CPU) and the SNARK over them.

use filecoin_proofs::types::{FallbackPoStSectorProof, PoStConfig, ProverId};
use filecoin_proofs::{
    generate_fallback_sector_challenges, generate_single_vanilla_proof,
    generate_single_window_post_with_vanilla, generate_winning_post_sector_challenge,
    generate_winning_post_with_vanilla, PoStType,
};
use serde_json::Value;
use storage_proofs_core::sector::SectorId;

use crate::config::{self, field_randomness, ProofKind, Tree};
use crate::fail::{bad_input, Outcome};
use crate::hexio::parse_32;
use crate::progress;
use crate::sector::{self, Sector, SectorInput};

/// A checked PoSt partition: the sectors proven (a WindowPoSt partition's, or WinningPoSt's
/// challenged one).
pub struct Post {
    pub config: PoStConfig,
    pub randomness: [u8; 32],
    pub sectors: Vec<Sector>,
}

/// The vanilla proofs of a PoSt partition.
pub type Vanilla = Vec<FallbackPoStSectorProof<Tree>>;

/// Checks a PoSt partition's inputs: the randomness and the sectors, of which a WinningPoSt
/// reads only its challenged ones.
pub fn check(
    kind: ProofKind,
    config: PoStConfig,
    prover: ProverId,
    randomness: Option<&str>,
    entries: &[Value],
) -> Outcome<Post> {
    let randomness = randomness.ok_or_else(|| bad_input("randomness: missing"))?;
    let randomness = field_randomness(parse_32("randomness", randomness)?);
    check_sector_count(kind, entries.len())?;
    let inputs = entries
        .iter()
        .enumerate()
        .map(|(index, entry)| sector::entry::<SectorInput>(index, entry))
        .collect::<Outcome<Vec<_>>>()?;
    sector::check_order("sectors", inputs.iter().map(|s| s.number))?;
    // A WinningPoSt reads only its challenged sectors: the rest of the set is checked by
    // nothing but its order, so a large set costs no file access.
    let proven: Vec<usize> = if kind == ProofKind::WinningPost {
        let challenged = winning_challenged(&config, &randomness, inputs.len(), prover)?;
        progress!(
            "winning-post: challenged sector index {challenged:?} of {}",
            inputs.len()
        );
        challenged
    } else {
        (0..inputs.len()).collect()
    };
    let sectors = proven
        .into_iter()
        .map(|index| sector::check(index, &inputs[index]))
        .collect::<Outcome<Vec<_>>>()?;
    Ok(Post {
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

/// The vanilla proofs: each sector's merkle inclusion proofs at its challenges.
pub fn vanilla(post: &Post, prover: ProverId) -> Outcome<Vanilla> {
    let ids: Vec<SectorId> = post.sectors.iter().map(|sector| sector.id).collect();
    let challenges =
        generate_fallback_sector_challenges::<Tree>(&post.config, &post.randomness, &ids, prover)?;
    post.sectors
        .iter()
        .map(|sector| {
            let replica = sector.private_replica()?;
            let challenged = &challenges[&sector.id];
            Ok(generate_single_vanilla_proof::<Tree>(
                &post.config,
                sector.id,
                &replica,
                challenged,
            )?)
        })
        .collect()
}

/// The Groth16 proof of partition `partition` from its vanilla proofs.
pub fn snark(
    post: &Post,
    vanilla: Vanilla,
    prover: ProverId,
    partition: usize,
) -> Outcome<Vec<u8>> {
    let Post {
        config, randomness, ..
    } = post;
    Ok(match config.typ {
        PoStType::Window => {
            generate_single_window_post_with_vanilla::<Tree>(
                config, randomness, prover, vanilla, partition,
            )?
            .0
        }
        PoStType::Winning => {
            generate_winning_post_with_vanilla::<Tree>(config, randomness, prover, vanilla)?
        }
    })
}
