//! MSL emulator: a broad sweep of the Metal shim (types, conversions, math,
//! SIMD functions on vectors, packed types, builtin declared types), checked
//! against values computed here.
// Loops index by thread id, mirroring the kernels.
#![allow(clippy::needless_range_loop)]

mod msl_emu_support;

use metile_runtime::msl_emu::Builtin;
use msl_emu_support::*;

const SWEEP: &str = r#"#include <metal_stdlib>
using namespace metal;

// A helper with its own address-space-qualified parameters, as emitted code has.
static inline float load_scaled(device const float* p, uint i, float scale) {
    return p[i] * scale;
}

kernel void sweep(device const float* x [[buffer(0)]],
                  device float* out [[buffer(1)]],
                  device packed_float3* packed [[buffer(2)]],
                  device half4* h4 [[buffer(3)]],
                  constant float& scale [[buffer(4)]],
                  threadgroup float4* stage [[threadgroup(0)]],
                  ushort3 tpitg [[thread_position_in_threadgroup]],
                  ushort lane [[thread_index_in_simdgroup]],
                  uint2 tgpig [[threadgroup_position_in_grid]],
                  uint width [[threads_per_simdgroup]])
{
    uint i = tpitg.x;
    float v = load_scaled(x, i, scale);
    float4 f4 = float4(v, v + 1.0f, -v, 0.5f);
    half4 hv = half4(f4);
    h4[i] = hv * 2.0h;
    float4 back = float4(hv);
    stage[i] = back;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float4 neighbour = stage[(i + 1) % 32];
    float4 summed = simd_sum(f4);
    uint2 pair = uint2(i, tgpig.x);
    uint2 shuffled = simd_shuffle_xor(pair, ushort(1));
    float3 p3 = packed[i];
    packed[i] = packed_float3(p3.x + 1.0f, p3.y, float(width));
    bfloat4 b4 = bfloat4(f4);
    float bsum = float(b4.x) + float(b4.y);
    float m = fast::exp(0.0f) + precise::tanh(0.0f) + exp2(1.0f) + log2(8.0f) + rsqrt(4.0f)
            + sqrt(16.0f) + abs(-2.0f) + floor(1.5f) + ceil(1.5f) + trunc(-1.5f) + round(2.5f);
    half hm = max(half(1.0h), half(2.0h)) + min(half(3.0h), half(4.0h));
    int im = max(3, 7) + min(-3, 2) + clamp(12, 0, 10) + abs(-4);
    bool ok = !isnan(v) && isfinite(v) && all(f4 == f4) && !any(isinf(f4));
    out[16 * i + 0] = summed.x;
    out[16 * i + 1] = summed.z;
    out[16 * i + 2] = float(shuffled.x);
    out[16 * i + 3] = neighbour.y;
    out[16 * i + 4] = bsum;
    out[16 * i + 5] = m;
    out[16 * i + 6] = float(hm);
    out[16 * i + 7] = float(im);
    out[16 * i + 8] = float(ok);
    out[16 * i + 9] = dot(f4, float4(1.0f));
    out[16 * i + 10] = float(lane);
    out[16 * i + 11] = select(1.0f, 2.0f, v > 3.0f);
    out[16 * i + 12] = float(uint(-1.0f * 0.0f) + uint(as_type<uint>(1.0f) >> 23));
    out[16 * i + 13] = fast::tanh(100.0f);
    out[16 * i + 14] = precise::tanh(100.0f);
    out[16 * i + 15] = fma(v, 2.0f, 1.0f);
}
"#;

#[test]
fn shim_sweep() {
    let compiler = require_compiler!();
    let spec = entry(
        "sweep",
        vec![
            buffer("device const float*"),
            buffer("device float*"),
            buffer("device packed_float3*"),
            buffer("device half4*"),
            scalar("constant float&"),
            threadgroup("threadgroup float4*", 32 * 16),
            builtin(Builtin::ThreadPositionInThreadgroup),
            builtin(Builtin::ThreadIndexInSimdgroup),
            builtin(Builtin::ThreadgroupPositionInGrid),
            builtin(Builtin::ThreadsPerSimdgroup),
        ],
    );
    let kernel = compile(&compiler, SWEEP, &spec);
    let mut x: Vec<f32> = (0..32).map(|i| i as f32 * 0.25).collect();
    let mut out = vec![0f32; 32 * 16];
    let mut packed: Vec<[f32; 3]> = (0..32).map(|i| [i as f32, 1.0, 2.0]).collect();
    let mut h4 = vec![[0u16; 4]; 32];
    let scale = 2.0f32;
    run(
        &kernel,
        &[
            buf(&mut x),
            buf(&mut out),
            buf(&mut packed),
            buf(&mut h4),
            bytes_of(&scale),
        ],
        [1, 1, 1],
        32,
    );
    let v: Vec<f32> = x.iter().map(|&a| a * scale).collect();
    let sum_v: f32 = v.iter().sum();
    for i in 0..32 {
        let o = &out[16 * i..16 * i + 16];
        assert_eq!(o[0], sum_v, "simd_sum of a float4, x component");
        assert_eq!(o[1], -sum_v, "simd_sum of a float4, z component");
        assert_eq!(o[2], (i ^ 1) as f32, "shuffle of a uint2");
        let next = v[(i + 1) % 32];
        assert_eq!(
            o[3],
            half::f16::from_f32(next + 1.0).to_f32(),
            "threadgroup float4 through half"
        );
        let b = |f: f32| half::bf16::from_f32(f).to_f32();
        assert_eq!(o[4], b(v[i]) + b(v[i] + 1.0));
        assert_eq!(
            o[5],
            1.0 + 0.0 + 2.0 + 3.0 + 0.5 + 4.0 + 2.0 + 1.0 + 2.0 - 1.0 + 3.0
        );
        assert_eq!(o[6], 5.0);
        assert_eq!(o[7], 7.0 - 3.0 + 10.0 + 4.0);
        assert_eq!(o[8], 1.0);
        assert_eq!(o[9], v[i] + v[i] + 1.0 - v[i] + 0.5);
        assert_eq!(o[10], (i % 32) as f32);
        assert_eq!(o[11], if v[i] > 3.0 { 2.0 } else { 1.0 });
        assert_eq!(o[12], 127.0);
        assert!(
            o[13].is_nan(),
            "fast::tanh overflows for large inputs, as on Apple GPUs"
        );
        assert_eq!(o[14], 1.0);
        assert_eq!(o[15], v[i] * 2.0 + 1.0);
        assert_eq!(packed[i], [i as f32 + 1.0, 1.0, 32.0]);
        let expect_h: Vec<u16> = [v[i], v[i] + 1.0, -v[i], 0.5]
            .iter()
            .map(|&f| {
                let h = half::f16::from_f32(f);
                (h * half::f16::from_f32(2.0)).to_bits()
            })
            .collect();
        assert_eq!(h4[i].to_vec(), expect_h);
    }
}

const SWIZZLES: &str = r#"#include <metal_stdlib>
using namespace metal;

kernel void swizzles(device float4* out [[buffer(0)]],
                     device float4* io [[buffer(1)]],
                     uint tid [[thread_index_in_threadgroup]])
{
    float4 v = float4(1.0f, 2.0f, 3.0f, 4.0f) + float(tid);
    float2 a = v.xy;
    float3 b = v.zyx;
    float4 c = v.wzyx;
    float4 d = float4(v.xy, v.zw);
    v.xy = v.yx;
    v.zw += float2(10.0f);
    io[tid].xy = a;
    io[tid].zw = io[tid].yx;
    float2 s = simd_sum(c.xy);
    float m = dot(v.xy, a) + max(b.xy, a).x + exp(a.yx).y * 0.0f;
    bool2 eq = a.xy == a;
    out[4 * tid + 0] = v;
    out[4 * tid + 1] = float4(b, m);
    out[4 * tid + 2] = c + d;
    out[4 * tid + 3] = float4(s, float(all(eq)), float4(v.xxyy).w + (a + b.xy).x);
}
"#;

#[test]
fn multi_component_swizzles() {
    let compiler = require_compiler!();
    let spec = entry(
        "swizzles",
        vec![
            buffer("device float4*"),
            buffer("device float4*"),
            builtin(Builtin::ThreadIndexInThreadgroup),
        ],
    );
    let kernel = compile(&compiler, SWIZZLES, &spec);
    let mut out = vec![[0f32; 4]; 128];
    let mut io = vec![[-1f32; 4]; 32];
    run(&kernel, &[buf(&mut out), buf(&mut io)], [1, 1, 1], 32);
    let sum3: f32 = (0..32).map(|t| 4.0 + t as f32).sum();
    let sum2: f32 = (0..32).map(|t| 3.0 + t as f32).sum();
    for t in 0..32 {
        let [v0, v1, v2, v3] = [1.0, 2.0, 3.0, 4.0].map(|c: f32| c + t as f32);
        assert_eq!(
            out[4 * t],
            [v1, v0, v2 + 10.0, v3 + 10.0],
            "swizzle writes, thread {t}"
        );
        assert_eq!(
            out[4 * t + 1],
            [v2, v1, v0, 2.0 * v0 * v1 + v2],
            "swizzle reads and math, thread {t}"
        );
        assert_eq!(out[4 * t + 2], [v3 + v0, v2 + v1, v1 + v2, v0 + v3]);
        assert_eq!(out[4 * t + 3], [sum3, sum2, 1.0, v0 + v0 + v2]);
        assert_eq!(io[t], [v0, v1, v1, v0], "swizzles on device memory, thread {t}");
    }
}
