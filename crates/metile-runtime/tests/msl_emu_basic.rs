//! MSL emulator: element-wise kernels, grids, scalar types, compile errors,
//! launch validation and the disk cache.
// Loops index by thread id, mirroring the kernels.
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::{Builtin, EmuError, LaunchArg};
use msl_emu_support::*;

const VECTOR_ADD: &str = r#"#include <metal_stdlib>
using namespace metal;

kernel void vector_add(device const float* a [[buffer(0)]],
                       device const float* b [[buffer(1)]],
                       device float* out [[buffer(2)]],
                       constant int& n [[buffer(3)]],
                       uint3 tgpig [[threadgroup_position_in_grid]],
                       uint3 ntg [[threads_per_threadgroup]],
                       uint tid [[thread_index_in_threadgroup]])
{
    int i = int(tgpig.x * ntg.x + tid);
    if (i >= n) {
        return;
    }
    out[i] = a[i] + b[i];
}
"#;

fn vector_add_entry() -> metile_runtime::msl_emu::EntrySpec {
    entry(
        "vector_add",
        vec![
            buffer("device const float*"),
            buffer("device const float*"),
            buffer("device float*"),
            scalar("constant int&"),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadsPerThreadgroup),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    )
}

#[test]
fn vector_add_ragged_with_guard() {
    let compiler = require_compiler!();
    let kernel = compile(&compiler, VECTOR_ADD, &vector_add_entry());
    let n: i32 = 1000;
    let mut a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    // One spare element past n must stay untouched.
    let mut out = vec![-1.0f32; n as usize + 1];
    let threads = 128;
    let groups = (n as u32).div_ceil(threads);
    run(
        &kernel,
        &[buf(&mut a), buf(&mut b), buf(&mut out), bytes_of(&n)],
        [groups, 1, 1],
        threads,
    );
    for i in 0..n as usize {
        assert_eq!(out[i], 1.5 * i as f32, "element {i}");
    }
    assert_eq!(
        out[n as usize], -1.0,
        "the guard must keep threads past n from writing"
    );
}

#[test]
fn three_dimensional_grid_positions() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void where_am_i(device uint4* out [[buffer(0)]],\n\
         uint3 tgpig [[threadgroup_position_in_grid]],\n\
         uint3 tgpg [[threadgroups_per_grid]],\n\
         uint3 tpig [[thread_position_in_grid]],\n\
         uint tid [[thread_index_in_threadgroup]])\n\
         {{\n\
             uint group = (tgpig.z * tgpg.y + tgpig.y) * tgpg.x + tgpig.x;\n\
             out[group * 32 + tid] = uint4(tgpig, tpig.x);\n\
         }}\n"
    );
    let spec = entry(
        "where_am_i",
        vec![
            buffer("device uint4*"),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadgroupsPerGrid),
            builtin(Builtin::ThreadPositionInGrid),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let grid = [3u32, 4, 5];
    let mut out = vec![[0u32; 4]; 3 * 4 * 5 * 32];
    run(&kernel, &[buf(&mut out)], grid, 32);
    for z in 0..5 {
        for y in 0..4 {
            for x in 0..3 {
                let group = (z * 4 + y) * 3 + x;
                for t in 0..32 {
                    assert_eq!(out[(group * 32 + t) as usize], [x, y, z, x * 32 + t]);
                }
            }
        }
    }
}

#[test]
fn half_and_bfloat_round_trips_and_arithmetic() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void narrow(device const float* x [[buffer(0)]],\n\
         device float* out [[buffer(1)]],\n\
         device half* h_out [[buffer(2)]],\n\
         device bfloat* b_out [[buffer(3)]],\n\
         uint i [[thread_index_in_threadgroup]])\n\
         {{\n\
             half h = half(x[i]);\n\
             bfloat b = bfloat(x[i]);\n\
             h_out[i] = h;\n\
             b_out[i] = b;\n\
             out[4 * i + 0] = float(h);\n\
             out[4 * i + 1] = b;\n\
             out[4 * i + 2] = float(h * 3.0h + 1.0h);\n\
             out[4 * i + 3] = float(b * bfloat(3.0f) + bfloat(1.0f));\n\
         }}\n"
    );
    let spec = entry(
        "narrow",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            buffer("device half*"),
            buffer("device bfloat*"),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    // Ties and near-ties for both formats, tiny and huge values, negative zero.
    let mut x: Vec<f32> = vec![
        1.0,
        1.0 + 1.0 / 2048.0, // half tie: rounds to even (1.0)
        1.0 + 3.0 / 2048.0, // half tie: rounds to even (1 + 2/1024)
        1.0 + 1.0 / 256.0,  // bfloat tie: rounds to even (1.0)
        1.0 + 3.0 / 256.0,  // bfloat tie: rounds up
        -2.5,
        65504.0,
        70000.0, // overflows half to infinity
        1e-8,
        -0.0,
        0.1,
        -1234.567,
    ];
    let n = x.len();
    let mut out = vec![0f32; 4 * n];
    let mut h = vec![0u16; n];
    let mut b = vec![0u16; n];
    run(
        &kernel,
        &[buf(&mut x), buf(&mut out), buf(&mut h), buf(&mut b)],
        [1, 1, 1],
        n as u32,
    );
    for i in 0..n {
        let hf = half::f16::from_f32(x[i]);
        let bf = half::bf16::from_f32(x[i]);
        assert_eq!(h[i], hf.to_bits(), "half bits of {}", x[i]);
        assert_eq!(b[i], bf.to_bits(), "bfloat bits of {}", x[i]);
        assert_eq!(out[4 * i].to_bits(), hf.to_f32().to_bits());
        assert_eq!(out[4 * i + 1].to_bits(), bf.to_f32().to_bits());
        // Each half operation rounds to half.
        let h3 = half::f16::from_f32(hf.to_f32() * 3.0);
        let expect_h = half::f16::from_f32(h3.to_f32() + 1.0).to_f32();
        assert_eq!(
            out[4 * i + 2].to_bits(),
            expect_h.to_bits(),
            "half arithmetic on {}",
            x[i]
        );
        let b3 = half::bf16::from_f32(bf.to_f32() * 3.0);
        let expect_b = half::bf16::from_f32(b3.to_f32() + 1.0).to_f32();
        assert_eq!(
            out[4 * i + 3].to_bits(),
            expect_b.to_bits(),
            "bfloat arithmetic on {}",
            x[i]
        );
    }
}

#[test]
fn vectors_math_and_atomics() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void mixed(device const float4* x [[buffer(0)]],\n\
         device float4* out [[buffer(1)]],\n\
         device atomic_int* counter [[buffer(2)]],\n\
         device atomic_float* total [[buffer(3)]],\n\
         uint i [[thread_index_in_threadgroup]])\n\
         {{\n\
             float4 v = x[i];\n\
             int4 truncated = int4(v);\n\
             float4 back = float4(truncated);\n\
             bool4 positive = v > 0.0f;\n\
             float4 picked = select(float4(-1.0f), back, positive);\n\
             out[2 * i] = float4(max(v.x, v.y), clamp(v.z, -1.0f, 1.0f), exp(0.0f) + fma(v.w, 2.0f, 1.0f), float(all(positive)));\n\
             out[2 * i + 1] = picked + float4(float2(1.0f, 2.0f), 3, as_type<float>(0x3f800000u));\n\
             atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);\n\
             atomic_fetch_add_explicit(total, v.x, memory_order_relaxed);\n\
         }}\n"
    );
    let spec = entry(
        "mixed",
        vec![
            buffer("device const float4*"),
            buffer("device float4*"),
            buffer("device atomic_int*"),
            buffer("device atomic_float*"),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, &msl, &spec);
    let mut x: Vec<[f32; 4]> = (0..64)
        .map(|i| [i as f32 - 10.5, 2.0, 0.25 * i as f32, 1.5])
        .collect();
    let mut out = vec![[0f32; 4]; 128];
    let mut counter = [0i32];
    let mut total = [0f32];
    let grid_groups = 4;
    for _ in 0..grid_groups {
        run(
            &kernel,
            &[buf(&mut x), buf(&mut out), buf(&mut counter), buf(&mut total)],
            [1, 1, 1],
            64,
        );
    }
    assert_eq!(counter[0], 64 * grid_groups);
    let expected_total: f32 = x.iter().map(|v| v[0]).sum::<f32>() * grid_groups as f32;
    assert!(
        (total[0] - expected_total).abs() < 1e-3,
        "{} vs {expected_total}",
        total[0]
    );
    for (i, v) in x.iter().enumerate() {
        let all_positive = v.iter().all(|&c| c > 0.0);
        assert_eq!(
            out[2 * i],
            [
                v[0].max(v[1]),
                v[2].clamp(-1.0, 1.0),
                1.0 + v[3] * 2.0 + 1.0,
                all_positive as u8 as f32
            ]
        );
        let picked: Vec<f32> = v
            .iter()
            .map(|&c| if c > 0.0 { (c as i32) as f32 } else { -1.0 })
            .collect();
        assert_eq!(
            out[2 * i + 1],
            [picked[0] + 1.0, picked[1] + 2.0, picked[2] + 3.0, picked[3] + 1.0]
        );
    }
}

#[test]
fn compile_error_carries_clang_diagnostics() {
    let compiler = require_compiler!();
    let msl = format!(
        "{HEADER}kernel void broken(device float* x [[buffer(0)]], uint i [[thread_index_in_threadgroup]])\n\
         {{\n    x[i] = undefined_name * 2.0f;\n}}\n"
    );
    let spec = entry(
        "broken",
        vec![
            buffer("device float*"),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let err = compiler.compile(&msl, &spec).expect_err("must not compile");
    match &err {
        EmuError::Compile { diagnostics, .. } => {
            assert!(diagnostics.contains("undefined_name"), "{diagnostics}");
            assert!(
                diagnostics.contains("broken.metal:6:"),
                "diagnostics point at the MSL line: {diagnostics}"
            );
        }
        other => panic!("expected a compile error, got {other}"),
    }
}

#[test]
fn address_spaces_are_checked() {
    let compiler = require_compiler!();
    // Metal rejects converting a device pointer to a thread pointer; so must the emulator.
    let msl = format!(
        "{HEADER}kernel void leak(device float* x [[buffer(0)]])\n{{\n    float* p = x;\n    p[0] = 1.0f;\n}}\n"
    );
    let err = compiler
        .compile(&msl, &entry("leak", vec![buffer("device float*")]))
        .expect_err("must not compile");
    assert!(matches!(err, EmuError::Compile { .. }), "{err}");
}

#[test]
fn disk_cache_reuses_the_shared_object() {
    let Some(compiler) = compiler() else { return };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("msl-emu-cache-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let compiler = compiler.with_cache_dir(&dir);
    let first = compile(&compiler, VECTOR_ADD, &vector_add_entry());
    assert!(!first.from_disk_cache());
    let entry = first.cache_entry().expect("stored in the cache").to_path_buf();
    let modified = std::fs::metadata(&entry)
        .and_then(|m| m.modified())
        .expect("metadata");
    let second = compile(&compiler, VECTOR_ADD, &vector_add_entry());
    assert!(second.from_disk_cache(), "second compile must hit the disk cache");
    assert_eq!(second.cache_entry(), Some(entry.as_path()));
    assert_ne!(
        first.library_path(),
        second.library_path(),
        "each load is a private copy, never the cache entry itself"
    );
    let again = std::fs::metadata(&entry)
        .and_then(|m| m.modified())
        .expect("metadata");
    assert_eq!(modified, again, "the cached object must not be rebuilt");
    // A different kernel text is a different cache entry.
    let other = compile(
        &compiler,
        &VECTOR_ADD.replace("a[i] + b[i]", "a[i] - b[i]"),
        &vector_add_entry(),
    );
    assert_ne!(other.cache_entry(), first.cache_entry());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn launch_arguments_are_validated() {
    let compiler = require_compiler!();
    let kernel = compile(&compiler, VECTOR_ADD, &vector_add_entry());
    let mut a = vec![0f32; 4];
    let n: i64 = 4; // wrong size: the kernel takes an int
    let too_few: Vec<LaunchArg> = vec![buf(&mut a)];
    // SAFETY: every one of these launches is refused before running.
    unsafe {
        assert!(matches!(
            kernel.launch(&too_few, [1, 1, 1], 4),
            Err(EmuError::BadLaunch(_))
        ));
        let mut b = vec![0f32; 4];
        let mut c = vec![0f32; 4];
        let args = [buf(&mut a), buf(&mut b), buf(&mut c), bytes_of(&n)];
        let err = kernel.launch(&args, [1, 1, 1], 4).expect_err("wrong scalar size");
        assert!(err.to_string().contains("4"), "{err}");
        let n32 = 4i32;
        let args = [buf(&mut a), buf(&mut b), buf(&mut c), bytes_of(&n32)];
        assert!(matches!(
            kernel.launch(&args, [1, 1, 1], 1025),
            Err(EmuError::BadLaunch(_))
        ));
        assert!(matches!(
            kernel.launch(&args, [1, 1, 1], 0),
            Err(EmuError::BadLaunch(_))
        ));
        let swapped = [bytes_of(&n32), buf(&mut b), buf(&mut c), bytes_of(&n32)];
        assert!(matches!(
            kernel.launch(&swapped, [1, 1, 1], 4),
            Err(EmuError::BadLaunch(_))
        ));
    }
}
