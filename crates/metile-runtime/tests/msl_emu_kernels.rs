//! MSL emulator: whole kernels of the shapes meTile emits (a row softmax with
//! the emitter's exact signature, a tiled simdgroup-matrix GEMM), checked
//! against references computed here.
// Loops index by thread id, mirroring the kernels.
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::Builtin;
use msl_emu_support::*;

const SOFTMAX: &str = r#"#include <metal_stdlib>
using namespace metal;

kernel void softmax(device const float* X [[buffer(0)]],
                    device float* Out [[buffer(1)]],
                    constant int& N [[buffer(2)]],
                    threadgroup float* tg0 [[threadgroup(0)]],
                    uint3 tgpig [[threadgroup_position_in_grid]],
                    uint3 tgpg [[threadgroups_per_grid]],
                    uint tid [[thread_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]],
                    uint sgid [[simdgroup_index_in_threadgroup]])
{
    const uint nthreads = 256;
    const uint nsg = nthreads / 32;
    device const float* x = X + tgpig.x * uint(N);
    device float* out = Out + tgpig.x * uint(N);

    float m = -INFINITY;
    for (uint i = tid; i < uint(N); i += nthreads) {
        m = max(m, x[i]);
    }
    m = simd_max(m);
    if (lane == 0) {
        tg0[sgid] = m;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    m = tg0[0];
    for (uint s = 1; s < nsg; ++s) {
        m = max(m, tg0[s]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float sum = 0.0f;
    for (uint i = tid; i < uint(N); i += nthreads) {
        sum += exp(x[i] - m);
    }
    sum = simd_sum(sum);
    if (lane == 0) {
        tg0[sgid] = sum;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    sum = 0.0f;
    for (uint s = 0; s < nsg; ++s) {
        sum += tg0[s];
    }
    for (uint i = tid; i < uint(N); i += nthreads) {
        out[i] = exp(x[i] - m) / sum;
    }
    (void)tgpg;
}
"#;

#[test]
fn row_softmax_with_the_emitter_signature() {
    let compiler = require_compiler!();
    let spec = entry(
        "softmax",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant int&"),
            threadgroup("threadgroup float*", 8 * 4),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadgroupsPerGrid),
            builtin(Builtin::ThreadIndexInThreadgroup),
            builtin(Builtin::ThreadIndexInSimdgroup),
            builtin(Builtin::SimdgroupIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, SOFTMAX, &spec);
    let (rows, n) = (37usize, 1000i32);
    let mut x: Vec<f32> = (0..rows * n as usize)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
        .collect();
    let mut out = vec![0f32; x.len()];
    run(
        &kernel,
        &[buf(&mut x), buf(&mut out), bytes_of(&n)],
        [rows as u32, 1, 1],
        256,
    );
    for r in 0..rows {
        let row = &x[r * n as usize..(r + 1) * n as usize];
        let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&v| ((v - m) as f64).exp()).sum();
        for i in 0..n as usize {
            let expected = ((row[i] - m) as f64).exp() / sum;
            let got = out[r * n as usize + i] as f64;
            assert!(
                (got - expected).abs() <= 1e-6 * expected.max(1e-3),
                "row {r} col {i}: {got} vs {expected}"
            );
        }
    }
}

const GEMM: &str = r#"#include <metal_stdlib>
using namespace metal;

// C[M x N] = A[M x K] * B[K x N], row-major. A threadgroup of 4 simdgroups
// computes a 32x32 tile of C; simdgroup s owns the 16x16 quadrant (s / 2, s % 2)
// as 2x2 simdgroup matrices. K advances in steps of 16 through threadgroup
// memory with barriers; M, N, K are multiples of 32 and 16.
kernel void gemm(device const half* A [[buffer(0)]],
                 device const half* B [[buffer(1)]],
                 device float* C [[buffer(2)]],
                 constant uint& M [[buffer(3)]],
                 constant uint& N [[buffer(4)]],
                 constant uint& K [[buffer(5)]],
                 threadgroup half* a_tile [[threadgroup(0)]],
                 threadgroup half* b_tile [[threadgroup(1)]],
                 uint3 tgpig [[threadgroup_position_in_grid]],
                 uint tid [[thread_index_in_threadgroup]],
                 uint sgid [[simdgroup_index_in_threadgroup]])
{
    const uint row0 = tgpig.y * 32;
    const uint col0 = tgpig.x * 32;
    const uint sg_row = (sgid / 2) * 16;
    const uint sg_col = (sgid % 2) * 16;
    simdgroup_float8x8 acc[2][2];
    for (uint i = 0; i < 2; ++i) {
        for (uint j = 0; j < 2; ++j) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8>(0.0f);
        }
    }
    for (uint k0 = 0; k0 < K; k0 += 16) {
        // a_tile: 32 x 16, b_tile: 16 x 32; 128 threads move 4 elements each.
        for (uint e = tid; e < 32 * 16; e += 128) {
            uint r = e / 16, c = e % 16;
            a_tile[r * 16 + c] = A[(row0 + r) * K + k0 + c];
            uint br = e / 32, bc = e % 32;
            b_tile[br * 32 + bc] = B[(k0 + br) * N + col0 + bc];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < 16; kk += 8) {
            simdgroup_half8x8 a[2], b[2];
            for (uint i = 0; i < 2; ++i) {
                simdgroup_load(a[i], a_tile + (sg_row + 8 * i) * 16 + kk, 16);
                simdgroup_load(b[i], b_tile + kk * 32 + sg_col + 8 * i, 32);
            }
            for (uint i = 0; i < 2; ++i) {
                for (uint j = 0; j < 2; ++j) {
                    simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint i = 0; i < 2; ++i) {
        for (uint j = 0; j < 2; ++j) {
            simdgroup_store(acc[i][j], C + (row0 + sg_row + 8 * i) * N + col0 + sg_col + 8 * j, N);
        }
    }
    (void)M;
}
"#;

#[test]
fn tiled_simdgroup_matrix_gemm() {
    let compiler = require_compiler!();
    let spec = entry(
        "gemm",
        vec![
            buffer("device const half*"),
            buffer("device const half*"),
            buffer("device float*"),
            scalar("constant uint&"),
            scalar("constant uint&"),
            scalar("constant uint&"),
            threadgroup("threadgroup half*", 32 * 16 * 2),
            threadgroup("threadgroup half*", 16 * 32 * 2),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadIndexInThreadgroup),
            builtin(Builtin::SimdgroupIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, GEMM, &spec);
    let (m, n, k) = (64u32, 96u32, 48u32);
    // Small integers and halves: exact in half and in float sums.
    let af: Vec<f32> = (0..m * k).map(|i| ((i * 13) % 9) as f32 - 4.0).collect();
    let bf: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 7) as f32 * 0.5 - 1.5).collect();
    let mut a: Vec<u16> = af.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    let mut b: Vec<u16> = bf.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    let mut c = vec![f32::NAN; (m * n) as usize];
    let args = [
        buf(&mut a),
        buf(&mut b),
        buf(&mut c),
        bytes_of(&m),
        bytes_of(&n),
        bytes_of(&k),
    ];
    run(&kernel, &args, [n / 32, m / 32, 1], 128);
    for i in 0..m as usize {
        for j in 0..n as usize {
            let expected: f32 = (0..k as usize)
                .map(|p| af[i * k as usize + p] * bf[p * n as usize + j])
                .sum();
            assert_eq!(c[i * n as usize + j], expected, "C[{i}][{j}]");
        }
    }
}
