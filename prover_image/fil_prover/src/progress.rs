//! Progress lines on stderr, each stamped with the seconds since the process started.

use std::fmt::Arguments;
use std::sync::OnceLock;
use std::time::Instant;

static STARTED: OnceLock<Instant> = OnceLock::new();

/// Starts the clock the progress lines count from.
pub fn start_clock() {
    STARTED.get_or_init(Instant::now);
}

/// Writes one progress line: `[kuzk-fil-prover +1.2s] ...`.
pub fn line(text: Arguments<'_>) {
    let seconds = STARTED.get_or_init(Instant::now).elapsed().as_secs_f64();
    eprintln!("[kuzk-fil-prover +{seconds:.1}s] {text}");
}

/// `progress!("format", args...)`: one progress line on stderr.
#[macro_export]
macro_rules! progress {
    ($($arg:tt)*) => {
        $crate::progress::line(format_args!($($arg)*))
    };
}
