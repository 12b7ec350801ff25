//! Time of each compilation stage for the test kernels (the seeds' add,
//! softmax and GEMM built as the frontend traces them), with op counts, to see
//! where compile time goes without Python in the way:
//! `cargo run --release -p metile-compiler --example stage_times`.

#[path = "../tests/common/mod.rs"]
mod common;

use metile_compiler::{gpu_passes, layout_assign, lower, msl, optimize_tile_ir};
use metile_ir::gpu_ir::GpuFunction;
use metile_ir::{verify, verify_gpu, DType, Function};
use std::time::Instant;

fn ops(f: &GpuFunction) -> usize {
    let mut n = 0;
    f.walk(&mut |_| n += 1);
    n
}

/// Best time of `f` over a few rounds, in microseconds per call.
fn time<T>(mut f: impl FnMut() -> T) -> f64 {
    let rounds = 200;
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..rounds {
            std::hint::black_box(f());
        }
        best = best.min(start.elapsed().as_secs_f64() / f64::from(rounds));
    }
    best * 1e6
}

fn report(name: &str, traced: Function) {
    let tile = optimize_tile_ir(traced.clone()).expect("optimizes");
    let target = metile_compiler::Target::apple();
    let threads = layout_assign::choose_threads(&tile, None, &target).expect("threads");
    let switches = metile_compiler::Switches::defaults(&target);
    let lowered = lower::lower(&tile, threads, &target, &switches).expect("lowers");
    let mut merged = lowered.clone();
    gpu_passes::eliminate_common_subexpressions(&mut merged);
    let mut pruned = merged.clone();
    gpu_passes::eliminate_dead_code(&mut pruned);
    println!(
        "{name}: GPU IR ops lowered {}, after CSE {}, after DCE {}",
        ops(&lowered),
        ops(&merged),
        ops(&pruned)
    );
    let stages = [
        ("tile passes", time(|| optimize_tile_ir(traced.clone()))),
        ("tile verify", time(|| verify(&tile))),
        (
            "layouts",
            time(|| layout_assign::assign(&tile, threads, &target, &switches)),
        ),
        ("lower", time(|| lower::lower(&tile, threads, &target, &switches))),
        ("verify lowered", time(|| verify_gpu(&lowered, target.vendor()))),
        // The two passes below are timed on a copy; this is the copy alone.
        ("(clone)", time(|| lowered.clone())),
        (
            "cse",
            time(|| gpu_passes::eliminate_common_subexpressions(&mut lowered.clone())),
        ),
        (
            "dce",
            time(|| gpu_passes::eliminate_dead_code(&mut merged.clone())),
        ),
        ("verify final", time(|| verify_gpu(&pruned, target.vendor()))),
        ("emit", time(|| msl::emit_msl(&pruned))),
        (
            "compile_msl",
            time(|| metile_compiler::compile_msl(&tile, &Default::default())),
        ),
    ];
    for (stage, us) in stages {
        println!("  {stage:<15} {us:8.1} us");
    }
}

fn main() {
    report("add", common::add(1024, DType::F32));
    report("softmax", common::softmax(1024));
    report("gemm 64x64x32", common::gemm(64, 64, 32, DType::F32));
}
