//! How a command fails: one line on stderr and an exit status that tells bad input (2, never
//! worth retrying) from everything else (1).

use std::fmt::Display;

/// The prefix of every line this binary writes about a failure.
pub const PREFIX: &str = "kuzk-fil-prover: ";

/// The input was wrong (a missing file, malformed hex, a wrong sector size, ...).
pub const BAD_INPUT: i32 = 2;
/// Anything else: the library failed, the lane agent refused, a proof did not verify.
pub const FAILED: i32 = 1;

/// A failed command: what to print and how to exit.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

pub type Outcome<T> = Result<T, Failure>;

/// Bad input: exit 2.
pub fn bad_input(message: impl Display) -> Failure {
    Failure {
        code: BAD_INPUT,
        message: message.to_string(),
    }
}

/// Any other failure: exit 1.
pub fn failed(message: impl Display) -> Failure {
    Failure {
        code: FAILED,
        message: message.to_string(),
    }
}

/// A library error with its causes, as a failure (exit 1).
impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        failed(format!("{error:#}"))
    }
}

/// Text on one line: newlines and runs of blanks become one space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Prints the failure as one line on stderr and exits with its code.
pub fn exit_with(failure: Failure) -> ! {
    eprintln!("{PREFIX}{}", one_line(&failure.message));
    std::process::exit(failure.code)
}

/// Makes any panic print one line and exit 1, instead of a backtrace: bad input is checked
/// before the library is called, so a panic is always an internal failure.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()));
        exit_with(failed(format!(
            "internal error: {what}{}",
            place.unwrap_or_default()
        )))
    }));
}
