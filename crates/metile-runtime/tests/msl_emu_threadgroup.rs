//! MSL emulator: threadgroup memory, barriers, divergence detection and the
//! cost of running a full 1024-thread group.
// Loops index by thread id, mirroring the kernels.
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::{Builtin, EmuError, EntryParam};
use msl_emu_support::*;
use std::time::Instant;

const REDUCE: &str = r#"#include <metal_stdlib>
using namespace metal;

kernel void block_sum(device const float* x [[buffer(0)]],
                      device float* out [[buffer(1)]],
                      constant uint& n [[buffer(2)]],
                      threadgroup float* partial [[threadgroup(0)]],
                      uint3 tgpig [[threadgroup_position_in_grid]],
                      uint3 ntg [[threads_per_threadgroup]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]],
                      uint sgid [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]])
{
    uint i = tgpig.x * ntg.x + tid;
    float v = i < n ? x[i] : 0.0f;
    v = simd_sum(v);
    if (lane == 0) {
        partial[sgid] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sgid == 0) {
        float p = lane < nsg ? partial[lane] : 0.0f;
        p = simd_sum(p);
        if (lane == 0) {
            out[tgpig.x] = p;
        }
    }
}
"#;

fn reduce_params() -> Vec<EntryParam> {
    vec![
        buffer("device const float*"),
        buffer("device float*"),
        scalar("constant uint&"),
        threadgroup("threadgroup float*", 32 * 4),
        builtin(Builtin::ThreadgroupPositionInGrid),
        builtin(Builtin::ThreadsPerThreadgroup),
        builtin(Builtin::ThreadIndexInThreadgroup),
        builtin(Builtin::ThreadIndexInSimdgroup),
        builtin(Builtin::SimdgroupIndexInThreadgroup),
        builtin(Builtin::SimdgroupsPerThreadgroup),
    ]
}

#[test]
fn threadgroup_reduction_across_simdgroups() {
    let compiler = require_compiler!();
    let kernel = compile(&compiler, REDUCE, &entry("block_sum", reduce_params()));
    let n: u32 = 5000;
    let mut x: Vec<f32> = (0..n).map(|i| (i % 17) as f32).collect();
    for threads in [1024u32, 256, 96] {
        let groups = n.div_ceil(threads);
        let mut out = vec![0f32; groups as usize];
        run(
            &kernel,
            &[buf(&mut x), buf(&mut out), bytes_of(&n)],
            [groups, 1, 1],
            threads,
        );
        for g in 0..groups as usize {
            let lo = g * threads as usize;
            let hi = (lo + threads as usize).min(n as usize);
            let expected: f32 = x[lo..hi].iter().sum();
            assert_eq!(out[g], expected, "group {g} with {threads} threads");
        }
    }
}

#[test]
fn shared_memory_transpose() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void transpose(device const float* in [[buffer(0)]],\n\
         device float* out [[buffer(1)]],\n\
         constant uint& rows [[buffer(2)]],\n\
         constant uint& cols [[buffer(3)]],\n\
         threadgroup float* tile [[threadgroup(0)]],\n\
         uint3 tgpig [[threadgroup_position_in_grid]],\n\
         uint tid [[thread_index_in_threadgroup]])\n\
         {{\n\
             // 32x32 tile; 256 threads each move 4 elements; +1 column of padding.\n\
             uint r0 = tgpig.y * 32, c0 = tgpig.x * 32;\n\
             for (uint k = 0; k < 4; ++k) {{\n\
                 uint r = tid / 32 + 8 * k, c = tid % 32;\n\
                 if (r0 + r < rows && c0 + c < cols) tile[r * 33 + c] = in[(r0 + r) * cols + c0 + c];\n\
             }}\n\
             threadgroup_barrier(mem_flags::mem_threadgroup);\n\
             for (uint k = 0; k < 4; ++k) {{\n\
                 uint r = tid / 32 + 8 * k, c = tid % 32;\n\
                 if (c0 + r < cols && r0 + c < rows) out[(c0 + r) * rows + r0 + c] = tile[c * 33 + r];\n\
             }}\n\
         }}\n"
    );
    let spec = entry(
        "transpose",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant uint&"),
            scalar("constant uint&"),
            threadgroup("threadgroup float*", 32 * 33 * 4),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let (rows, cols) = (70u32, 45u32);
    let mut input: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
    let mut out = vec![0f32; (rows * cols) as usize];
    let grid = [cols.div_ceil(32), rows.div_ceil(32), 1];
    run(
        &kernel,
        &[buf(&mut input), buf(&mut out), bytes_of(&rows), bytes_of(&cols)],
        grid,
        256,
    );
    for r in 0..rows as usize {
        for c in 0..cols as usize {
            assert_eq!(
                out[c * rows as usize + r],
                input[r * cols as usize + c],
                "({r}, {c})"
            );
        }
    }
}

fn barrier_kernel(name: &str, body: &str) -> (String, Vec<EntryParam>) {
    let msl = format!(
        "{HEADER}kernel void {name}(device float* out [[buffer(0)]],\n\
         threadgroup float* tg [[threadgroup(0)]],\n\
         uint tid [[thread_index_in_threadgroup]],\n\
         uint lane [[thread_index_in_simdgroup]])\n{{\n{body}\n}}\n"
    );
    let params = vec![
        buffer("device float*"),
        threadgroup("threadgroup float*", 1024 * 4),
        builtin(Builtin::ThreadIndexInThreadgroup),
        builtin(Builtin::ThreadIndexInSimdgroup),
    ];
    (msl, params)
}

#[test]
fn returned_threads_leave_barriers() {
    let compiler = require_compiler!();
    // Threads 0..15 return early; the barrier among the rest still completes.
    let body = "    if (tid < 16) {\n        return;\n    }\n    tg[tid] = float(tid);\n\
                threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                out[tid] = tg[tid == 63 ? 16 : tid + 1];";
    let (msl, params) = barrier_kernel("early_return", body);
    let kernel = compile(&compiler, &msl, &entry("early_return", params));
    let mut out = vec![-1f32; 64];
    run(&kernel, &[buf(&mut out)], [1, 1, 1], 64);
    for t in 0..64 {
        let expected = if t < 16 {
            -1.0
        } else if t == 63 {
            16.0
        } else {
            (t + 1) as f32
        };
        assert_eq!(out[t], expected, "thread {t}");
    }
}

#[test]
fn barrier_divergence_is_an_error_not_a_hang() {
    let compiler = require_compiler!();
    // Half of each simdgroup waits at the barrier, the other half at simd_sum:
    // neither can complete.
    let body = "    float v = float(tid);\n\
                if (lane < 16) {\n        threadgroup_barrier(mem_flags::mem_threadgroup);\n    }\n\
                out[tid] = simd_sum(v);";
    let (msl, params) = barrier_kernel("deadlock", body);
    let kernel = compile(&compiler, &msl, &entry("deadlock", params));
    let mut out = vec![0f32; 64];
    // SAFETY: the buffer outlives the launch and the kernel stays within it.
    let err = unsafe { kernel.launch(&[buf(&mut out)], [2, 1, 1], 64) }.expect_err("deadlock");
    assert!(matches!(err, EmuError::Kernel { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("deadlock"), "{message}");
    assert!(message.contains("threadgroup_barrier (line 11)"), "{message}");
}

#[test]
fn different_barriers_are_an_error() {
    let compiler = require_compiler!();
    let body =
        "    if (tid < 32) {\n        threadgroup_barrier(mem_flags::mem_threadgroup);\n    } else {\n\
                threadgroup_barrier(mem_flags::mem_threadgroup);\n    }\n    out[tid] = 1.0f;";
    let (msl, params) = barrier_kernel("two_barriers", body);
    let kernel = compile(&compiler, &msl, &entry("two_barriers", params));
    let mut out = vec![0f32; 64];
    // SAFETY: the buffer outlives the launch and the kernel stays within it.
    let err = unsafe { kernel.launch(&[buf(&mut out)], [1, 1, 1], 64) }.expect_err("divergent barriers");
    assert!(
        err.to_string().contains("different threadgroup_barrier calls"),
        "{err}"
    );
}

#[test]
fn full_group_with_barriers_is_fast() {
    let compiler = require_compiler!();
    let body = "    tg[tid] = float(tid);\n\
                for (uint step = 0; step < 4; ++step) {\n\
                    threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                    float neighbour = tg[(tid + 1) % 1024];\n\
                    threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                    tg[tid] = neighbour;\n\
                }\n\
                threadgroup_barrier(mem_flags::mem_threadgroup);\n\
                out[tid] = tg[tid];";
    let (msl, params) = barrier_kernel("rotate", body);
    let kernel = compile(&compiler, &msl, &entry("rotate", params));
    let mut out = vec![0f32; 1024];
    run(&kernel, &[buf(&mut out)], [1, 1, 1], 1024);
    for t in 0..1024 {
        assert_eq!(out[t], ((t + 4) % 1024) as f32);
    }
    // Timing is reported, not asserted: one group, 9 barriers, 1024 fibers.
    let launches = 50;
    let start = Instant::now();
    for _ in 0..launches {
        run(&kernel, &[buf(&mut out)], [1, 1, 1], 1024);
    }
    let per_group = start.elapsed() / launches;
    let unchecked_kernel = compile(
        &compiler.with_checks(false),
        &msl,
        &entry("rotate", barrier_kernel("rotate", body).1),
    );
    let start = Instant::now();
    for _ in 0..launches {
        run(&unchecked_kernel, &[buf(&mut out)], [1, 1, 1], 1024);
    }
    let unchecked = start.elapsed() / launches;
    eprintln!(
        "1024-thread group with 9 barriers: {per_group:?} per launch ({unchecked:?} built without memory checks)"
    );
}
