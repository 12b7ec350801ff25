//! Opt-in profiling of the msl-emu device's launches. While recording is on
//! (process-wide, between [`start_recording`] and [`stop_recording`]; Python's
//! `metile.testing.emu_profile()`), every launch on msl-emu runs the profiled
//! build of its kernel (`msl_emu::EmuCompiler::with_profiling`, compiled on
//! first use and cached apart) and its counts are kept. Off, launches run the
//! default build and nothing is counted.

use crate::error::RuntimeError;
use crate::msl_emu::EmuProfile;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The counts of one launch on msl-emu.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchProfile {
    /// The MSL kernel's name.
    pub kernel: String,
    pub grid: [u32; 3],
    pub threads_per_group: u32,
    pub threadgroup_memory_bytes: usize,
    pub counts: EmuProfile,
    /// The kernel source line each of `counts.threadgroup_sites` was emitted
    /// for, where the MSL line is known and maps to one.
    pub site_sources: Vec<Option<metile_ir::Loc>>,
}

static RECORDING: AtomicBool = AtomicBool::new(false);
static RECORDED: Mutex<Vec<LaunchProfile>> = Mutex::new(Vec::new());

/// Starts keeping the counts of msl-emu launches; refused while already recording.
pub fn start_recording() -> Result<(), RuntimeError> {
    let mut recorded = RECORDED.lock().unwrap_or_else(|p| p.into_inner());
    if RECORDING.swap(true, Ordering::SeqCst) {
        return Err(RuntimeError::Device(
            "msl-emu launches are already being profiled (profiles do not nest)".into(),
        ));
    }
    recorded.clear();
    Ok(())
}

/// Stops recording and returns the launches recorded since `start_recording`,
/// in the order they finished.
pub fn stop_recording() -> Vec<LaunchProfile> {
    let mut recorded = RECORDED.lock().unwrap_or_else(|p| p.into_inner());
    RECORDING.store(false, Ordering::SeqCst);
    std::mem::take(&mut *recorded)
}

/// Whether msl-emu launches are being profiled.
pub fn is_recording() -> bool {
    RECORDING.load(Ordering::SeqCst)
}

pub(crate) fn record(profile: LaunchProfile) {
    let mut recorded = RECORDED.lock().unwrap_or_else(|p| p.into_inner());
    if RECORDING.load(Ordering::SeqCst) {
        recorded.push(profile);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_does_not_nest() {
        start_recording().expect("not recording yet");
        assert!(is_recording());
        let again = start_recording().expect_err("already recording");
        assert_eq!(
            again.to_string(),
            "msl-emu launches are already being profiled (profiles do not nest)"
        );
        stop_recording();
        assert!(!is_recording());
        start_recording().expect("stopped");
        stop_recording();
    }
}
