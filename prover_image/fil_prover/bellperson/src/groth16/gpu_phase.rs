//! kuzk's patch: hooks around the part of a Groth16 proof that a GPU build runs on the GPU.
//!
//! A proof is made in two parts: the circuits' synthesis (CPU only, the constraint system's
//! assignments) and the FFTs and multi-exponentiations over them (the GPU's work in a `cuda` or
//! `opencl` build, the CPU's otherwise). A prover that shares a GPU between several provers
//! needs to hold the GPU only for the second part; bellperson keeps the split private
//! (`synthesize_circuits_batch`), so these hooks tell the caller when each batch of circuits
//! enters the second part and when it leaves it (its proofs made, or an error).

use std::sync::OnceLock;

/// What to call when a batch's GPU part starts (`enter`, after its synthesis) and ends
/// (`leave`, on every path out of the proving call once `enter` was called).
#[derive(Clone, Copy, Debug)]
pub struct GpuPhaseHooks {
    pub enter: fn(),
    pub leave: fn(),
}

static HOOKS: OnceLock<GpuPhaseHooks> = OnceLock::new();

/// Sets the process's hooks; false (and nothing changed) if they were set already.
pub fn set_gpu_phase_hooks(hooks: GpuPhaseHooks) -> bool {
    HOOKS.set(hooks).is_ok()
}

/// The GPU part of one proving call: entered when made, left when dropped.
pub(crate) struct GpuPhase(());

impl GpuPhase {
    pub(crate) fn enter() -> GpuPhase {
        if let Some(hooks) = HOOKS.get() {
            (hooks.enter)();
        }
        GpuPhase(())
    }
}

impl Drop for GpuPhase {
    fn drop(&mut self) {
        if let Some(hooks) = HOOKS.get() {
            (hooks.leave)();
        }
    }
}
