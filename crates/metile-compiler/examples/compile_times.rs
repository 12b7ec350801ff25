//! Time of each target-phase stage for Tile IR read from files (printed traced
//! kernels), on Apple and sm_90:
//! `cargo run --release -p metile-compiler --example compile_times -- FILE.tir ...`.

use std::time::Instant;

use metile_compiler::{compile, CompileOptions, Target};

fn main() {
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2000);
    for path in std::env::args().skip(1) {
        let text = std::fs::read_to_string(&path).expect("reads the file");
        let func = metile_ir::text::parse_function(&text).expect("parses");
        for target in [Target::apple(), Target::nvidia(9, 0)] {
            let plain = CompileOptions::default();
            let mut best = f64::INFINITY;
            for _ in 0..5 {
                let start = Instant::now();
                for _ in 0..rounds {
                    std::hint::black_box(compile(&func, &plain, &target).expect("compiles"));
                }
                best = best.min(start.elapsed().as_secs_f64() / rounds as f64);
            }
            let recorded = CompileOptions {
                record_stages: true,
                ..Default::default()
            };
            let mut stages: Vec<(&str, u128)> = vec![];
            for _ in 0..rounds.min(200) {
                let c = compile(&func, &recorded, &target).expect("compiles");
                if stages.is_empty() {
                    stages = c.records.iter().map(|r| (r.name, r.nanos)).collect();
                } else {
                    for (s, r) in stages.iter_mut().zip(&c.records) {
                        s.1 = s.1.min(r.nanos);
                    }
                }
            }
            println!("{path} {}: {:.1} us", target.arch_name(), best * 1e6);
            for (name, nanos) in stages {
                if nanos > 200 {
                    println!("    {name:<32} {:8.1} us", nanos as f64 / 1e3);
                }
            }
        }
    }
}
