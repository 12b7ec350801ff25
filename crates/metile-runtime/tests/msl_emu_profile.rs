//! MSL emulator: profiled launches count what kernels do, on kernels whose
//! counts are known by hand: strided threadgroup accesses with no, 2-way and
//! 32-way bank conflicts, broadcasts, vector accesses, simdgroup matrix loads
//! and products, matmul2d, barriers, divergent lanes and a full access log.

mod msl_emu_support;

use metile_runtime::msl_emu::{Builtin, EmuError, EmuKernel, EmuProfile, LaunchArg, ThreadgroupSite};
use msl_emu_support::*;

fn profiled(kernel: &EmuKernel, args: &[LaunchArg], grid: [u32; 3], threads: u32) -> EmuProfile {
    // SAFETY: tests pass buffers that outlive the launch and kernels that stay in bounds.
    match unsafe { kernel.launch_profiled(args, grid, threads) } {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    }
}

/// Each lane writes `in[lane]` to word `lane * stride` of threadgroup memory,
/// then reads it back from word `read_word(lane)`.
fn strided_kernel(read_index: &str) -> String {
    format!(
        "{HEADER}kernel void strided(device const float* in [[buffer(0)]],\n\
         device float* out [[buffer(1)]],\n\
         constant uint& stride [[buffer(2)]],\n\
         threadgroup float* tile [[threadgroup(0)]],\n\
         uint lane [[thread_index_in_simdgroup]],\n\
         uint group [[threadgroup_position_in_grid]]) {{\n\
           uint s = stride;\n\
           tile[lane * s] = in[group * 32 + lane];\n\
           threadgroup_barrier(mem_flags::mem_threadgroup);\n\
           out[group * 32 + lane] = tile[{read_index}];\n\
         }}\n"
    )
}

fn strided_spec() -> metile_runtime::msl_emu::EntrySpec {
    entry(
        "strided",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant uint&"),
            threadgroup("threadgroup float*", 33 * 32 * 4),
            builtin(Builtin::ThreadIndexInSimdgroup),
            builtin(Builtin::ThreadgroupPositionInGrid),
        ],
    )
}

#[test]
fn strides_give_the_bank_conflicts_counted_by_hand() {
    let compiler = require_compiler!().with_profiling(true);
    let msl = strided_kernel("lane * s");
    let kernel = compile(&compiler, &msl, &strided_spec());
    assert!(kernel.is_profiled() && kernel.is_checked());
    let groups = 3u32;
    let mut input: Vec<f32> = (0..32 * groups).map(|i| i as f32 * 0.5).collect();
    // Word lane * stride: stride 1 and 33 spread the lanes over the 32 banks,
    // 2 puts two words in each of 16 banks, 32 all 32 words in bank 0.
    for (stride, degree) in [(1u32, 1u64), (2, 2), (32, 32), (33, 1)] {
        let mut out = vec![0f32; input.len()];
        let p = profiled(
            &kernel,
            &[buf(&mut input), buf(&mut out), bytes_of(&stride)],
            [groups, 1, 1],
            32,
        );
        assert_eq!(out, input, "stride {stride}");
        let g = u64::from(groups);
        assert_eq!(p.threadgroups, g);
        assert_eq!(p.threads, 32 * g);
        assert_eq!(
            (p.threadgroup_stores, p.threadgroup_store_bytes),
            (32 * g, 128 * g)
        );
        assert_eq!((p.threadgroup_loads, p.threadgroup_load_bytes), (32 * g, 128 * g));
        assert_eq!((p.device_loads, p.device_load_bytes), (32 * g, 128 * g));
        assert_eq!((p.device_stores, p.device_store_bytes), (32 * g, 128 * g));
        assert_eq!((p.constant_loads, p.constant_load_bytes), (32 * g, 128 * g));
        assert_eq!(p.threadgroup_store_instructions, g);
        assert_eq!(p.threadgroup_load_instructions, g);
        assert_eq!(p.threadgroup_store_wavefronts, degree * g, "stride {stride}");
        assert_eq!(p.threadgroup_load_wavefronts, degree * g, "stride {stride}");
        assert_eq!(p.threadgroup_min_wavefronts, 2 * g);
        assert_eq!(p.bank_conflict_ratio(), Some(degree as f64));
        assert_eq!(p.threadgroup_barriers, g);
        assert_eq!(p.divergent_intervals + p.unpaired_threadgroup_accesses, 0);
        assert_eq!(p.simdgroup_mma + p.simd_operations, 0);
        // The store and the load, each at its own line of the MSL.
        let line_of = |text: &str| msl_line(&msl, text);
        let site = |line, store, wavefronts| ThreadgroupSite {
            msl_line: Some(line),
            store,
            instructions: g,
            wavefronts,
            min_wavefronts: g,
        };
        let mut sites = p.threadgroup_sites.clone();
        sites.sort_by_key(|s| s.msl_line);
        assert_eq!(
            sites,
            vec![
                site(line_of("tile[lane * s] ="), true, degree * g),
                site(line_of("= tile["), false, degree * g)
            ],
            "stride {stride}"
        );
    }
}

/// The 1-based line of `msl` that contains `text`.
fn msl_line(msl: &str, text: &str) -> u32 {
    let index = msl
        .lines()
        .position(|l| l.contains(text))
        .expect("text in the MSL");
    index as u32 + 1
}

#[test]
fn a_broadcast_word_costs_nothing_more() {
    let compiler = require_compiler!().with_profiling(true);
    let mut input: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut out = vec![0f32; 64];
    // Every lane reads word 0: one word, one wavefront per group.
    let kernel = compile(&compiler, &strided_kernel("0"), &strided_spec());
    let stride = 1u32;
    let p = profiled(
        &kernel,
        &[buf(&mut input), buf(&mut out), bytes_of(&stride)],
        [2, 1, 1],
        32,
    );
    assert_eq!(&out[..32], &[0.0; 32]);
    assert_eq!(&out[32..], &[32.0; 32]);
    assert_eq!(
        (p.threadgroup_load_instructions, p.threadgroup_load_wavefronts),
        (2, 2)
    );
    assert_eq!(p.threadgroup_min_wavefronts, 2 + 2);
    // Written at stride 32 (32-way), read by even lanes from word 0 and odd
    // lanes from word 32: two words of bank 0, each read by 16 lanes, cost 2.
    let kernel = compile(&compiler, &strided_kernel("(lane % 2) * s"), &strided_spec());
    let stride = 32u32;
    let p = profiled(
        &kernel,
        &[buf(&mut input), buf(&mut out), bytes_of(&stride)],
        [2, 1, 1],
        32,
    );
    for (i, &v) in out.iter().enumerate() {
        assert_eq!(v, input[i / 32 * 32 + i % 2], "element {i}");
    }
    assert_eq!(
        (p.threadgroup_store_instructions, p.threadgroup_store_wavefronts),
        (2, 64)
    );
    assert_eq!(
        (p.threadgroup_load_instructions, p.threadgroup_load_wavefronts),
        (2, 4)
    );
}

const MATRIX_KERNEL: &str = r#"#include <metal_stdlib>
using namespace metal;

// Stages an 8 x ROW_WORDS float block in threadgroup memory (two elements per
// lane of each row, rows of `row_words` floats), multiplies its leading 8x8
// matrix by itself (`transpose`: by its transpose) and stores the product.
kernel void matrix(device const float* in [[buffer(0)]],
                   device float* out [[buffer(1)]],
                   constant uint& row_words [[buffer(2)]],
                   constant uint& transpose [[buffer(3)]],
                   threadgroup float* tile [[threadgroup(0)]],
                   uint lane [[thread_index_in_simdgroup]]) {
    uint words = row_words;
    uint row = lane / 4, col = (lane % 4) * 2;
    tile[row * words + col] = in[row * 8 + col];
    tile[row * words + col + 1] = in[row * 8 + col + 1];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 a, b;
    simdgroup_float8x8 c = make_filled_simdgroup_matrix<float, 8>(0.0f);
    simdgroup_load(a, tile, words);
    simdgroup_load(b, tile, words, ulong2(0, 0), transpose != 0);
    simdgroup_multiply_accumulate(c, a, b, c);
    simdgroup_store(c, out, 8);
}
"#;

fn matrix_spec() -> metile_runtime::msl_emu::EntrySpec {
    entry(
        "matrix",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant uint&"),
            scalar("constant uint&"),
            threadgroup("threadgroup float*", 8 * 32 * 4),
            builtin(Builtin::ThreadIndexInSimdgroup),
        ],
    )
}

#[test]
fn matrix_loads_products_and_stores_are_counted_per_simdgroup() {
    let compiler = require_compiler!().with_profiling(true);
    let kernel = compile(&compiler, MATRIX_KERNEL, &matrix_spec());
    let mut input: Vec<f32> = (0..64).map(|i| (i % 7) as f32 - 3.0).collect();
    // Each lane reads two adjacent words of row (lane / 2) % 4 + 4 * (lane / 16),
    // column 2 * (lane % 2) + 4 * ((lane / 8) % 2): with rows of 8 words the
    // 64 words fill every bank twice (2 wavefronts, the least 64 words need);
    // with rows of 32 words they all fall in banks 0..7, 8 words each.
    for (row_words, transpose, load_degree) in [(8u32, 0u32, 2u64), (32, 0, 8), (8, 1, 2), (32, 1, 8)] {
        let mut out = vec![0f32; 64];
        let p = profiled(
            &kernel,
            &[
                buf(&mut input),
                buf(&mut out),
                bytes_of(&row_words),
                bytes_of(&transpose),
            ],
            [1, 1, 1],
            32,
        );
        let at = |r: usize, c: usize| input[r * 8 + c];
        for r in 0..8 {
            for c in 0..8 {
                let expected: f32 = (0..8)
                    .map(|k| at(r, k) * if transpose == 1 { at(c, k) } else { at(k, c) })
                    .sum();
                assert_eq!(
                    out[r * 8 + c],
                    expected,
                    "({r}, {c}) rows of {row_words}, transpose {transpose}"
                );
            }
        }
        let case = format!("rows of {row_words}, transpose {transpose}");
        assert_eq!(p.matrix_loads_threadgroup, 2, "{case}");
        assert_eq!(p.simdgroup_mma, 1, "{case}");
        assert_eq!(p.matrix_stores_device, 1, "{case}");
        assert_eq!(p.matrix_loads_device + p.matrix_stores_threadgroup, 0, "{case}");
        // Two element stores per lane, then one two-element load per lane and matrix.
        assert_eq!(
            (p.threadgroup_stores, p.threadgroup_store_bytes),
            (64, 256),
            "{case}"
        );
        assert_eq!(
            (p.threadgroup_loads, p.threadgroup_load_bytes),
            (64, 512),
            "{case}"
        );
        assert_eq!((p.device_stores, p.device_store_bytes), (32, 256), "{case}");
        assert_eq!(p.threadgroup_load_instructions, 2, "{case}");
        // The transposed load reads column-major: lane words (col, row) and
        // (col + 1, row), which touch the same banks as the plain load's.
        assert_eq!(p.threadgroup_load_wavefronts, 2 * load_degree, "{case}");
        // 32 words per element store, 64 per matrix load.
        assert_eq!(p.threadgroup_min_wavefronts, 1 + 1 + 2 + 2, "{case}");
        assert_eq!(p.simd_operations, 1, "{case}");
        assert_eq!(p.threadgroup_barriers, 1, "{case}");
        assert_eq!(p.divergent_intervals, 0, "{case}");
        // Each simdgroup_load is attributed to its kernel line, through the inlined shim.
        for (line, text) in [(0, "simdgroup_load(a,"), (1, "simdgroup_load(b,")] {
            let at = msl_line(MATRIX_KERNEL, text);
            let found = p
                .threadgroup_sites
                .iter()
                .find(|s| s.msl_line == Some(at) && !s.store);
            assert_eq!(
                found.map(|s| (s.instructions, s.wavefronts)),
                Some((1, load_degree)),
                "{case}, load {line}: {:?}",
                p.threadgroup_sites
            );
        }
    }
}

#[test]
fn vector_accesses_need_one_wavefront_per_32_words() {
    let compiler = require_compiler!().with_profiling(true);
    let msl = format!(
        "{HEADER}kernel void vectors(device const float4* in [[buffer(0)]],\n\
         device float4* out [[buffer(1)]],\n\
         threadgroup float4* tile [[threadgroup(0)]],\n\
         uint tid [[thread_index_in_threadgroup]]) {{\n\
           tile[tid] = in[tid];\n\
           simdgroup_barrier(mem_flags::mem_threadgroup);\n\
           out[tid] = tile[tid ^ 1];\n\
         }}\n"
    );
    let spec = entry(
        "vectors",
        vec![
            buffer("device const float4*"),
            buffer("device float4*"),
            threadgroup("threadgroup float4*", 64 * 16),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let mut input: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let mut out = vec![0f32; 256];
    let p = profiled(&kernel, &[buf(&mut input), buf(&mut out)], [1, 1, 1], 64);
    for t in 0..64 {
        assert_eq!(out[t * 4..t * 4 + 4], input[(t ^ 1) * 4..(t ^ 1) * 4 + 4]);
    }
    // 16-byte accesses: 128 words a simdgroup, 4 in each bank.
    assert_eq!((p.threadgroup_stores, p.threadgroup_store_bytes), (64, 1024));
    assert_eq!((p.device_loads, p.device_load_bytes), (64, 1024));
    assert_eq!(
        (p.threadgroup_store_instructions, p.threadgroup_store_wavefronts),
        (2, 8)
    );
    assert_eq!(
        (p.threadgroup_load_instructions, p.threadgroup_load_wavefronts),
        (2, 8)
    );
    assert_eq!(p.threadgroup_min_wavefronts, 16);
    assert_eq!(p.bank_conflict_ratio(), Some(4.0));
    assert_eq!(p.bank_conflict_excess(), Some(1.0));
    assert_eq!((p.simdgroup_barriers, p.simd_operations), (2, 2));
    assert_eq!(p.threadgroup_barriers, 0);
}

#[test]
fn divergent_lanes_and_a_full_log_are_reported() {
    let compiler = require_compiler!().with_profiling(true);
    let msl = format!(
        "{HEADER}kernel void diverge(device float* out [[buffer(0)]],\n\
         constant uint& repeats [[buffer(1)]],\n\
         threadgroup float* tile [[threadgroup(0)]],\n\
         uint lane [[thread_index_in_simdgroup]]) {{\n\
           uint n = repeats;\n\
           tile[lane] = float(lane);\n\
           if (lane < 16) tile[lane + 32] = 1.0f;\n\
           float sum = simd_sum(tile[lane]);\n\
           for (uint i = 0; i < n; ++i) tile[lane] = float(i);\n\
           out[lane] = sum;\n\
         }}\n"
    );
    let spec = entry(
        "diverge",
        vec![
            buffer("device float*"),
            scalar("constant uint&"),
            threadgroup("threadgroup float*", 64 * 4),
            builtin(Builtin::ThreadIndexInSimdgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let mut out = vec![0f32; 32];
    let repeats = 10u32;
    let p = profiled(&kernel, &[buf(&mut out), bytes_of(&repeats)], [1, 1, 1], 32);
    assert_eq!(out, vec![496.0; 32]);
    // Before simd_sum, lanes 0..16 logged three accesses and the others two.
    assert_eq!(p.divergent_intervals, 1);
    assert_eq!(p.threadgroup_stores, 32 + 16 + 32 * 10);
    assert_eq!(p.threadgroup_store_instructions, 2 + 10);
    assert_eq!(p.threadgroup_load_instructions, 1);
    assert_eq!(p.unpaired_threadgroup_accesses, 0);
    // One group of 32 threads logs 8192 accesses per thread between two
    // synchronisation points; the rest are counted but paired into nothing.
    let repeats = 20_000u32;
    let p = profiled(&kernel, &[buf(&mut out), bytes_of(&repeats)], [1, 1, 1], 32);
    assert_eq!(p.threadgroup_stores, 32 + 16 + 32 * 20_000);
    assert_eq!(p.threadgroup_store_instructions, 2 + 8_192);
    assert_eq!(p.unpaired_threadgroup_accesses, 32 * (20_000 - 8_192));
}

#[test]
fn matmul2d_runs_are_counted() {
    let compiler = require_compiler!().with_profiling(true);
    let msl = "#include <metal_stdlib>\n#include <metal_tensor>\n\
         #include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>\n\
         using namespace metal;\nusing namespace mpp::tensor_ops;\n\n\
         kernel void mm(device float* out [[buffer(0)]], uint tid [[thread_position_in_grid]]) {\n\
           constexpr auto desc = matmul2d_descriptor(16, 32, 16, false, false, true,\n\
                                                     matmul2d_descriptor::mode::multiply_accumulate);\n\
           matmul2d<desc, execution_simdgroup> op;\n\
           auto a = op.get_left_input_cooperative_tensor<half, half, float>();\n\
           auto b = op.get_right_input_cooperative_tensor<half, half, float>();\n\
           auto c = op.get_destination_cooperative_tensor<remove_addrspace_t<decltype(a)>,\n\
                                                          remove_addrspace_t<decltype(b)>, float>();\n\
           for (int i = 0; i < 8; ++i) a[i] = half(1.0h);\n\
           for (int i = 0; i < 16; ++i) { b[i] = half(1.0h); c[i] = 0.0f; }\n\
           op.run(a, b, c);\n\
           op.run(a, b, c);\n\
           out[tid] = c[0];\n\
         }\n";
    let spec = entry(
        "mm",
        vec![buffer("device float*"), builtin(Builtin::ThreadPositionInGrid)],
    );
    let kernel = compile(&compiler, msl, &spec);
    let mut out = vec![0f32; 128];
    let p = profiled(&kernel, &[buf(&mut out)], [2, 1, 1], 64);
    assert_eq!(out, vec![32.0; 128]);
    assert_eq!(p.matmul2d_runs, 2 * 2 * 2);
    assert_eq!(p.simd_operations, 2 * 2 * 2);
    assert_eq!((p.device_stores, p.device_store_bytes), (128, 512));
    assert_eq!(p.simdgroup_mma + p.threadgroup_instructions(), 0);
}

#[test]
fn only_profiled_builds_count_and_they_are_cached_apart() {
    let compiler = require_compiler!();
    let msl = strided_kernel("lane * s");
    let plain = compile(&compiler, &msl, &strided_spec());
    assert!(!plain.is_profiled());
    let mut input = vec![1f32; 32];
    let mut out = vec![0f32; 32];
    let stride = 1u32;
    let args = [buf(&mut input), buf(&mut out), bytes_of(&stride)];
    // SAFETY: the buffers outlive the launch.
    let refused = unsafe { plain.launch_profiled(&args, [1, 1, 1], 32) };
    match refused {
        Err(EmuError::BadLaunch(message)) => assert_eq!(
            message,
            "kernel `strided` was not built for profiling (EmuCompiler::with_profiling)"
        ),
        other => panic!("expected BadLaunch, got {other:?}"),
    }
    // An unchecked compiler still builds the profiled variant checked.
    let unchecked = compiler.clone().with_checks(false);
    let counted = compile(&unchecked.clone().with_profiling(true), &msl, &strided_spec());
    assert!(counted.is_profiled() && counted.is_checked());
    assert_ne!(counted.cache_entry(), plain.cache_entry());
    // A profiled kernel also launches without counting.
    run(&counted, &args, [1, 1, 1], 32);
    assert_eq!(out, input);
    assert!(!compile(&unchecked, &msl, &strided_spec()).is_profiled());
}
