//! MSL emulator: faults in kernel code (out-of-bounds accesses, stack
//! overflow, integer division by zero) are errors, not a dead process, and
//! buffers bound twice keep their in-place meaning. `msl_emu_checks.rs`
//! covers the access checks in depth.

mod msl_emu_support;

use metile_runtime::msl_emu::{Builtin, EmuError, EntryParam};
use msl_emu_support::*;

fn params() -> Vec<EntryParam> {
    vec![
        buffer("device const float*"),
        buffer("device float*"),
        scalar("constant int&"),
        builtin(Builtin::ThreadIndexInThreadgroup),
    ]
}

fn kernel_source(name: &str, body: &str) -> String {
    format!(
        "{HEADER}kernel void {name}(device const float* x [[buffer(0)]],\n\
         device float* out [[buffer(1)]],\n\
         constant int& n [[buffer(2)]],\n\
         uint tid [[thread_index_in_threadgroup]])\n{{\n{body}\n}}\n"
    )
}

fn launch_err(
    kernel: &metile_runtime::msl_emu::EmuKernel,
    x: &mut [f32],
    out: &mut [f32],
    n: i32,
    threads: u32,
) -> String {
    // SAFETY: the buffers outlive the launch; the kernels under test fault on purpose.
    let result = unsafe { kernel.launch(&[buf(x), buf(out), bytes_of(&n)], [1, 1, 1], threads) };
    match result {
        Err(e @ EmuError::Kernel { .. }) => e.to_string(),
        other => panic!("expected a kernel error, got {other:?}"),
    }
}

#[test]
fn write_past_the_end_is_reported_and_in_bounds_writes_kept() {
    let compiler = require_compiler!();
    let kernel = compile(
        &compiler,
        &kernel_source("overrun", "    out[tid] = x[tid % 32] + 1.0f;"),
        &entry("overrun", params()),
    );
    let mut x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let mut out = vec![0f32; 32];
    let message = launch_err(&kernel, &mut x, &mut out, 0, 64);
    assert!(message.contains("out-of-bounds"), "{message}");
    assert!(message.contains("at line 9 of overrun.metal"), "{message}");
    assert!(message.contains("argument 1 (device float*)"), "{message}");
    assert!(
        message.contains("byte offset 128") && message.contains("has 128 bytes"),
        "{message}"
    );
    for (i, v) in out.iter().enumerate() {
        assert_eq!(*v, i as f32 + 1.0, "in-bounds writes reach the caller's buffer");
    }
    // The worker survives: a correct launch afterwards works.
    run(
        &kernel,
        &[buf(&mut x), buf(&mut out), bytes_of(&0i32)],
        [1, 1, 1],
        32,
    );
}

#[test]
fn accesses_before_the_start_are_reported() {
    let compiler = require_compiler!();
    // A read far before the start.
    let body = "    out[tid] = x[int(tid) - n];";
    let kernel = compile(
        &compiler,
        &kernel_source("underrun", body),
        &entry("underrun", params()),
    );
    let mut x = vec![1f32; 32];
    let mut out = vec![0f32; 32];
    let message = launch_err(&kernel, &mut x, &mut out, 4096, 32);
    assert!(message.contains("argument 0 (device const float*)"), "{message}");
    assert!(message.contains("byte offset -16384"), "{message}");
    // A write just before the start.
    let body = "    out[int(tid) - n] = 1.0f;";
    let kernel = compile(
        &compiler,
        &kernel_source("underwrite", body),
        &entry("underwrite", params()),
    );
    let message = launch_err(&kernel, &mut x, &mut out, 3, 32);
    assert!(
        message.contains("out-of-bounds access to buffer argument 1 (device float*): a 4-byte device write at byte offset -12"),
        "{message}"
    );
    assert!(out.iter().all(|&v| v == 0.0), "the write never happened");
}

#[test]
fn integer_division_by_zero_is_reported() {
    let compiler = require_compiler!();
    let body = "    out[tid] = float(int(tid) / n);";
    let kernel = compile(
        &compiler,
        &kernel_source("divide", body),
        &entry("divide", params()),
    );
    let mut x = vec![0f32; 32];
    let mut out = vec![0f32; 32];
    let message = launch_err(&kernel, &mut x, &mut out, 0, 32);
    assert!(message.contains("division by zero"), "{message}");
    assert!(message.contains("at line 9 of divide.metal"), "{message}");
    run(
        &kernel,
        &[buf(&mut x), buf(&mut out), bytes_of(&2i32)],
        [1, 1, 1],
        32,
    );
    assert_eq!(out[7], 3.0);
}

#[test]
fn fiber_stack_overflow_is_reported() {
    let compiler = require_compiler!();
    // 256 KiB of locals: far more than a fiber's 64 KiB stack.
    let body = "    float big[65536];\n\
                for (int i = 0; i < 65536; ++i) big[i] = x[(i + int(tid)) % 32];\n\
                out[tid] = big[(int(tid) * 977 + n) % 65536];";
    let kernel = compile(&compiler, &kernel_source("deep", body), &entry("deep", params()));
    let mut x = vec![0f32; 32];
    let mut out = vec![0f32; 32];
    let message = launch_err(&kernel, &mut x, &mut out, 1, 32);
    assert!(message.contains("overflowed its 64 KiB fiber stack"), "{message}");
}

#[test]
fn same_buffer_bound_twice_stays_in_place() {
    let compiler = require_compiler!();
    let body = "    if (int(tid) < n) out[tid] = x[tid] * 2.0f;";
    let kernel = compile(
        &compiler,
        &kernel_source("in_place", body),
        &entry("in_place", params()),
    );
    let mut data: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let ptr = data.as_mut_ptr().cast::<u8>();
    let n = 64i32;
    let args = [
        metile_runtime::msl_emu::LaunchArg::Buffer { ptr, len_bytes: 256 },
        metile_runtime::msl_emu::LaunchArg::Buffer { ptr, len_bytes: 256 },
        bytes_of(&n),
    ];
    run(&kernel, &args, [1, 1, 1], 64);
    for (i, v) in data.iter().enumerate() {
        assert_eq!(*v, 2.0 * i as f32);
    }
}
