//! MSL emulator as a memory checker: every device, constant and threadgroup
//! access outside the buffer or allocation its pointer came from is an error
//! naming the argument, the byte offset, the thread and the MSL line,
//! however the kernel spells the access (subscript, vector cast, 64-bit
//! pointer arithmetic, atomics, simdgroup matrices), and the memory around
//! the buffer is left as it was.

mod msl_emu_support;

use metile_runtime::msl_emu::{Builtin, EmuCompiler, EmuError, EmuKernel, EntryParam, LaunchArg};
use msl_emu_support::*;

/// `x` (read-only), `out`, an int `n` and the thread index, then `body`.
fn kernel(compiler: &EmuCompiler, name: &str, body: &str) -> EmuKernel {
    let msl = format!(
        "{HEADER}kernel void {name}(device const float* x [[buffer(0)]],\n\
         device float* out [[buffer(1)]],\n\
         constant long& n [[buffer(2)]],\n\
         uint tid [[thread_index_in_threadgroup]])\n{{\n{body}\n}}\n"
    );
    let params = vec![
        buffer("device const float*"),
        buffer("device float*"),
        scalar("constant long&"),
        builtin(Builtin::ThreadIndexInThreadgroup),
    ];
    compile(compiler, &msl, &entry(name, params))
}

fn launch(kernel: &EmuKernel, x: &mut [f32], out: &mut [f32], n: i64, threads: u32) -> Result<(), EmuError> {
    // SAFETY: the buffers outlive the launch; out-of-bounds accesses are checked.
    unsafe { kernel.launch(&[buf(x), buf(out), bytes_of(&n)], [1, 1, 1], threads) }
}

fn error_of(result: Result<(), EmuError>) -> String {
    match result {
        Err(e @ EmuError::Kernel { .. }) => e.to_string(),
        other => panic!("expected a kernel error, got {other:?}"),
    }
}

fn assert_line(message: &str, line: u32, name: &str) {
    let at = format!("at line {line} of {name}.metal");
    assert!(message.ends_with(&at), "{message}");
}

#[test]
fn reads_just_outside_a_buffer_are_caught() {
    let compiler = require_compiler!();
    let k = kernel(&compiler, "shifted", "    out[tid] = x[long(tid) + n];");
    let mut x = vec![1f32; 32];
    let mut out = vec![0f32; 32];
    launch(&k, &mut x, &mut out, 0, 32).expect("in bounds");
    // Threads run in order: the first one out of range reports.
    for (n, thread, offset) in [(-1i64, 0, -4i64), (1, 31, 128), (3, 29, 128)] {
        let message = error_of(launch(&k, &mut x, &mut out, n, 32));
        assert!(
            message.contains(&format!(
                "thread {thread}: out-of-bounds access to buffer argument 0 (device const float*): \
                 a 4-byte device read at byte offset {offset}; the buffer has 128 bytes"
            )),
            "{message}"
        );
        assert_line(&message, 9, "shifted");
    }
}

#[test]
fn an_access_landing_in_another_buffer_is_caught() {
    let compiler = require_compiler!();
    // `n` is the distance from x to out in floats: x[n] is out[0]'s address.
    let k = kernel(&compiler, "into_other", "    out[tid] = x[n + long(tid)];");
    let mut both = vec![0f32; 64];
    let (x, out) = both.split_at_mut(32);
    x.fill(1.0);
    let distance = (out.as_ptr() as i64 - x.as_ptr() as i64) / 4;
    let message = error_of(launch(&k, x, out, distance, 32));
    assert!(
        message.contains("out-of-bounds access to buffer argument 0 (device const float*): a 4-byte device read at byte offset 128"),
        "{message}"
    );
}

#[test]
fn stores_far_away_are_caught_before_they_land() {
    let compiler = require_compiler!();
    let k = kernel(&compiler, "far_store", "    out[long(tid) + n] = 7.0f;");
    // A store far before `out` that would land on `x` (data loss on a GPU-less
    // host), and stores megabytes and gigabytes away.
    let mut both = vec![0f32; 64];
    let (x, out) = both.split_at_mut(32);
    let distance = (x.as_ptr() as i64 - out.as_ptr() as i64) / 4;
    for n in [distance, -(1 << 20), 1 << 22, 3 << 30, -(1 << 40)] {
        let message = error_of(launch(&k, x, out, n, 32));
        assert!(
            message.contains(&format!(
                "out-of-bounds access to buffer argument 1 (device float*): a 4-byte device write at byte offset {}",
                n * 4
            )),
            "{message}"
        );
        assert_line(&message, 9, "far_store");
    }
    assert!(both.iter().all(|&v| v == 0.0), "nothing was written anywhere");
}

#[test]
fn vector_accesses_and_64_bit_pointer_arithmetic_are_checked() {
    let compiler = require_compiler!();
    let body = "    device const float* p = x + (n - 4);\n    \
                float4 v = *((device const float4*)(p + 4 * tid));\n    \
                *((device float4*)(out + 4 * tid)) = v;";
    let k = kernel(&compiler, "vectors", body);
    let mut x: Vec<f32> = (0..30).map(|i| i as f32).collect();
    let mut out = vec![0f32; 32];
    launch(&k, &mut x, &mut out, 4, 7).expect("in bounds");
    assert_eq!(&out[..28], &x[..28]);
    // Thread 7's float4 covers elements 28..32 of 30: checked as one 16-byte read.
    let message = error_of(launch(&k, &mut x, &mut out, 4, 8));
    assert!(
        message.contains("thread 7: out-of-bounds access to buffer argument 0 (device const float*): a 16-byte device read at byte offset 112; the buffer has 120 bytes"),
        "{message}"
    );
    assert_line(&message, 10, "vectors");
    // A 64-bit offset of 2^33 floats keeps the pointer's provenance.
    let message = error_of(launch(&k, &mut x, &mut out, 4 + (1 << 33), 1));
    assert!(
        message.contains(&format!("at byte offset {}", 4i64 << 33)),
        "{message}"
    );
}

#[test]
fn scalars_and_pointers_from_integers_are_checked() {
    let compiler = require_compiler!();
    let k = kernel(&compiler, "scalar_past", "    out[tid] = float((&n)[tid]);");
    let mut x = vec![0f32; 4];
    let mut out = vec![0f32; 4];
    launch(&k, &mut x, &mut out, 5, 1).expect("in bounds");
    assert_eq!(out[0], 5.0);
    let message = error_of(launch(&k, &mut x, &mut out, 5, 2));
    assert!(
        message.contains("out-of-bounds access to scalar argument 2 (constant long&): a 8-byte constant read at byte offset 8; the scalar has 8 bytes"),
        "{message}"
    );
    let k = kernel(
        &compiler,
        "forged",
        "    out[tid] = *((device const float*)(ulong)n);",
    );
    let message = error_of(launch(&k, &mut x, &mut out, 4096, 1));
    assert!(
        message.contains("out-of-bounds access at address 0x1000: a 4-byte device read through a pointer that comes from no buffer"),
        "{message}"
    );
}

fn threadgroup_kernel(compiler: &EmuCompiler, name: &str, body: &str) -> EmuKernel {
    let msl = format!(
        "{HEADER}kernel void {name}(device float* out [[buffer(0)]],\n\
         constant int& n [[buffer(1)]],\n\
         threadgroup float* tg [[threadgroup(0)]],\n\
         uint tid [[thread_index_in_threadgroup]])\n{{\n{body}\n}}\n"
    );
    let params: Vec<EntryParam> = vec![
        buffer("device float*"),
        scalar("constant int&"),
        threadgroup("threadgroup float*", 32 * 4),
        builtin(Builtin::ThreadIndexInThreadgroup),
    ];
    compile(compiler, &msl, &entry(name, params))
}

fn launch_threadgroup(kernel: &EmuKernel, out: &mut [f32], n: i32, threads: u32) -> Result<(), EmuError> {
    // SAFETY: the buffer outlives the launch.
    unsafe { kernel.launch(&[buf(out), bytes_of(&n)], [1, 1, 1], threads) }
}

#[test]
fn threadgroup_parameters_and_variables_are_checked() {
    let compiler = require_compiler!();
    let body = "    tg[int(tid) + n] = 1.0f;\n    threadgroup_barrier(mem_flags::mem_threadgroup);\n    out[tid] = tg[tid];";
    let k = threadgroup_kernel(&compiler, "tg_param", body);
    let mut out = vec![0f32; 32];
    launch_threadgroup(&k, &mut out, 0, 32).expect("in bounds");
    assert!(out.iter().all(|&v| v == 1.0));
    for (n, thread, offset) in [(1, 31, 128), (-1, 0, -4)] {
        let message = error_of(launch_threadgroup(&k, &mut out, n, 32));
        assert!(
            message.contains(&format!(
                "thread {thread}: out-of-bounds access to threadgroup parameter 0 (threadgroup float*): \
                 a 4-byte threadgroup write at byte offset {offset}; it has 128 bytes"
            )),
            "{message}"
        );
        assert_line(&message, 9, "tg_param");
    }
    // A variable declared in the kernel sits right after the parameter; running
    // past its end is caught. (Thread 31 is the first to run after the barrier.)
    let body = "    threadgroup float scratch[8];\n    scratch[tid % 8] = 2.0f;\n    tg[tid] = 0.0f;\n    \
                threadgroup_barrier(mem_flags::mem_threadgroup);\n    out[tid] = scratch[tid % 8 + n];";
    let k = threadgroup_kernel(&compiler, "tg_variable", body);
    launch_threadgroup(&k, &mut out, 0, 32).expect("in bounds");
    assert!(out.iter().all(|&v| v == 2.0));
    assert_eq!(k.threadgroup_memory_bytes(), 128 + 32);
    let message = error_of(launch_threadgroup(&k, &mut out, 1, 32));
    assert!(
        message.contains("thread 31: out-of-bounds access to threadgroup variable `scratch` (declared at line 9): a 4-byte threadgroup read at byte offset 32; it has 32 bytes"),
        "{message}"
    );
    assert_line(&message, 13, "tg_variable");
}

#[test]
fn atomics_are_checked_in_device_and_threadgroup_memory() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void counts(device atomic_uint* hist [[buffer(0)]],\n\
         constant int& n [[buffer(1)]],\n\
         uint tid [[thread_index_in_threadgroup]])\n{{\n\
         threadgroup atomic_uint local[4];\n\
         if (tid < 4) atomic_store_explicit(&local[tid], 0u, memory_order_relaxed);\n\
         threadgroup_barrier(mem_flags::mem_threadgroup);\n\
         atomic_fetch_add_explicit(&local[(tid + uint(n)) % 5], 1u, memory_order_relaxed);\n\
         threadgroup_barrier(mem_flags::mem_threadgroup);\n\
         if (tid < 4) atomic_fetch_add_explicit(&hist[tid + uint(n)], atomic_load_explicit(&local[tid], memory_order_relaxed), memory_order_relaxed);\n\
         }}\n"
    );
    let params = vec![
        buffer("device atomic_uint*"),
        scalar("constant int&"),
        builtin(Builtin::ThreadIndexInThreadgroup),
    ];
    let k = compile(&compiler, &msl, &entry("counts", params));
    let launch = |hist: &mut [u32], n: i32, threads: u32| {
        // SAFETY: the buffer outlives the launch.
        unsafe { k.launch(&[buf(hist), bytes_of(&n)], [1, 1, 1], threads) }
    };
    let mut hist = vec![0u32; 4];
    launch(&mut hist, 0, 4).expect("in bounds");
    assert_eq!(hist, [1, 1, 1, 1]);
    // (tid + 0) % 5 reaches local[4] once there are 5 threads.
    let message = error_of(launch(&mut hist, 0, 5));
    assert!(
        message.contains("thread 4: out-of-bounds access to threadgroup variable `local` (declared at line 8): a 4-byte threadgroup write at byte offset 16; it has 16 bytes"),
        "{message}"
    );
    // n = 5 keeps the threadgroup indices in range but pushes hist's past the end.
    let message = error_of(launch(&mut hist, 5, 4));
    assert!(
        message.contains("out-of-bounds access to buffer argument 0 (device atomic_uint*): a 4-byte device write at byte offset ")
            && message.contains("; the buffer has 16 bytes"),
        "{message}"
    );
    assert_line(&message, 13, "counts");
}

#[test]
fn simdgroup_matrix_loads_and_stores_are_checked() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void tile(device const float* a [[buffer(0)]],\n\
         device float* c [[buffer(1)]],\n\
         constant int& ld [[buffer(2)]],\n\
         threadgroup float* staging [[threadgroup(0)]])\n{{\n\
         simdgroup_float8x8 m;\n\
         simdgroup_load(m, a, ld);\n\
         simdgroup_store(m, staging, ld);\n\
         simdgroup_load(m, staging, ld);\n\
         simdgroup_store(m, c, 8);\n\
         }}\n"
    );
    let params = vec![
        buffer("device const float*"),
        buffer("device float*"),
        scalar("constant int&"),
        threadgroup("threadgroup float*", 64 * 4),
    ];
    let k = compile(&compiler, &msl, &entry("tile", params));
    let mut a: Vec<f32> = (0..72).map(|i| i as f32).collect();
    let mut c = vec![0f32; 64];
    let launch = |a: &mut [f32], c: &mut [f32], ld: i32| {
        // SAFETY: the buffers outlive the launch.
        unsafe { k.launch(&[buf(a), buf(c), bytes_of(&ld)], [1, 1, 1], 32) }
    };
    launch(&mut a[..64], &mut c, 8).expect("in bounds");
    assert_eq!(c, a[..64]);
    // With a leading dimension of 9 the last row ends at element 71 of a: in
    // range for 72 elements, not for 64; the threadgroup staging is 64 long.
    let message = error_of(launch(&mut a[..64], &mut c, 9));
    assert!(
        message.contains("out-of-bounds access to buffer argument 0 (device const float*)"),
        "{message}"
    );
    assert_line(&message, 10, "tile");
    let message = error_of(launch(&mut a, &mut c, 9));
    assert!(
        message.contains("out-of-bounds access to threadgroup parameter 0 (threadgroup float*): a 4-byte threadgroup write"),
        "{message}"
    );
    assert_line(&message, 11, "tile");
}

#[test]
fn program_scope_constants_are_checked() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}constant float weights[4] = {{1.0f, 2.0f, 3.0f, 4.0f}};\n\
         kernel void weigh(device float* out [[buffer(0)]],\n\
         constant int& n [[buffer(1)]],\n\
         uint tid [[thread_index_in_threadgroup]])\n{{\n\
         out[tid] = weights[int(tid) + n];\n}}\n"
    );
    let params = vec![
        buffer("device float*"),
        scalar("constant int&"),
        builtin(Builtin::ThreadIndexInThreadgroup),
    ];
    let k = compile(&compiler, &msl, &entry("weigh", params));
    let mut out = vec![0f32; 4];
    // SAFETY: the buffer outlives the launch.
    let launch = |out: &mut [f32], n: i32| unsafe { k.launch(&[buf(out), bytes_of(&n)], [1, 1, 1], 4) };
    launch(&mut out, 0).expect("in bounds");
    assert_eq!(out, [1.0, 2.0, 3.0, 4.0]);
    let message = error_of(launch(&mut out, 1));
    assert!(
        message.contains("out-of-bounds access at address") && message.contains("a 4-byte constant read"),
        "{message}"
    );
    assert_line(&message, 9, "weigh");
}

#[test]
fn unchecked_kernels_run_on_plain_pointers() {
    let compiler = require_compiler!().with_checks(false);
    assert!(!compiler.checks());
    let k = kernel(&compiler, "plain", "    out[tid] = x[long(tid) + n] * 2.0f;");
    assert!(!k.is_checked());
    let mut x: Vec<f32> = (0..32).map(|i| i as f32).collect();
    let mut out = vec![0f32; 32];
    launch(&k, &mut x, &mut out, 0, 32).expect("in bounds");
    assert_eq!(out[31], 62.0);
    let checked = kernel(
        &require_compiler!(),
        "plain",
        "    out[tid] = x[long(tid) + n] * 2.0f;",
    );
    assert!(checked.is_checked());
    assert_ne!(
        checked.library_path(),
        k.library_path(),
        "checked and unchecked builds are cached apart"
    );
}

#[test]
fn a_failed_check_leaves_the_worker_usable() {
    let compiler = require_compiler!();
    let k = kernel(&compiler, "again", "    out[tid] = x[long(tid) + n];");
    let mut x = vec![3f32; 32];
    let mut out = vec![0f32; 32];
    // Several groups in parallel, each failing, then a clean launch.
    let n = 1i64;
    // SAFETY: the buffers outlive the launch.
    let result = unsafe { k.launch(&[buf(&mut x), buf(&mut out), bytes_of(&n)], [8, 1, 1], 32) };
    assert!(error_of(result).contains("out-of-bounds"));
    let args: [LaunchArg; 3] = [buf(&mut x), buf(&mut out), bytes_of(&0i64)];
    run(&k, &args, [4, 1, 1], 32);
    assert!(out.iter().all(|&v| v == 3.0));
}
