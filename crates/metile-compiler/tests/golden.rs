//! Golden MSL (and GPU IR) for the seed kernels: any change to the emitted text
//! shows up as a snapshot diff to review (`cargo insta review`).

mod common;

use metile_compiler::{compile_msl, CompileOptions};
use metile_ir::DType;

fn compile(f: &metile_ir::Function) -> metile_compiler::MslCompilation {
    let options = CompileOptions {
        num_sgs: None,
        keep_gpu_ir: true,
        ..common::without_l2_order()
    };
    // The Tile IR passes run first, as they do for every kernel that ships.
    let f = metile_compiler::optimize_tile_ir(f.clone()).unwrap_or_else(|e| panic!("{e}"));
    compile_msl(&f, &options).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn add_msl() {
    let c = compile(&common::add(256, DType::F32));
    assert_eq!(c.kernel.threads_per_group, 64);
    insta::assert_snapshot!("add_msl", c.kernel.source);
}

#[test]
fn add_gpu_ir() {
    let c = compile(&common::add(256, DType::F32));
    insta::assert_snapshot!("add_gpu_ir", c.gpu_ir.unwrap_or_default());
}

#[test]
fn add_f16_msl() {
    insta::assert_snapshot!(
        "add_f16_msl",
        compile(&common::add(1024, DType::F16)).kernel.source
    );
}

#[test]
fn softmax_msl() {
    let c = compile(&common::softmax(1024));
    assert_eq!(c.kernel.threads_per_group, 256);
    insta::assert_snapshot!("softmax_msl", c.kernel.source);
}

#[test]
fn gemm_msl() {
    let c = compile(&common::gemm(32, 32, 16, DType::F32));
    insta::assert_snapshot!("gemm_msl", c.kernel.source);
}

#[test]
fn gemm_f16_msl() {
    insta::assert_snapshot!(
        "gemm_f16_msl",
        compile(&common::gemm(64, 64, 32, DType::F16)).kernel.source
    );
}

/// The seed softmax after the Tile IR passes: the carried maximum and sum keep
/// their previous value in the absent lanes of the ragged last block (`select`
/// against the block argument), and the final store needs no select because
/// its mask is the value's presence.
#[test]
fn softmax_tile_ir_after_the_absent_lane_pass() {
    let f = metile_compiler::optimize_tile_ir(common::softmax(128)).unwrap_or_else(|e| panic!("{e}"));
    insta::assert_snapshot!("softmax_tile_ir", metile_ir::print_function(&f));
}
