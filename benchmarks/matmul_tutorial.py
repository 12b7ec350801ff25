"""Triton's matmul tutorials ported line by line, beside Triton's own kernels and meTile's
`tile_load` GEMM, in one process on one NVIDIA GPU.

    python benchmarks/matmul_tutorial.py [--quick] [--dtypes fp16,bf16]

Kernels, each searched over the same (BLOCK_M, BLOCK_N, BLOCK_K, warps) tiles:

* the port of tutorial 03 (`matmul_kernel` of tests/test_tutorials.py: pointer tiles
  advanced through the K loop, masked K edge, grouped program order, `% M` / `% N`
  wrapped offsets; f16 out, as the tutorial writes it, for every kernel here);
* the port of tutorial 09's persistent kernel (`matmul_kernel_persistent`, one program
  per SM looping over tiles);
* Triton's two tutorial kernels, written again here (the stage count from the config);
* meTile's `tile_load` GEMM (`reference_kernels.gemm_bounded`) at the port's best tile,
  and at its own best tile with its default passes (tensor copies on Hopper).

Every result is checked against a float64 product of sampled rows before it is timed;
times are medians of `triton.testing.do_bench`.
"""

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

import metile
from metile.testing.reference_kernels import gemm_bounded as mt_tile_gemm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from test_tutorials import matmul_kernel as mt_port  # noqa: E402
from test_tutorials import matmul_kernel_persistent as mt_persistent  # noqa: E402

SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (4000, 3000, 2000)]
CONFIGS = [  # (BM, BN, BK, warps, Triton's stages)
    (128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4), (128, 256, 32, 8, 4), (64, 128, 64, 4, 4),
]


@triton.jit
def tr_tutorial(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def _tr_compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def tr_persistent(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr, NUM_SMS: tl.constexpr):
    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    k_tiles = tl.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n
    tile_id_c = start_pid - NUM_SMS
    offs_k_for_mask = tl.arange(0, BLOCK_SIZE_K)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _tr_compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        offs_am = tl.where(offs_am < M, offs_am, 0)
        offs_bn = tl.where(offs_bn < N, offs_bn, 0)
        offs_am = tl.max_contiguous(tl.multiple_of(offs_am, BLOCK_SIZE_M), BLOCK_SIZE_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, BLOCK_SIZE_N), BLOCK_SIZE_N)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K + tl.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
            b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
            a = tl.load(a_ptrs, mask=offs_k_for_mask[None, :] < K - ki * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k_for_mask[:, None] < K - ki * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _tr_compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M)
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, accumulator.to(c_ptr.dtype.element_ty), mask=c_mask)


def runner(kind, cfg, a, b, c, sms):
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk, warps, stages = cfg
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    strides = (K, 1, N, 1, N, 1)
    blocks = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8)
    if kind == "port":
        return lambda: mt_port[(tiles,)](a, b, c, M, N, K, *strides, **blocks, ACTIVATION="", num_sgs=warps)
    if kind == "persistent port":
        grid = (min(sms, tiles),)
        return lambda: mt_persistent[grid](a, b, c, M, N, K, *strides, **blocks, NUM_SMS=sms, num_sgs=warps)
    if kind == "tile_load":
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        return lambda: mt_tile_gemm[grid](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_sgs=warps)
    if kind == "Triton":
        return lambda: tr_tutorial[(tiles,)](a, b, c, M, N, K, *strides, **blocks, num_warps=warps,
                                             num_stages=stages)
    grid = (min(sms, tiles),)
    return lambda: tr_persistent[grid](a, b, c, M, N, K, *strides, **blocks, NUM_SMS=sms, num_warps=warps,
                                       num_stages=stages)


def check(name, c, a, b):
    rows = torch.linspace(0, a.shape[0] - 1, 64, device=a.device).long()
    want = a[rows].double() @ b.double()
    err = float((c[rows].double() - want).norm() / want.norm())
    if not err < 1e-2:
        raise RuntimeError(f"{name}: relative error {err:.2e}")


def best(kind, shape, dtype, configs, sms):
    """(TFLOP/s, config) of the kind's fastest config, or (nan, None)."""
    M, N, K = shape
    a = torch.randn((M, K), device="cuda").to(dtype)
    b = torch.randn((K, N), device="cuda").to(dtype)
    found = []
    for cfg in configs:
        c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
        try:
            run = runner(kind, cfg, a, b, c, sms)
            run()
            torch.cuda.synchronize()
            check(f"{kind} {shape} {cfg}", c, a, b)
        except Exception as e:  # noqa: BLE001 - a config a compiler refuses: skip it, say so
            print(f"   skip {kind} {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:120]}", file=sys.stderr)
            continue
        ms = triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")
        found.append((2 * M * N * K / ms / 1e9, cfg))
    return max(found, key=lambda f: f[0]) if found else (float("nan"), None)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="4096^3 and the ragged shape only")
    p.add_argument("--dtypes", default="fp16,bf16")
    args = p.parse_args()
    metile.set_device("cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    shapes = [s for s in SHAPES if not args.quick or s in ((4096, 4096, 4096), (4000, 3000, 2000))]
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    kinds = ["port", "Triton", "persistent port", "Triton persistent"]
    print(torch.cuda.get_device_name(), "| triton", triton.__version__, "| TFLOP/s, best config (BM, BN, BK, warps)")
    print("| shape | dtype | " + " | ".join(kinds) + " | tile_load at port's tile | tile_load best "
          "| port / Triton | persistent / Triton's | port / tile_load (same tile) |")
    print("|" + "---|" * (len(kinds) + 7))
    for name in args.dtypes.split(","):
        for shape in shapes:
            got = {k: best(k, shape, dtypes[name], CONFIGS, sms) for k in kinds}
            port_cfg = got["port"][1]
            same = best("tile_load", shape, dtypes[name], [port_cfg], sms) if port_cfg else (float("nan"), None)
            own = best("tile_load", shape, dtypes[name], CONFIGS, sms)
            cells = [f"{t:.1f} {cfg[:4] if cfg else ''}" for t, cfg in got.values()]
            ratios = (got["port"][0] / got["Triton"][0], got["persistent port"][0] / got["Triton persistent"][0],
                      got["port"][0] / same[0])
            print(f"| {'x'.join(map(str, shape))} | {name} | " + " | ".join(cells)
                  + f" | {same[0]:.1f} | {own[0]:.1f} {own[1][:4] if own[1] else ''} | "
                  + " | ".join(f"{r:.2f}" for r in ratios) + " |", flush=True)


if __name__ == "__main__":
    main()
