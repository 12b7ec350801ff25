//! Golden CUDA C++ for the seed kernels (produced without a GPU): any change to
//! the emitted text shows up as a snapshot diff to review (`cargo insta review`).

mod common;

use metile_compiler::{compile_cuda, CudaParam, Target};
use metile_ir::DType;

fn compile(f: &metile_ir::Function) -> metile_compiler::CudaKernel {
    // The Tile IR passes run first, as they do for every kernel that ships.
    let f = metile_compiler::optimize_tile_ir(f.clone()).unwrap_or_else(|e| panic!("{e}"));
    compile_cuda(&f, &common::without_l2_order(), &Target::nvidia(9, 0))
        .unwrap_or_else(|e| panic!("{e}"))
        .kernel
}

#[test]
fn add_cuda() {
    let k = compile(&common::add(256, DType::F32));
    assert_eq!(k.threads_per_group, 64);
    assert!(matches!(
        k.params[2],
        CudaParam::Buffer {
            written: true,
            dtype: DType::F32,
            ..
        }
    ));
    insta::assert_snapshot!("add_cuda", k.source);
}

#[test]
fn add_bf16_cuda() {
    let k = compile(&common::add(1024, DType::BF16));
    assert!(k.source.contains("#include <cuda_bf16.h>"));
    assert!(!k.source.contains("#include <cuda_fp16.h>"));
    insta::assert_snapshot!("add_bf16_cuda", k.source);
}

#[test]
fn softmax_cuda() {
    let k = compile(&common::softmax(1024));
    assert_eq!(k.threads_per_group, 256);
    insta::assert_snapshot!("softmax_cuda", k.source);
}

#[test]
fn gemm_f16_cuda() {
    // mma.sync, as on the A100 and as on the H100 with the wgmma pass off.
    let f = metile_compiler::optimize_tile_ir(common::gemm(64, 64, 32, DType::F16))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut options = common::without_l2_order();
    options.passes.set("wgmma", false);
    let k = compile_cuda(&f, &options, &Target::nvidia(9, 0))
        .unwrap_or_else(|e| panic!("{e}"))
        .kernel;
    assert!(k.shared_bytes > 0);
    assert_eq!(k.arch, "sm_90");
    insta::assert_snapshot!("gemm_f16_cuda", k.source);
}

/// fp8 tiles (converted to f16 by the builder) multiply on the fp8 `wgmma`
/// (with `fp8_wgmma` off they take the f16 one): `k32` steps (two
/// warpgroups of 64 x 32 each), both operands K-major, no transpose
/// immediates, the first step of each `dot` overwriting an accumulator array
/// of its own that is then added into the f32 accumulators.
#[test]
fn gemm_fp8_wgmma_cuda() {
    let f = common::gemm(64, 64, 64, DType::F8E4M3);
    let k = compile(&f);
    assert_eq!(k.arch, "sm_90a");
    let instruction = "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3";
    assert_eq!(k.source.matches(instruction).count(), 2);
    assert!(!k.source.contains("k16.f32"));
    assert_eq!(k.source.matches("\"r\"(0) : \"memory\"").count(), 1);
    insta::assert_snapshot!("gemm_fp8_wgmma_cuda", k.source);
    let mut options = common::without_l2_order();
    options.passes.set("fp8_wgmma", false);
    let optimized = metile_compiler::optimize_tile_ir(f).unwrap_or_else(|e| panic!("{e}"));
    let f16 = compile_cuda(&optimized, &options, &Target::nvidia(9, 0))
        .unwrap_or_else(|e| panic!("{e}"))
        .kernel;
    assert!(!f16.source.contains("e4m3.e4m3") && f16.source.contains("k16.f32.f16.f16"));
}

#[test]
fn gemm_f16_wgmma_cuda() {
    let k = compile(&common::gemm(64, 64, 32, DType::F16));
    assert_eq!(k.arch, "sm_90a");
    assert!(k
        .source
        .contains("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"));
    insta::assert_snapshot!("gemm_f16_wgmma_cuda", k.source);
}

#[test]
fn cuda_line_table_maps_back_to_kernel_lines() {
    let k = compile(&common::add(256, DType::F32));
    let store_line = k
        .source
        .lines()
        .position(|l| l.contains("Out[") || l.contains("metile_vec<float, 4>*)(Out"))
        .expect("a store") as u32
        + 1;
    assert!(k.loc_of_line(store_line).is_some());
}
