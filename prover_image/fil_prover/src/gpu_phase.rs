//! The lane's GPU phase held around the GPU's part of each proof only: bellperson (patched,
//! `bellperson/KUZK_PATCH.md`) calls `enter` once a batch's circuits are synthesized and
//! `leave` when its FFTs and multi-exponentiations are done, and this module makes the lane
//! calls there: `stage synth_done` and `acquire` on entering, `release-gpu` on leaving. It also
//! times both parts: synthesis (with the vanilla proofs before it) and the GPU part.
//!
//! Each step is logged on stderr with the wall-clock time, so a reader can set the prover's own
//! account beside what its lane wrote: `gpu phase: synthesis from T` (vanilla proofs and
//! circuits), `gpu phase: circuits synthesized at T` (before asking for the phase),
//! `gpu phase: enter at T` (held), `gpu phase: leave at T` (released), T in Unix seconds; the
//! synthesized and leave lines carry the process's peak resident memory so far.
//! A lane call that fails ends the process with the failure, as any failed lane call does.

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bellperson::groth16::{set_gpu_phase_hooks, GpuPhaseHooks};

use crate::fail::exit_with;
use crate::lane::Lane;
use crate::progress;

/// What the hooks share with the proving call.
struct Phase {
    lane: Option<Lane>,
    started: Instant,
    synthesized: Option<Instant>,
    entered: Option<Instant>,
    gpu: Duration,
}

static PHASE: OnceLock<Mutex<Phase>> = OnceLock::new();

/// The two parts of a proof, in milliseconds.
pub struct Times {
    /// From `start` to the first batch's synthesis done (vanilla proofs and circuits).
    pub synth_ms: u64,
    /// The GPU parts, summed.
    pub gpu_ms: u64,
}

/// Starts timing a proof now, with the hooks making their lane calls to `lane` (none: only
/// timed and logged). Once per process.
pub fn start(lane: Option<Lane>) {
    let phase = Phase {
        lane,
        started: Instant::now(),
        synthesized: None,
        entered: None,
        gpu: Duration::ZERO,
    };
    assert!(PHASE.set(Mutex::new(phase)).is_ok(), "gpu_phase::start is called once");
    set_gpu_phase_hooks(GpuPhaseHooks { enter, leave });
    progress!("gpu phase: synthesis from {}", unix_now());
}

/// The proof's two parts so far.
pub fn times() -> Times {
    let phase = state().lock().expect("the phase lock is never poisoned");
    let synthesized = phase.synthesized.unwrap_or_else(Instant::now);
    Times {
        synth_ms: millis(synthesized.duration_since(phase.started)),
        gpu_ms: millis(phase.gpu),
    }
}

fn state() -> &'static Mutex<Phase> {
    PHASE.get().expect("gpu_phase::start was called")
}

fn enter() {
    let mut phase = state().lock().expect("the phase lock is never poisoned");
    let now = Instant::now();
    phase.synthesized.get_or_insert(now);
    progress!(
        "gpu phase: circuits synthesized at {} (peak RSS {})",
        unix_now(),
        peak_rss()
    );
    if let Some(lane) = &phase.lane {
        if let Err(failure) = lane.call("stage synth_done").and_then(|_| lane.call("acquire")) {
            exit_with(failure);
        }
    }
    progress!("gpu phase: enter at {}", unix_now());
    phase.entered = Some(Instant::now());
}

fn leave() {
    let mut phase = state().lock().expect("the phase lock is never poisoned");
    if let Some(entered) = phase.entered.take() {
        phase.gpu += entered.elapsed();
    }
    if let Some(lane) = &phase.lane {
        if let Err(failure) = lane.call("release-gpu") {
            exit_with(failure);
        }
    }
    progress!(
        "gpu phase: leave at {} (peak RSS {})",
        unix_now(),
        peak_rss()
    );
}

fn unix_now() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!("{:.3}", since.as_secs_f64())
}

/// The process's peak resident memory so far (VmHWM), as Linux reports it.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmHWM:"))
                .map(|value| value.split_whitespace().collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_else(|| "unknown".to_string())
}

fn millis(duration: Duration) -> u64 {
    duration.as_millis() as u64
}
