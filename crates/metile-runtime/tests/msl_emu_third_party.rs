//! MSL emulator: Metal compute kernels written the way people write them for
//! Metal (not as meTile emits them): threadgroup arrays and atomics declared
//! inside the kernel, tree reductions, a simdgroup_matrix GEMM staging tiles
//! in threadgroup memory, and kernels that read threadgroup memory they never
//! wrote, which see the poison a GPU's garbage stands for.
// Loops index by thread id, mirroring the kernels.
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::{Builtin, EmuError};
use msl_emu_support::*;

const TREE_REDUCE: &str = r#"#include <metal_stdlib>
using namespace metal;

// One partial sum per threadgroup, the textbook way.
kernel void tree_sum(device const float* in [[buffer(0)]],
                     device float* partial_sums [[buffer(1)]],
                     constant uint& count [[buffer(2)]],
                     uint gid [[thread_position_in_grid]],
                     uint lid [[thread_position_in_threadgroup]],
                     uint group [[threadgroup_position_in_grid]],
                     uint group_size [[threads_per_threadgroup]]) {
    threadgroup float partial[256];
    partial[lid] = gid < count ? in[gid] : 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint stride = group_size / 2; stride > 0; stride /= 2) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0) {
        partial_sums[group] = partial[0];
    }
}
"#;

#[test]
fn tree_reduction_with_a_threadgroup_array_declared_in_the_kernel() {
    let compiler = require_compiler!();
    let spec = entry(
        "tree_sum",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant uint&"),
            builtin(Builtin::ThreadPositionInGrid),
            builtin(Builtin::ThreadPositionInThreadgroup),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadsPerThreadgroup),
        ],
    );
    let kernel = compile(&compiler, TREE_REDUCE, &spec);
    assert_eq!(kernel.threadgroup_memory_bytes(), 1024);
    let count = 1000u32;
    let mut input: Vec<f32> = (0..count).map(|i| (i % 17) as f32 - 8.0).collect();
    let mut sums = vec![0f32; 4];
    run(
        &kernel,
        &[buf(&mut input), buf(&mut sums), bytes_of(&count)],
        [4, 1, 1],
        256,
    );
    for g in 0..4 {
        let expected: f32 = input.iter().skip(g * 256).take(256).sum();
        assert_eq!(sums[g], expected, "group {g}");
    }
    // Built without memory checks, the variable lives at the same place.
    let unchecked = compile(&compiler.clone().with_checks(false), TREE_REDUCE, &spec);
    assert!(!unchecked.is_checked());
    let mut plain_sums = vec![0f32; 4];
    run(
        &unchecked,
        &[buf(&mut input), buf(&mut plain_sums), bytes_of(&count)],
        [4, 1, 1],
        256,
    );
    assert_eq!(plain_sums, sums);
    // A group size above the array's 256 elements overruns it: caught.
    let mut sums = vec![0f32; 2];
    // SAFETY: the buffers outlive the launch.
    let result = unsafe {
        kernel.launch(
            &[buf(&mut input), buf(&mut sums), bytes_of(&count)],
            [2, 1, 1],
            512,
        )
    };
    match result {
        Err(EmuError::Kernel { message, .. }) => assert!(
            message.contains(
                "thread 256: out-of-bounds access to threadgroup variable `partial` (declared at line 12): \
                 a 4-byte threadgroup write at byte offset 1024; it has 1024 bytes"
            ),
            "{message}"
        ),
        other => panic!("expected an out-of-bounds error, got {other:?}"),
    }
}

const SIMD_GEMM: &str = r#"#include <metal_stdlib>
using namespace metal;

constant constexpr uint TILE = 32;
constant constexpr uint BK = 16;

// C = A * B for row-major A (M x K), B (K x N); a 32x32 tile of C per
// threadgroup of 4 simdgroups, each computing a 16x16 quarter as 2x2
// simdgroup matrices. Tiles of A and B are staged in threadgroup memory,
// zero-filled past the matrix edges.
kernel void simd_gemm(device const float* A [[buffer(0)]],
                      device const float* B [[buffer(1)]],
                      device float* C [[buffer(2)]],
                      constant uint3& mnk [[buffer(3)]],
                      uint2 group [[threadgroup_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]]) {
    threadgroup float a_tile[TILE * BK];
    threadgroup float b_tile[BK * TILE];
    threadgroup float c_tile[TILE * TILE];
    const uint M = mnk.x, N = mnk.y, K = mnk.z;
    const uint row0 = group.y * TILE, col0 = group.x * TILE;
    const uint sg_row = (sg / 2) * 16, sg_col = (sg % 2) * 16;
    simdgroup_float8x8 acc[2][2];
    for (uint i = 0; i < 2; ++i)
        for (uint j = 0; j < 2; ++j)
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint k0 = 0; k0 < K; k0 += BK) {
        for (uint e = tid; e < TILE * BK; e += 128) {
            uint r = e / BK, c = e % BK;
            a_tile[e] = (row0 + r < M && k0 + c < K) ? A[(row0 + r) * K + k0 + c] : 0.0f;
            uint br = e / TILE, bc = e % TILE;
            b_tile[e] = (k0 + br < K && col0 + bc < N) ? B[(k0 + br) * N + col0 + bc] : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < BK; kk += 8) {
            simdgroup_float8x8 a[2], b[2];
            for (uint i = 0; i < 2; ++i)
                simdgroup_load(a[i], a_tile + (sg_row + 8 * i) * BK + kk, BK);
            for (uint j = 0; j < 2; ++j)
                simdgroup_load(b[j], b_tile + kk * TILE + sg_col + 8 * j, TILE);
            for (uint i = 0; i < 2; ++i)
                for (uint j = 0; j < 2; ++j)
                    simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint i = 0; i < 2; ++i)
        for (uint j = 0; j < 2; ++j)
            simdgroup_store(acc[i][j], c_tile + (sg_row + 8 * i) * TILE + sg_col + 8 * j, TILE);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint e = tid; e < TILE * TILE; e += 128) {
        uint r = e / TILE, c = e % TILE;
        if (row0 + r < M && col0 + c < N) C[(row0 + r) * N + col0 + c] = c_tile[e];
    }
}
"#;

#[test]
fn simdgroup_matrix_gemm_with_threadgroup_tiles_declared_in_the_kernel() {
    let compiler = require_compiler!();
    let spec = entry(
        "simd_gemm",
        vec![
            buffer("device const float*"),
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant uint3&"),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadIndexInThreadgroup),
            builtin(Builtin::SimdgroupIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, SIMD_GEMM, &spec);
    assert_eq!(kernel.threadgroup_memory_bytes(), 4 * (32 * 16 * 2 + 32 * 32));
    // Ragged in every dimension.
    let (m, n, k) = (45usize, 38usize, 27usize);
    let mut a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let mut b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
    let mut c = vec![f32::NAN; m * n];
    let mnk = [m as u32, n as u32, k as u32, 0];
    run(
        &kernel,
        &[buf(&mut a), buf(&mut b), buf(&mut c), bytes_of(&mnk)],
        [n.div_ceil(32) as u32, m.div_ceil(32) as u32, 1],
        128,
    );
    for r in 0..m {
        for col in 0..n {
            let expected: f32 = (0..k).map(|i| a[r * k + i] * b[i * n + col]).sum();
            assert_eq!(c[r * n + col], expected, "C[{r}][{col}]");
        }
    }
}

const UNINITIALISED: &str = r#"#include <metal_stdlib>
using namespace metal;

kernel void forgot_to_clear(device const float* x [[buffer(0)]],
                            device float* out [[buffer(1)]],
                            device uint* raw [[buffer(2)]],
                            uint tid [[thread_index_in_threadgroup]]) {
    threadgroup float total;
    threadgroup uint words[32];
    // Bug: nobody sets total = 0 first.
    if (tid == 0) {
        for (uint i = 0; i < 32; ++i) total += x[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[tid] = total;
    raw[tid] = words[tid];
}
"#;

#[test]
fn reading_threadgroup_memory_nobody_wrote_sees_poison() {
    let compiler = require_compiler!();
    let spec = entry(
        "forgot_to_clear",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            buffer("device uint*"),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, UNINITIALISED, &spec);
    let mut x = vec![1f32; 32];
    let mut out = vec![0f32; 32];
    let mut raw = vec![0u32; 32];
    for _ in 0..2 {
        run(
            &kernel,
            &[buf(&mut x), buf(&mut out), buf(&mut raw)],
            [1, 1, 1],
            32,
        );
        assert!(out.iter().all(|v| v.is_nan()), "{out:?}");
        assert!(raw.iter().all(|&w| w == u32::MAX), "{raw:?}");
    }
}

const HISTOGRAM: &str = r#"#include <metal_stdlib>
using namespace metal;

kernel void histogram(device const uchar* bytes [[buffer(0)]],
                      device atomic_uint* bins [[buffer(1)]],
                      constant uint& count [[buffer(2)]],
                      uint gid [[thread_position_in_grid]],
                      uint lid [[thread_index_in_threadgroup]]) {
    threadgroup atomic_uint local_bins[16], seen;
    if (lid < 16) atomic_store_explicit(&local_bins[lid], 0u, memory_order_relaxed);
    if (lid == 0) atomic_store_explicit(&seen, 0u, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (gid < count) {
        atomic_fetch_add_explicit(&local_bins[bytes[gid] % 16], 1u, memory_order_relaxed);
        atomic_fetch_add_explicit(&seen, 1u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lid < 16) atomic_fetch_add_explicit(&bins[lid], atomic_load_explicit(&local_bins[lid], memory_order_relaxed), memory_order_relaxed);
    if (lid == 0) atomic_fetch_add_explicit(&bins[16], atomic_load_explicit(&seen, memory_order_relaxed), memory_order_relaxed);
}
"#;

#[test]
fn threadgroup_atomics_declared_in_the_kernel() {
    let compiler = require_compiler!();
    let spec = entry(
        "histogram",
        vec![
            buffer("device const uchar*"),
            buffer("device atomic_uint*"),
            scalar("constant uint&"),
            builtin(Builtin::ThreadPositionInGrid),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, HISTOGRAM, &spec);
    let count = 1000u32;
    let mut bytes: Vec<u8> = (0..count).map(|i| (i * 37 % 251) as u8).collect();
    let mut bins = vec![0u32; 17];
    run(
        &kernel,
        &[buf(&mut bytes), buf(&mut bins), bytes_of(&count)],
        [8, 1, 1],
        128,
    );
    let mut expected = vec![0u32; 17];
    for &b in &bytes {
        expected[usize::from(b) % 16] += 1;
    }
    expected[16] = count;
    assert_eq!(bins, expected);
}

#[test]
fn rewritten_declarations_keep_every_line_number() {
    let compiler = require_compiler!();
    // A compile error two lines below a (multi-line) threadgroup declaration.
    let msl = format!(
        "{HEADER}kernel void k(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {{\n\
         \x20   threadgroup float\n\
         \x20       scratch[64];\n\
         \x20   scratch[tid] = 1.0f;\n\
         \x20   out[tid] = scratch[tid] + undeclared;\n\
         }}\n"
    );
    let spec = entry(
        "k",
        vec![
            buffer("device float*"),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    match compiler.compile(&msl, &spec) {
        Err(EmuError::Compile { diagnostics, .. }) => {
            assert!(diagnostics.contains("k.metal:8:"), "{diagnostics}");
            assert!(diagnostics.contains("undeclared"), "{diagnostics}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn threadgroup_variables_with_initializers_are_refused() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void init(device float* out [[buffer(0)]]) {{\n    threadgroup float total = 0.0f;\n    out[0] = total;\n}}\n"
    );
    let err = compiler
        .compile(&msl, &entry("init", vec![buffer("device float*")]))
        .expect_err("Metal rejects initialised threadgroup variables");
    assert_eq!(
        err.to_string(),
        "MSL emulator: unsupported MSL: line 5: threadgroup variables cannot have initializers \
         (Metal leaves them undefined)"
    );
}
