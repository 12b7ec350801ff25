//! MSL emulator: simdgroup_matrix load/store, multiply-accumulate and the
//! hardware lane layout of thread_elements().
// Loops index by thread id, mirroring the kernels.
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::Builtin;
use msl_emu_support::*;

/// The documented lane layout, as the compiler's matrix atom describes it:
/// lane -> (row, col) of thread_elements()[0]; element [1] is (row, col + 1).
/// The emulator's simdgroup_matrix is checked against that description.
fn lane_coord(lane: usize) -> (usize, usize) {
    let atom = metile_compiler::atoms::MatrixAtom::apple_simdgroup_8x8(metile_ir::DType::F32)
        .expect("the Apple atom takes f32");
    let (row, col) = atom.c_coord(lane, 0).expect("lane within the atom");
    assert_eq!(atom.c_coord(lane, 1).expect("second value"), (row, col + 1));
    (row, col)
}

#[test]
fn lane_layout_table_covers_the_matrix_once() {
    let mut owner = [[usize::MAX; 8]; 8];
    for lane in 0..32 {
        let (r, c) = lane_coord(lane);
        for k in 0..2 {
            assert_eq!(owner[r][c + k], usize::MAX);
            owner[r][c + k] = lane;
        }
    }
    // First rows of the table in the reference: 0 0 1 1 8 8 9 9 / 2 2 3 3 10 10 11 11.
    assert_eq!(owner[0], [0, 0, 1, 1, 8, 8, 9, 9]);
    assert_eq!(owner[1], [2, 2, 3, 3, 10, 10, 11, 11]);
    assert_eq!(owner[7], [22, 22, 23, 23, 30, 30, 31, 31]);
}

#[test]
fn thread_elements_follow_the_hardware_layout() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void layout(device const float* m [[buffer(0)]],\n\
         device float* seen [[buffer(1)]],\n\
         device float* written [[buffer(2)]],\n\
         uint lane [[thread_index_in_simdgroup]])\n\
         {{\n\
             simdgroup_float8x8 a;\n\
             simdgroup_load(a, m, 8);\n\
             seen[2 * lane + 0] = a.thread_elements()[0];\n\
             seen[2 * lane + 1] = a.thread_elements()[1];\n\
             // MLX style: write the lane's fragment, then store the whole matrix.\n\
             simdgroup_float8x8 b;\n\
             reinterpret_cast<thread float2&>(b.thread_elements()) = float2(2 * lane, 2 * lane + 1);\n\
             simdgroup_store(b, written, 8);\n\
         }}\n"
    );
    let spec = entry(
        "layout",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            buffer("device float*"),
            builtin(Builtin::ThreadIndexInSimdgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let mut m: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut seen = vec![0f32; 64];
    let mut written = vec![0f32; 64];
    run(
        &kernel,
        &[buf(&mut m), buf(&mut seen), buf(&mut written)],
        [1, 1, 1],
        32,
    );
    for lane in 0..32 {
        let (r, c) = lane_coord(lane);
        for k in 0..2 {
            assert_eq!(
                seen[2 * lane + k],
                (r * 8 + c + k) as f32,
                "lane {lane} element {k}"
            );
            assert_eq!(
                written[r * 8 + c + k],
                (2 * lane + k) as f32,
                "lane {lane} element {k}"
            );
        }
    }
}

fn reference_gemm(a: &[f32], b: &[f32], c: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut d = c.to_vec();
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                d[i * n + j] += a[i * k + p] * b[p * n + j];
            }
        }
    }
    d
}

#[test]
fn multiply_accumulate_matches_scalar_reference() {
    let compiler = require_compiler!();
    // One simdgroup computes D(8x8) = A(8x32) * B(32x8) + C, staging B in
    // threadgroup memory and loading A transposed from a column-major copy.
    let msl = format!(
        "{HEADER}kernel void mma(device const float* a [[buffer(0)]],\n\
         device const float* a_col_major [[buffer(1)]],\n\
         device const float* b [[buffer(2)]],\n\
         device const float* c [[buffer(3)]],\n\
         device float* d [[buffer(4)]],\n\
         device float* d_transposed_path [[buffer(5)]],\n\
         threadgroup float* b_tile [[threadgroup(0)]],\n\
         uint lane [[thread_index_in_simdgroup]])\n\
         {{\n\
             for (uint i = lane; i < 32 * 8; i += 32) b_tile[i] = b[i];\n\
             simdgroup_barrier(mem_flags::mem_threadgroup);\n\
             simdgroup_float8x8 acc, acc_t, ma, ma_t, mb, mc;\n\
             simdgroup_load(mc, c, 8);\n\
             acc = mc;\n\
             acc_t = mc;\n\
             for (uint kk = 0; kk < 32; kk += 8) {{\n\
                 simdgroup_load(ma, a + kk, 32);\n\
                 simdgroup_load(ma_t, a_col_major + kk * 8, 8, ulong2(0, 0), true);\n\
                 simdgroup_load(mb, b_tile + kk * 8, 8);\n\
                 simdgroup_multiply_accumulate(acc, ma, mb, acc);\n\
                 simdgroup_multiply_accumulate(acc_t, ma_t, mb, acc_t);\n\
             }}\n\
             simdgroup_store(acc, d, 8);\n\
             simdgroup_store(acc_t, d_transposed_path, 8);\n\
         }}\n"
    );
    let spec = entry(
        "mma",
        vec![
            buffer("device const float*"),
            buffer("device const float*"),
            buffer("device const float*"),
            buffer("device const float*"),
            buffer("device float*"),
            buffer("device float*"),
            threadgroup("threadgroup float*", 32 * 8 * 4),
            builtin(Builtin::ThreadIndexInSimdgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let mut a: Vec<f32> = (0..8 * 32).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    // Column-major copy: element (r, p) at p * 8 + r.
    let mut a_col: Vec<f32> = (0..8 * 32).map(|i| a[(i % 8) * 32 + i / 8]).collect();
    let mut b: Vec<f32> = (0..32 * 8).map(|i| ((i * 5) % 7) as f32 * 0.5).collect();
    let mut c: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut d = vec![0f32; 64];
    let mut d_t = vec![0f32; 64];
    run(
        &kernel,
        &[
            buf(&mut a),
            buf(&mut a_col),
            buf(&mut b),
            buf(&mut c),
            buf(&mut d),
            buf(&mut d_t),
        ],
        [1, 1, 1],
        32,
    );
    let expected = reference_gemm(&a, &b, &c, 8, 8, 32);
    assert_eq!(d, expected);
    assert_eq!(d_t, expected, "transposed load path");
}

#[test]
fn mixed_precision_half_and_bfloat_operands() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void mixed(device const half* ah [[buffer(0)]],\n\
         device const half* bh [[buffer(1)]],\n\
         device const bfloat* ab [[buffer(2)]],\n\
         device const bfloat* bb [[buffer(3)]],\n\
         device float* d [[buffer(4)]],\n\
         device half* dh [[buffer(5)]],\n\
         uint sgid [[simdgroup_index_in_threadgroup]])\n\
         {{\n\
             simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8>(1.0f);\n\
             if (sgid == 0) {{\n\
                 simdgroup_half8x8 a, b;\n\
                 simdgroup_load(a, ah, 8);\n\
                 simdgroup_load(b, bh, 8);\n\
                 simdgroup_multiply_accumulate(acc, a, b, acc);\n\
                 simdgroup_store(acc, d, 8);\n\
                 simdgroup_half8x8 h;\n\
                 simdgroup_multiply(h, a, b);\n\
                 simdgroup_store(h, dh, 8);\n\
             }} else {{\n\
                 simdgroup_bfloat8x8 a, b;\n\
                 simdgroup_load(a, ab, 8);\n\
                 simdgroup_load(b, bb, 8);\n\
                 simdgroup_multiply_accumulate(acc, a, b, acc);\n\
                 simdgroup_store(acc, d + 64, 8);\n\
             }}\n\
         }}\n"
    );
    let spec = entry(
        "mixed",
        vec![
            buffer("device const half*"),
            buffer("device const half*"),
            buffer("device const bfloat*"),
            buffer("device const bfloat*"),
            buffer("device float*"),
            buffer("device half*"),
            builtin(Builtin::SimdgroupIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let af: Vec<f32> = (0..64).map(|i| (i % 9) as f32 * 0.125 - 0.5).collect();
    let bf: Vec<f32> = (0..64).map(|i| (i % 5) as f32 * 0.25 + 0.0625).collect();
    let mut ah: Vec<u16> = af.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    let mut bh: Vec<u16> = bf.iter().map(|&v| half::f16::from_f32(v).to_bits()).collect();
    let mut ab: Vec<u16> = af.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
    let mut bb: Vec<u16> = bf.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
    let mut d = vec![0f32; 128];
    let mut dh = vec![0u16; 64];
    run(
        &kernel,
        &[
            buf(&mut ah),
            buf(&mut bh),
            buf(&mut ab),
            buf(&mut bb),
            buf(&mut d),
            buf(&mut dh),
        ],
        [1, 1, 1],
        64,
    );
    // These values are exact in half and bfloat, so the float results are exact.
    let ones = vec![1.0f32; 64];
    let expected = reference_gemm(&af, &bf, &ones, 8, 8, 8);
    assert_eq!(&d[..64], &expected[..], "half operands, float accumulator");
    assert_eq!(&d[64..], &expected[..], "bfloat operands, float accumulator");
    let zeros = vec![0.0f32; 64];
    let product = reference_gemm(&af, &bf, &zeros, 8, 8, 8);
    let got: Vec<f32> = dh.iter().map(|&h| half::f16::from_bits(h).to_f32()).collect();
    let want: Vec<f32> = product.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
    assert_eq!(got, want, "half result rounded once from the float product");
}

#[test]
fn matrix_multiply_needs_the_whole_simdgroup() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void partial(device float* d [[buffer(0)]])\n\
         {{\n\
             simdgroup_float8x8 a = make_filled_simdgroup_matrix<float, 8>(1.0f);\n\
             simdgroup_float8x8 r;\n\
             simdgroup_multiply(r, a, a);\n\
             simdgroup_store(r, d, 8);\n\
         }}\n"
    );
    let kernel = compile(&compiler, &msl, &entry("partial", vec![buffer("device float*")]));
    let mut d = vec![0f32; 64];
    // SAFETY: the buffer outlives the launch; the kernel fails before storing.
    let err = unsafe { kernel.launch(&[buf(&mut d)], [1, 1, 1], 16) }.expect_err("partial simdgroup");
    assert!(err.to_string().contains("all 32 lanes"), "{err}");
}
