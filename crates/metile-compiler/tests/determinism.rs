//! The emitted MSL is byte-identical from one compilation to the next (nothing
//! depends on hash-map iteration order), and the GPU IR of every kernel shape
//! passes the verifier.

mod common;

use metile_compiler::{compile_gpu_ir, compile_msl, CompileOptions};
use metile_ir::{print_gpu_function, verify_gpu, DType, Function};

fn kernels() -> Vec<Function> {
    vec![
        common::add(256, DType::F32),
        common::add(100, DType::BF16),
        common::softmax(1024),
        common::softmax(64),
        common::gemm(32, 32, 16, DType::F32),
        common::gemm(64, 64, 32, DType::F16),
        common::gemm(128, 128, 64, DType::F32),
    ]
}

#[test]
fn compiling_twice_gives_identical_bytes() {
    for f in kernels() {
        for num_sgs in [None, Some(1), Some(4)] {
            let options = CompileOptions {
                num_sgs,
                keep_gpu_ir: true,
                ..Default::default()
            };
            let a = compile_msl(&f, &options).unwrap();
            let b = compile_msl(&f.clone(), &options).unwrap();
            assert_eq!(a.kernel.source, b.kernel.source, "{}", f.name);
            assert_eq!(a.gpu_ir, b.gpu_ir, "{}", f.name);
            assert_eq!(a, b);
        }
    }
}

#[test]
fn gpu_ir_of_every_kernel_verifies() {
    for f in kernels() {
        for num_sgs in [None, Some(2), Some(8)] {
            let options = CompileOptions {
                num_sgs,
                keep_gpu_ir: false,
                ..Default::default()
            };
            let gpu = compile_gpu_ir(&f, &options, &metile_compiler::Target::apple()).unwrap();
            verify_gpu(&gpu, metile_ir::Vendor::Apple)
                .unwrap_or_else(|e| panic!("{}: {e}\n{}", f.name, print_gpu_function(&gpu)));
        }
    }
}

#[test]
fn the_default_threadgroup_size_follows_the_largest_tile() {
    let threads = |f: &Function| {
        compile_msl(f, &CompileOptions::default())
            .unwrap()
            .kernel
            .threads_per_group
    };
    assert_eq!(threads(&common::add(128, DType::F32)), 32);
    assert_eq!(threads(&common::add(256, DType::F32)), 64);
    assert_eq!(threads(&common::add(512, DType::F32)), 128);
    assert_eq!(threads(&common::add(1024, DType::F32)), 256);
    assert_eq!(threads(&common::add(4096, DType::F32)), 256);
    assert_eq!(threads(&common::add(96, DType::F32)), 32);
    // GEMM: the 32x32 accumulator has 1024 elements.
    assert_eq!(threads(&common::gemm(32, 32, 16, DType::F32)), 256);
}
