//! MSL emulator: Metal 4 `mpp::tensor_ops::matmul2d` over one simdgroup on
//! cooperative tensors, filled element by element in MLX's 16x16 fragment
//! layout (the layout the compiler's matmul2d atom declares).
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::Builtin;
use msl_emu_support::*;

const TENSOR_HEADER: &str = "#include <metal_stdlib>\n#include <metal_tensor>\n\
     #include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n\
     using namespace metal;\nusing namespace mpp::tensor_ops;\n\n";

/// `(row, col)` of element `i` of a lane's 16 x 16n cooperative tensor, as
/// the compiler's atom describes it (checked there against MLX's formula).
fn coord(lane: usize, i: usize, cols: usize) -> (usize, usize) {
    let atom = metile_compiler::atoms::MatrixAtom::apple_matmul2d_16x32x16(metile_ir::DType::F16)
        .expect("the matmul2d atom takes f16");
    if cols == 16 {
        atom.a_coord(lane, i).expect("A element")
    } else {
        atom.c_coord(lane, i).expect("C element")
    }
}

/// A kernel in which every simdgroup multiplies its own 16x16 block of `a` by
/// its 16x32 block of `b`, adding its 16x32 block of `c`, with `op` the
/// descriptor's arguments. The fill uses MLX's formula, written in MSL.
fn matmul_kernel(name: &str, operand: &str, descriptor: &str) -> String {
    format!(
        "{TENSOR_HEADER}kernel void {name}(device const float* a [[buffer(0)]],\n\
         device const float* b [[buffer(1)]],\n\
         device float* c [[buffer(2)]],\n\
         uint lane [[thread_index_in_simdgroup]],\n\
         uint sgid [[simdgroup_index_in_threadgroup]])\n\
         {{\n\
           constexpr auto desc = matmul2d_descriptor({descriptor});\n\
           matmul2d<desc, execution_simdgroup> op;\n\
           auto ta = op.get_left_input_cooperative_tensor<{operand}, {operand}, float>();\n\
           auto tb = op.get_right_input_cooperative_tensor<{operand}, {operand}, float>();\n\
           auto tc = op.get_destination_cooperative_tensor<remove_addrspace_t<decltype(ta)>, \
                     remove_addrspace_t<decltype(tb)>, float>();\n\
           uint qid = lane >> 2;\n\
           uint row0 = (qid & 4) | ((lane >> 1) & 3);\n\
           uint col0 = ((qid & 2) | (lane & 1)) * 4;\n\
           device const float* sa = a + sgid * 256;\n\
           device const float* sb = b + sgid * 512;\n\
           device float* sc = c + sgid * 512;\n\
           for (uint i = 0; i < 16; ++i) {{\n\
             uint r = row0 + 8 * ((i % 8) / 4), col = col0 + i % 4 + 16 * (i / 8);\n\
             if (i < 8) ta[i] = {operand}(sa[r * 16 + col]);\n\
             tb[i] = {operand}(sb[r * 32 + col]);\n\
             tc[i] = sc[r * 32 + col];\n\
           }}\n\
           op.run(ta, tb, tc);\n\
           for (uint i = 0; i < 16; ++i) {{\n\
             uint r = row0 + 8 * ((i % 8) / 4), col = col0 + i % 4 + 16 * (i / 8);\n\
             sc[r * 32 + col] = tc[i];\n\
           }}\n\
         }}\n"
    )
}

fn params() -> Vec<metile_runtime::msl_emu::EntryParam> {
    vec![
        buffer("device const float*"),
        buffer("device const float*"),
        buffer("device float*"),
        builtin(Builtin::ThreadIndexInSimdgroup),
        builtin(Builtin::SimdgroupIndexInThreadgroup),
    ]
}

/// Small integers: every product and sum is exact in f32, so any summation
/// order gives the reference's result.
fn operands(sgs: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let a = (0..sgs * 256).map(|i| ((i * 7 + 3) % 11) as f32 - 5.0).collect();
    let b = (0..sgs * 512).map(|i| ((i * 5 + 1) % 9) as f32 - 4.0).collect();
    let c = (0..sgs * 512).map(|i| (i % 13) as f32).collect();
    (a, b, c)
}

fn reference(a: &[f32], b: &[f32], c: &[f32], sgs: usize, accumulate: bool) -> Vec<f32> {
    let mut out = vec![0f32; sgs * 512];
    for s in 0..sgs {
        for r in 0..16 {
            for col in 0..32 {
                let mut acc = if accumulate {
                    c[s * 512 + r * 32 + col]
                } else {
                    0.0
                };
                for k in 0..16 {
                    acc += a[s * 256 + r * 16 + k] * b[s * 512 + k * 32 + col];
                }
                out[s * 512 + r * 32 + col] = acc;
            }
        }
    }
    out
}

#[test]
fn matmul2d_multiplies_and_accumulates_per_simdgroup() {
    let compiler = require_compiler!();
    for (operand, mode, accumulate) in [
        ("half", "multiply_accumulate", true),
        ("bfloat", "multiply_accumulate", true),
        ("half", "multiply", false),
    ] {
        let desc = format!("16, 32, 16, false, false, true, matmul2d_descriptor::mode::{mode}");
        let msl = matmul_kernel("mm", operand, &desc);
        let kernel = compile(&compiler, &msl, &entry("mm", params()));
        let sgs = 2;
        let (mut a, mut b, mut c) = operands(sgs);
        let want = reference(&a, &b, &c, sgs, accumulate);
        run(
            &kernel,
            &[buf(&mut a), buf(&mut b), buf(&mut c)],
            [1, 1, 1],
            32 * sgs as u32,
        );
        assert_eq!(c, want, "{operand} {mode}");
    }
}

#[test]
fn cooperative_tensor_fills_are_checked() {
    // Two simdgroups, buffers for one and a bit: the second simdgroup's fill
    // of its left operand runs past `a`.
    let compiler = require_compiler!();
    let desc = "16, 32, 16, false, false, true, matmul2d_descriptor::mode::multiply_accumulate";
    let kernel = compile(
        &compiler,
        &matmul_kernel("mm_short", "half", desc),
        &entry("mm_short", params()),
    );
    let (mut a, mut b, mut c) = operands(2);
    // SAFETY: the buffers outlive the launch; the overrun is checked.
    let result = unsafe { kernel.launch(&[buf(&mut a[..300]), buf(&mut b), buf(&mut c)], [1, 1, 1], 64) };
    match result {
        Err(metile_runtime::msl_emu::EmuError::Kernel { message, .. }) => assert!(
            message.contains(
                "out-of-bounds access to buffer argument 0 (device const float*): a 4-byte device read"
            ) && message.contains("the buffer has 1200 bytes"),
            "{message}"
        ),
        other => panic!("expected an out-of-bounds error, got {other:?}"),
    }
}

#[test]
fn cooperative_tensors_follow_the_atoms_layouts() {
    // Every lane fills and reads its cooperative tensors at the positions the
    // compiler's atom gives (index tables computed here, in Rust): the product
    // is right only if the shim lays the tensors out exactly as the atom says.
    let compiler = require_compiler!();
    let msl = format!(
        "{TENSOR_HEADER}kernel void tables(device const float* a [[buffer(0)]],\n\
         device const float* b [[buffer(1)]],\n\
         device float* c [[buffer(2)]],\n\
         device const int* at [[buffer(3)]],\n\
         device const int* ct [[buffer(4)]],\n\
         device float* capacity [[buffer(5)]],\n\
         uint lane [[thread_index_in_simdgroup]])\n\
         {{\n\
           constexpr auto desc = matmul2d_descriptor(16, 32, 16, false, false, true,\n\
               matmul2d_descriptor::mode::multiply_accumulate);\n\
           matmul2d<desc, execution_simdgroup> op;\n\
           auto ta = op.get_left_input_cooperative_tensor<half, half, float>();\n\
           auto tb = op.get_right_input_cooperative_tensor<half, half, float>();\n\
           auto tc = op.get_destination_cooperative_tensor<decltype(ta), decltype(tb), float>();\n\
           capacity[lane] = float(ta.get_capacity() * 100 + tc.get_capacity());\n\
           for (uint i = 0; i < 8; ++i) ta[i] = half(a[at[lane * 8 + i]]);\n\
           for (uint i = 0; i < 16; ++i) {{ tb.set(i, half(b[ct[lane * 16 + i]])); tc[i] = c[ct[lane * 16 + i]]; }}\n\
           op.run(ta, tb, tc);\n\
           for (uint i = 0; i < 16; ++i) c[ct[lane * 16 + i]] = tc.get(i);\n\
         }}\n"
    );
    let spec = entry(
        "tables",
        vec![
            buffer("device const float*"),
            buffer("device const float*"),
            buffer("device float*"),
            buffer("device const int*"),
            buffer("device const int*"),
            buffer("device float*"),
            builtin(Builtin::ThreadIndexInSimdgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    // B and C share the atom's 16 x 32 layout, so one table serves both.
    let mut a_table = vec![0i32; 256];
    let mut c_table = vec![0i32; 512];
    for lane in 0..32 {
        for i in 0..8 {
            let (r, col) = coord(lane, i, 16);
            a_table[lane * 8 + i] = (r * 16 + col) as i32;
        }
        for i in 0..16 {
            let (r, col) = coord(lane, i, 32);
            c_table[lane * 16 + i] = (r * 32 + col) as i32;
        }
    }
    let (mut a, mut b, mut c) = operands(1);
    let want = reference(&a, &b, &c, 1, true);
    let mut capacity = vec![0f32; 32];
    run(
        &kernel,
        &[
            buf(&mut a),
            buf(&mut b),
            buf(&mut c),
            buf(&mut a_table),
            buf(&mut c_table),
            buf(&mut capacity),
        ],
        [1, 1, 1],
        32,
    );
    assert_eq!(c, want);
    assert!(
        capacity.iter().all(|&x| x == 816.0),
        "capacities 8 and 16: {capacity:?}"
    );
}

#[test]
fn matmul2d_needs_every_lane_of_the_simdgroup() {
    let compiler = require_compiler!();
    let desc = "16, 32, 16, false, false, true, matmul2d_descriptor::mode::multiply_accumulate";
    let kernel = compile(
        &compiler,
        &matmul_kernel("partial", "half", desc),
        &entry("partial", params()),
    );
    let (mut a, mut b, mut c) = operands(1);
    // SAFETY: the buffers outlive the launch; the kernel fails before touching them out of bounds.
    let err = unsafe { kernel.launch(&[buf(&mut a), buf(&mut b), buf(&mut c)], [1, 1, 1], 16) }
        .expect_err("half a simdgroup");
    assert!(err.to_string().contains("all 32 lanes"), "{err}");
}

#[test]
fn shapes_the_emulator_does_not_implement_are_refused_at_compile_time() {
    let compiler = require_compiler!();
    let desc = "16, 16, 16, false, true, true, matmul2d_descriptor::mode::multiply_accumulate";
    let err = compiler
        .compile(&matmul_kernel("other", "half", desc), &entry("other", params()))
        .expect_err("a transposed right operand is not emulated");
    assert!(
        err.to_string()
            .contains("matmul2d_descriptor(16, 32, 16, false, false, ...) only"),
        "{err}"
    );
}
