//! MSL emulator: SIMD-group functions with exact 32-lane semantics.
// Loops index by thread id, mirroring the kernels.
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::Builtin;
use msl_emu_support::*;

fn lane_params() -> Vec<metile_runtime::msl_emu::EntryParam> {
    vec![
        buffer("device const float*"),
        buffer("device float*"),
        builtin(Builtin::ThreadIndexInThreadgroup),
        builtin(Builtin::ThreadIndexInSimdgroup),
        builtin(Builtin::SimdgroupIndexInThreadgroup),
    ]
}

fn simd_kernel(name: &str, body: &str) -> String {
    format!(
        "{HEADER}kernel void {name}(device const float* x [[buffer(0)]],\n\
         device float* out [[buffer(1)]],\n\
         uint tid [[thread_index_in_threadgroup]],\n\
         uint lane [[thread_index_in_simdgroup]],\n\
         uint sgid [[simdgroup_index_in_threadgroup]])\n{{\n{body}\n}}\n"
    )
}

#[test]
fn shuffle_xor_tree_reduction() {
    let compiler = require_compiler!();
    let body = "    float v = x[tid];\n\
                for (ushort offset = 16; offset > 0; offset /= 2) {\n\
                    v += simd_shuffle_xor(v, offset);\n\
                }\n\
                out[tid] = v;";
    let kernel = compile(
        &compiler,
        &simd_kernel("xor_tree", body),
        &entry("xor_tree", lane_params()),
    );
    let mut x: Vec<f32> = (0..128).map(|i| (i * 7 % 13) as f32).collect();
    let mut out = vec![0f32; 128];
    run(&kernel, &[buf(&mut x), buf(&mut out)], [1, 1, 1], 128);
    for sg in 0..4 {
        let expected: f32 = x[sg * 32..sg * 32 + 32].iter().sum();
        for lane in 0..32 {
            assert_eq!(out[sg * 32 + lane], expected, "simdgroup {sg} lane {lane}");
        }
    }
}

#[test]
fn simd_sum_and_max_per_simdgroup() {
    let compiler = require_compiler!();
    let body = "    float v = x[tid];\n\
                float s = simd_sum(v);\n\
                float m = simd_max(v);\n\
                float lo = simd_min(v);\n\
                int bits = simd_or(int(1u << (lane % 8)));\n\
                if (simd_is_first()) {\n\
                    out[4 * sgid + 0] = s;\n\
                    out[4 * sgid + 1] = m;\n\
                    out[4 * sgid + 2] = lo;\n\
                    out[4 * sgid + 3] = float(bits);\n\
                }";
    let kernel = compile(
        &compiler,
        &simd_kernel("sum_max", body),
        &entry("sum_max", lane_params()),
    );
    let mut x: Vec<f32> = (0..256).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
    let mut out = vec![0f32; 32];
    run(&kernel, &[buf(&mut x), buf(&mut out)], [1, 1, 1], 256);
    for sg in 0..8 {
        let chunk = &x[sg * 32..sg * 32 + 32];
        assert_eq!(out[4 * sg], chunk.iter().sum::<f32>());
        assert_eq!(out[4 * sg + 1], chunk.iter().cloned().fold(f32::MIN, f32::max));
        assert_eq!(out[4 * sg + 2], chunk.iter().cloned().fold(f32::MAX, f32::min));
        assert_eq!(out[4 * sg + 3], 255.0);
    }
}

#[test]
fn shuffle_down_and_up_keep_edge_lanes() {
    let compiler = require_compiler!();
    let body = "    float v = x[tid];\n\
                out[4 * tid + 0] = simd_shuffle_down(v, 5);\n\
                out[4 * tid + 1] = simd_shuffle_up(v, 3);\n\
                out[4 * tid + 2] = simd_shuffle_rotate_down(v, 5);\n\
                out[4 * tid + 3] = simd_shuffle(v, ushort((lane * 7) % 32));";
    let kernel = compile(
        &compiler,
        &simd_kernel("edges", body),
        &entry("edges", lane_params()),
    );
    let mut x: Vec<f32> = (0..64).map(|i| 100.0 + i as f32).collect();
    let mut out = vec![0f32; 256];
    run(&kernel, &[buf(&mut x), buf(&mut out)], [1, 1, 1], 64);
    for sg in 0..2 {
        for lane in 0..32usize {
            let t = sg * 32 + lane;
            let down = if lane + 5 < 32 { x[t + 5] } else { x[t] };
            let up = if lane >= 3 { x[t - 3] } else { x[t] };
            let rotate = x[sg * 32 + (lane + 5) % 32];
            let shuffled = x[sg * 32 + (lane * 7) % 32];
            assert_eq!(
                &out[4 * t..4 * t + 4],
                &[down, up, rotate, shuffled],
                "lane {lane} of simdgroup {sg}"
            );
        }
    }
}

#[test]
fn prefix_sums_ballot_and_broadcast() {
    let compiler = require_compiler!();
    let body = "    float v = x[tid];\n\
                out[5 * tid + 0] = simd_prefix_exclusive_sum(v);\n\
                out[5 * tid + 1] = simd_prefix_inclusive_sum(v);\n\
                out[5 * tid + 2] = float(ulong(simd_ballot(v > 2.0f)) & 0xffffu);\n\
                out[5 * tid + 3] = simd_broadcast(v, 9);\n\
                out[5 * tid + 4] = float(simd_any(v > 4.5f)) + 2.0f * float(simd_all(v >= 0.0f));";
    let kernel = compile(
        &compiler,
        &simd_kernel("scans", body),
        &entry("scans", lane_params()),
    );
    let mut x: Vec<f32> = (0..32).map(|i| (i % 5) as f32).collect();
    let mut out = vec![0f32; 160];
    run(&kernel, &[buf(&mut x), buf(&mut out)], [1, 1, 1], 32);
    let ballot: u32 = (0..16).filter(|&i| x[i] > 2.0).map(|i| 1u32 << i).sum();
    let mut running = 0.0;
    for lane in 0..32 {
        assert_eq!(out[5 * lane], running, "exclusive at lane {lane}");
        running += x[lane];
        assert_eq!(out[5 * lane + 1], running, "inclusive at lane {lane}");
        assert_eq!(out[5 * lane + 2], ballot as f32);
        assert_eq!(out[5 * lane + 3], x[9]);
        assert_eq!(out[5 * lane + 4], 2.0);
    }
}

#[test]
fn returned_lanes_leave_simd_operations() {
    let compiler = require_compiler!();
    // 48 threads: the second simdgroup is partial (16 lanes), and odd threads
    // return before the reduction, so only even live lanes take part.
    let body = "    if (tid % 2 == 1) {\n        return;\n    }\n\
                float s = simd_sum(x[tid]);\n\
                uint first_lane = simd_broadcast_first(lane);\n\
                out[tid] = s + 1000.0f * float(first_lane);";
    let kernel = compile(
        &compiler,
        &simd_kernel("partial", body),
        &entry("partial", lane_params()),
    );
    let mut x: Vec<f32> = (0..48).map(|i| i as f32).collect();
    let mut out = vec![-1f32; 48];
    run(&kernel, &[buf(&mut x), buf(&mut out)], [1, 1, 1], 48);
    let sum0: f32 = (0..32).filter(|i| i % 2 == 0).map(|i| i as f32).sum();
    let sum1: f32 = (32..48).filter(|i| i % 2 == 0).map(|i| i as f32).sum();
    for t in 0..48 {
        let expected = if t % 2 == 1 {
            -1.0
        } else if t < 32 {
            sum0
        } else {
            sum1
        };
        assert_eq!(out[t], expected, "thread {t}");
    }
}

#[test]
fn divergent_simd_calls_are_reported() {
    let compiler = require_compiler!();
    let body = "    float v = x[tid];\n\
                if (lane < 16) {\n        v = simd_sum(v);\n    } else {\n        v = simd_max(v);\n    }\n\
                out[tid] = v;";
    let kernel = compile(
        &compiler,
        &simd_kernel("divergent", body),
        &entry("divergent", lane_params()),
    );
    let mut x = vec![1f32; 32];
    let mut out = vec![0f32; 32];
    // SAFETY: buffers outlive the launch and the kernel stays within them.
    let err = unsafe { kernel.launch(&[buf(&mut x), buf(&mut out)], [1, 1, 1], 32) }.expect_err("divergence");
    let message = err.to_string();
    assert!(message.contains("different SIMD-group operations"), "{message}");
    assert!(
        message.contains("line 12") && message.contains("line 14"),
        "{message}"
    );
}

#[test]
fn back_to_back_shuffles_and_narrow_types() {
    let compiler = require_compiler!();
    // 64 shuffles in a row: a lane that resumes first and races ahead must
    // not overwrite a slot that slower lanes still have to read.
    let body = "    float v = x[tid];\n\
                for (int i = 0; i < 64; ++i) {\n\
                    v = simd_shuffle_rotate_down(v, 1) + float(i % 3);\n\
                }\n\
                half h = simd_sum(half(x[tid]));\n\
                bfloat b = simd_max(bfloat(x[tid]));\n\
                out[3 * tid + 0] = v;\n\
                out[3 * tid + 1] = float(h);\n\
                out[3 * tid + 2] = float(b);";
    let kernel = compile(
        &compiler,
        &simd_kernel("rotations", body),
        &entry("rotations", lane_params()),
    );
    let mut x: Vec<f32> = (0..64).map(|i| i as f32).collect();
    let mut out = vec![0f32; 192];
    run(&kernel, &[buf(&mut x), buf(&mut out)], [1, 1, 1], 64);
    for sg in 0..2 {
        let mut lanes: Vec<f32> = x[sg * 32..sg * 32 + 32].to_vec();
        for i in 0..64 {
            lanes = (0..32).map(|l| lanes[(l + 1) % 32] + (i % 3) as f32).collect();
        }
        // half sums in lane order, rounding after every addition.
        let mut h = half::f16::from_f32(0.0);
        for l in 0..32 {
            h = half::f16::from_f32(h.to_f32() + half::f16::from_f32(x[sg * 32 + l]).to_f32());
        }
        for l in 0..32 {
            let t = sg * 32 + l;
            assert_eq!(out[3 * t], lanes[l], "lane {l} of simdgroup {sg}");
            assert_eq!(out[3 * t + 1], h.to_f32());
            assert_eq!(out[3 * t + 2], x[sg * 32 + 31]);
        }
    }
}
