//! kuzk-fil-prover: real Filecoin proofs at 2 KiB with filecoin-proofs (CPU).
//!
//!   kuzk-fil-prover params --kind KIND [--sector-size 2KiB]
//!   kuzk-fil-prover seal --dir DIR --miner ID --first N --count K [--kind KIND]
//!                        [--sector-size 2KiB]
//!   kuzk-fil-prover update --dir DIR --miner ID --first N --count K [--sector-size 2KiB]
//!   kuzk-fil-prover prove            (configured by KUZK_* and FIL_PROOFS_PARAMETER_CACHE;
//!                                     every kind)
//!   kuzk-fil-prover verify --job JOB.json [--proof FILE]
//!
//! Exit status: 0 done; 2 bad input (a missing file, malformed hex, a wrong sector size, a
//! comm_r that does not match its replica, missing parameters); 1 anything else. A failure is
//! one line on stderr starting with `kuzk-fil-prover: `; progress lines go to stderr too.

mod args;
mod config;
mod fail;
mod gpu_phase;
mod hexio;
mod lane;
mod params;
mod porep;
mod post;
mod progress;
mod prove;
mod seal;
mod sector;
mod update;
mod verify;

use fail::{bad_input, exit_with, Outcome};

const USAGE: &str = "usage: kuzk-fil-prover params|seal|update|prove|verify [--flag value ...]";

fn main() {
    progress::start_clock();
    fail::install_panic_hook();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(failure) = dispatch(&args) {
        exit_with(failure);
    }
}

fn dispatch(args: &[String]) -> Outcome<()> {
    let (command, rest) = args.split_first().ok_or_else(|| bad_input(USAGE))?;
    match command.as_str() {
        "params" => params::command(rest),
        "seal" => seal::command(rest),
        "update" => update::command(rest),
        "prove" => prove::command(rest),
        "verify" => verify::command(rest),
        other => Err(bad_input(format!("unknown command {other:?}; {USAGE}"))),
    }
}
