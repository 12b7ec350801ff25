//! MSL emulator: a launch of many threadgroups stops between threadgroups when the
//! launching thread's poller asks (Ctrl-C in Python), and the kernel still works.

mod msl_emu_support;

use metile_runtime::interrupt::with_interrupt_poller;
use metile_runtime::msl_emu::{Builtin, EmuError};
use msl_emu_support::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const COUNT_GROUPS: &str = r#"#include <metal_stdlib>
using namespace metal;

kernel void count_groups(device atomic_uint* groups [[buffer(0)]],
                         uint tid [[thread_index_in_threadgroup]])
{
    if (tid == 0) {
        atomic_fetch_add_explicit(groups, 1u, memory_order_relaxed);
    }
}
"#;

#[test]
fn a_poller_stops_a_long_launch_between_threadgroups() {
    let compiler = require_compiler!();
    let spec = entry(
        "count_groups",
        vec![
            buffer("device atomic_uint*"),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, COUNT_GROUPS, &spec);
    // Far more threadgroups than run in the few polls before the stop.
    let groups = 1u32 << 24;
    let mut count = [0u32];
    let polls = AtomicUsize::new(0);
    let poll = || polls.fetch_add(1, Ordering::Relaxed) >= 1;
    let start = Instant::now();
    // SAFETY: the buffer outlives the launch and the kernel writes only its element.
    let result = with_interrupt_poller(&poll, || unsafe {
        kernel.launch(&[buf(&mut count)], [groups, 1, 1], 32)
    });
    let elapsed = start.elapsed();
    assert!(matches!(result, Err(EmuError::Interrupted)), "{result:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert_eq!(polls.load(Ordering::Relaxed), 2);
    assert!(
        count[0] > 0 && count[0] < groups,
        "{} of {groups} groups ran",
        count[0]
    );
    // Without a poller, and afterwards, launches run to the end.
    let mut count = [0u32];
    run(&kernel, &[buf(&mut count)], [1000, 1, 1], 32);
    assert_eq!(count[0], 1000);
}
