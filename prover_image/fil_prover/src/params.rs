//! Groth16 parameters: the files filecoin-proofs reads for each proof kind, and `params`, which
//! makes them the way upstream's paramcache does (a random setup from OsRng).
//!
//! filecoin-proofs never makes parameters itself: it reads them from the directory
//! `FIL_PROOFS_PARAMETER_CACHE` names, by production file names. Parameters made here carry
//! those names with other contents, so they must live in a directory of their own.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bellperson::Circuit;
use blstrs::Scalar as Fr;
use filecoin_proofs::constants::DefaultPieceHasher;
use filecoin_proofs::parameters::{
    public_params, window_post_public_params, winning_post_public_params,
};
use rand::rngs::OsRng;
use storage_proofs_core::compound_proof::CompoundProof;
use storage_proofs_core::parameter_cache::{
    parameter_cache_metadata_path, parameter_cache_params_path, parameter_cache_verifying_key_path,
    CacheableParameters, ParameterSetMetadata,
};
use storage_proofs_porep::stacked::{StackedCircuit, StackedCompound, StackedDrg};
use storage_proofs_post::fallback::{FallbackPoSt, FallbackPoStCircuit, FallbackPoStCompound};
use storage_proofs_update::{
    EmptySectorUpdate, EmptySectorUpdateCircuit, EmptySectorUpdateCompound,
};

use crate::args::{env_required, Flags};
use crate::config::{self, check_sector_size_flag, ProofKind, Tree};
use crate::fail::{bad_input, failed, Outcome};
use crate::progress;

/// The environment variable naming the parameter directory, read by filecoin-proofs itself.
pub const CACHE_ENV: &str = "FIL_PROOFS_PARAMETER_CACHE";

/// `params --kind KIND [--sector-size 2KiB]`.
pub fn command(args: &[String]) -> Outcome<()> {
    let flags = Flags::parse("params", args, &["kind", "sector-size"])?;
    let kind = ProofKind::parse("--kind", flags.required("kind")?)?;
    check_sector_size_flag(&flags)?;
    let target = PathBuf::from(env_required(CACHE_ENV)?);
    fs::create_dir_all(&target).map_err(|error| {
        bad_input(format!(
            "{CACHE_ENV}: cannot create {}: {error}",
            target.display()
        ))
    })?;

    // filecoin-proofs reads CACHE_ENV once, on first use, so nothing above may call into it:
    // pointing CACHE_ENV at a staging directory makes the library write there, and each
    // finished file is then renamed into place. An interrupted run leaves its staging
    // directory, never a half-written file under a name the library reads.
    let staging = target.join(format!(".staging-{}-{}", kind.name(), std::process::id()));
    std::env::set_var(CACHE_ENV, &staging);
    let staged = files(kind)?;
    let finished: Vec<PathBuf> = staged
        .iter()
        .map(|file| target.join(file_name(file)))
        .collect();
    if finished.iter().all(|file| file.is_file()) {
        progress!(
            "{} parameters for {} are already in {}",
            kind.name(),
            config::SECTOR_SIZE_NAME,
            target.display()
        );
        return Ok(());
    }

    let result = generate_into(kind, &staging, &staged, &finished);
    // Best effort: the staging directory holds nothing worth keeping once the files moved.
    let _ = fs::remove_dir_all(&staging);
    result
}

fn generate_into(
    kind: ProofKind,
    staging: &Path,
    staged: &[PathBuf],
    finished: &[PathBuf],
) -> Outcome<()> {
    fs::create_dir_all(staging)
        .map_err(|error| failed(format!("cannot create {}: {error}", staging.display())))?;
    progress!(
        "generating {} parameters for {} (random setup)",
        kind.name(),
        config::SECTOR_SIZE_NAME
    );
    let started = Instant::now();
    generate(kind)?;
    for (from, to) in staged.iter().zip(finished) {
        fs::rename(from, to).map_err(|error| {
            failed(format!(
                "cannot move {} to {}: {error}",
                from.display(),
                to.display()
            ))
        })?;
        println!("{}", to.display());
    }
    progress!(
        "{} parameters made in {:.1} s",
        kind.name(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The parameter files filecoin-proofs reads for `kind`, in the directory `CACHE_ENV` names:
/// the Groth16 parameters, the verifying key and the metadata.
pub fn files(kind: ProofKind) -> Outcome<Vec<PathBuf>> {
    let id = identifier(kind)?;
    Ok(vec![
        parameter_cache_params_path(&id),
        parameter_cache_verifying_key_path(&id),
        parameter_cache_metadata_path(&id),
    ])
}

/// Checks that the parameter files of `kind` are present; bad input naming the first one
/// missing otherwise.
pub fn require(kind: ProofKind) -> Outcome<()> {
    env_required(CACHE_ENV)?;
    match files(kind)?.into_iter().find(|file| !file.is_file()) {
        None => Ok(()),
        Some(missing) => Err(bad_input(format!(
            "{}: no such parameters file (run `kuzk-fil-prover params --kind {}`)",
            missing.display(),
            kind.name()
        ))),
    }
}

fn file_name(path: &Path) -> &std::ffi::OsStr {
    path.file_name()
        .expect("a parameter file path ends in a file name")
}

/// The parameter cache's identifier of `kind`'s circuit (its files are named after it).
fn identifier(kind: ProofKind) -> anyhow::Result<String> {
    match kind {
        ProofKind::WindowPost => config::window_post_config().get_cache_identifier::<Tree>(),
        ProofKind::WinningPost => config::winning_post_config().get_cache_identifier::<Tree>(),
        ProofKind::PorepC2 => config::porep_config().get_cache_identifier::<Tree>(),
        ProofKind::SnapUpdate => Ok(<EmptySectorUpdateCompound<Tree> as CacheableParameters<
            EmptySectorUpdateCircuit<Tree>,
            _,
        >>::cache_identifier(&snap_public_params())),
    }
}

fn snap_public_params() -> storage_proofs_update::PublicParams {
    storage_proofs_update::PublicParams::from_sector_size(config::SECTOR_SIZE)
}

/// Makes `kind`'s parameter files in the directory `CACHE_ENV` names.
fn generate(kind: ProofKind) -> anyhow::Result<()> {
    match kind {
        ProofKind::WindowPost | ProofKind::WinningPost => {
            let params = if kind == ProofKind::WindowPost {
                window_post_public_params::<Tree>(&config::window_post_config())?
            } else {
                winning_post_public_params::<Tree>(&config::winning_post_config())?
            };
            let blank = || {
                <FallbackPoStCompound<Tree> as CompoundProof<
                    FallbackPoSt<'_, Tree>,
                    FallbackPoStCircuit<Tree>,
                >>::blank_circuit(&params)
            };
            write_set::<FallbackPoStCompound<Tree>, _, _>(blank, &params)
        }
        ProofKind::PorepC2 => {
            let params = public_params::<Tree>(&config::porep_config())?;
            let blank = || {
                <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
                    StackedDrg<'_, Tree, DefaultPieceHasher>,
                    StackedCircuit<Tree, DefaultPieceHasher>,
                >>::blank_circuit(&params)
            };
            write_set::<StackedCompound<Tree, DefaultPieceHasher>, _, _>(blank, &params)
        }
        ProofKind::SnapUpdate => {
            let params = snap_public_params();
            let blank = || {
                <EmptySectorUpdateCompound<Tree> as CompoundProof<
                    EmptySectorUpdate<Tree>,
                    EmptySectorUpdateCircuit<Tree>,
                >>::blank_circuit(&params)
            };
            write_set::<EmptySectorUpdateCompound<Tree>, _, _>(blank, &params)
        }
    }
}

/// Writes the metadata, the Groth16 parameters (a random setup) and the verifying key of one
/// circuit, `blank` making its blank instance, as paramcache does.
fn write_set<Compound, C, P>(blank: impl Fn() -> C, params: &P) -> anyhow::Result<()>
where
    Compound: CacheableParameters<C, P>,
    C: Circuit<Fr>,
    P: ParameterSetMetadata,
{
    Compound::get_param_metadata(blank(), params)?;
    Compound::get_groth_params(Some(&mut OsRng), blank(), params)?;
    Compound::get_verifying_key(Some(&mut OsRng), blank(), params)?;
    Ok(())
}
