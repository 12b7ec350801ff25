"""GEMM on an NVIDIA GPU: meTile beside cuBLAS (torch.matmul) and a Triton GEMM in one process.

    python benchmarks/gemm.py [--out results.md] [--quick] [--dtypes fp16,bf16,tf32] [--no-tables]

For fp16, bf16 and tf32 (f32 data; meTile with its `tf32=True` launch option,
cuBLAS and Triton with their tf32 defaults) at 1024^3, 4096^3, 8192^3, two
ragged shapes and one with few output tiles and a long K (where meTile's
search includes `split_k`), prints TFLOP/s of each, the ratios, and meTile's best config. Every
result is checked against a float64 product on a few rows before it is timed;
timings are medians of `triton.testing.do_bench` (CUDA events). The Triton
kernel is the usual tiled GEMM with grouped program order and masked edges,
written here, searched over the same kind of configs as meTile.

`--linear` adds a table of the linear layer's product `x @ w.T` (the weight stored N x K, as
torch keeps it), written `dot(x, w.T)` with `tile_load`, beside cuBLAS on the same transposed
operand and meTile's `x @ w` on a K x N weight (which the ring reads N-major).

A second table switches meTile's GEMM passes one at a time away from the
target's default on the fp16 4096^3 product (launch options, also `metile.Config`
keys), each ratio against the defaults, a third those that act on rows of odd
length on the fp16 1023x1025x999 product; a fourth times `split_k` 1 to 8 on
the long-K fp16 product.
"""

import argparse
import sys

import torch
import triton
import triton.language as tl

import metile
from metile.testing.reference_kernels import gemm_bounded as mt_gemm
from metile.testing.reference_kernels import linear as mt_linear

SHAPES = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192), (4000, 3000, 2000), (1023, 1025, 999),
          (512, 512, 16384)]


MT_TILES = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_sgs)
    (128, 128, 64, 8), (128, 128, 64, 4), (128, 256, 32, 8), (128, 256, 64, 8), (256, 128, 64, 8),
    (128, 128, 32, 8), (64, 128, 64, 4), (128, 64, 64, 4), (64, 64, 32, 4), (64, 64, 64, 4),
]
# Each tile with the target's default passes (on the H100: wgmma, operands in an asynchronous
# ring filled by tensor copies), with the threads copying instead (cp.async: less latency, which
# small problems feel), and with mma.sync instead of wgmma.
MT_CONFIGS = [(*t, extra) for extra in ({}, {"tma": False}, {"wgmma": False}) for t in MT_TILES]
# Split-K pays off where the output tiles cannot fill the GPU and K is long: there the search
# also tries the smaller tiles with 2, 4 and 8 programs per tile.
SPLIT_K_CONFIGS = [(*t, {"split_k": s}) for s in (2, 4, 8) for t in MT_TILES if t[0] * t[1] <= 128 * 128
                   and t[2] == 64]
# tf32 (32 k columns are 128 bytes): the transposed product on wgmma, with and without tensor
# copies, and mma.sync.
TF32_TILES = [(256, 128, 32, 8), (128, 128, 32, 8), (128, 64, 32, 8), (128, 64, 32, 4), (64, 64, 32, 4)]
TF32_CONFIGS = [(*t, extra) for extra in ({}, {"tma": False}, {"wgmma": False}) for t in TF32_TILES]
H100_SMS = 132


def configs_for(shape, configs):
    M, N, K = shape
    tiles = triton.cdiv(M, 128) * triton.cdiv(N, 128)
    return configs + SPLIT_K_CONFIGS if tiles < 2 * H100_SMS and K >= 4096 else configs


@triton.jit
def tr_gemm(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BM), tl.cdiv(N, BN)
    group = pid // (GROUP * tiles_n)
    first_m = group * GROUP
    rows_in_group = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % (GROUP * tiles_n)) % rows_in_group
    pid_n = (pid % (GROUP * tiles_n)) // rows_in_group
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        kk = k + rk
        a = tl.load(A + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


TR_CONFIGS = [  # (BM, BN, BK, warps, stages)
    (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (128, 128, 32, 4, 4), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4),
]


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")


def check(name, c, a, b, tol):
    """Relative error of 64 sampled rows against a float64 product."""
    rows = torch.linspace(0, a.shape[0] - 1, 64, device=a.device).long()
    want = a[rows].double() @ b.double()
    err = float((c[rows].double() - want).norm() / want.norm())
    if not err <= tol:
        print(f"!! {name}: relative error {err:.2e} > {tol:.0e}", file=sys.stderr)
    return err


def mt_run(a, b, c, cfg, **passes):
    if a.dtype == torch.float32:
        passes.setdefault("tf32", True)
    bm, bn, bk, sgs, extra = cfg
    passes = {**extra, **passes}
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    return lambda: mt_gemm[grid](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_sgs=sgs, **passes)


def tr_run(a, b, c, cfg):
    bm, bn, bk, warps, stages = cfg
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    return lambda: tr_gemm[grid](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, GROUP=8, num_warps=warps, num_stages=stages)


def best_of(make, configs):
    """(ms, config) of the fastest config that compiles and fits."""
    found = []
    for cfg in configs:
        try:
            run = make(cfg)
            run()
            torch.cuda.synchronize()
        except Exception as e:  # a config the compiler refuses (shared memory, registers)
            print(f"   skip {cfg}: {type(e).__name__}: {str(e).splitlines()[0][:100]}", file=sys.stderr)
            continue
        found.append((median_ms(run), cfg))
    return min(found, key=lambda f: f[0])


def row(shape, dtype, configs):
    M, N, K = shape
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    tol = 1e-2
    flop = 2 * M * N * K
    c = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)
    mt_ms, mt_cfg = best_of(lambda cfg: mt_run(a, b, c, cfg), configs_for(shape, configs))
    mt_run(a, b, c, mt_cfg)()
    mt_err = check(f"meTile {shape} {dtype}", c, a, b, tol)
    ct = torch.full_like(c, float("nan"))
    tr_ms, tr_cfg = best_of(lambda cfg: tr_run(a, b, ct, cfg), TR_CONFIGS)
    tr_run(a, b, ct, tr_cfg)()
    check(f"triton {shape} {dtype}", ct, a, b, 1e-2)
    cu_ms = median_ms(lambda: torch.matmul(a, b))
    tf = lambda ms: flop / ms / 1e9  # noqa: E731
    return (f"| {M}x{N}x{K} | {tf(mt_ms):.1f} | {tf(cu_ms):.1f} | {tf(tr_ms):.1f} | {cu_ms / mt_ms:.2f} "
            f"| {tr_ms / mt_ms:.2f} | {mt_err:.1e} | {mt_cfg} |")


LINEAR_TILES = [(128, 128, 64, 8), (128, 256, 64, 8), (256, 128, 64, 8), (128, 128, 64, 4)]


def linear_row(shape, dtype):
    M, N, K = shape
    x = torch.randn(M, K, device="cuda", dtype=dtype)
    w = torch.randn(N, K, device="cuda", dtype=dtype)
    y = torch.full((M, N), float("nan"), device="cuda", dtype=dtype)

    def make(cfg):
        bm, bn, bk, sgs = cfg
        grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
        return lambda: mt_linear[grid](x, w, y, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_sgs=sgs)

    ms, cfg = best_of(make, LINEAR_TILES)
    make(cfg)()
    err = check(f"meTile linear {M}x{N}x{K}", y, x, w.t(), 1e-2)
    wt = w.t().contiguous()
    c = torch.empty_like(y)
    nn_ms, _ = best_of(lambda t: mt_run(x, wt, c, (*t, {})), LINEAR_TILES)
    cu_ms = median_ms(lambda: torch.nn.functional.linear(x, w))
    flop = 2 * M * N * K
    tf = lambda t: flop / t / 1e9  # noqa: E731
    return (f"| {M}x{N}x{K} | {tf(ms):.1f} | {tf(cu_ms):.1f} | {tf(nn_ms):.1f} | {cu_ms / ms:.2f} "
            f"| {nn_ms / ms:.2f} | {err:.1e} | {cfg} |")


LINEAR_SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (4000, 3000, 2000)]


# Each switched away from the target's default (on NVIDIA register prefetch is off by default; with
# the asynchronous ring on it finds nothing left to prefetch).
PASSES = [("wgmma", False), ("tma", False), ("stage_stores", False), ("matrix_atoms", False), ("async_copy", False),
          ("prefetch", True), ("l2_order", False), ("occupancy", False)]
# mma.sync's own passes, measured with wgmma off.
MMA_SYNC_PASSES = [("pad_dot_scratch", False), ("ldmatrix", False), ("serpentine", False)]


# Passes that only act where rows are not multiples of 16 bytes, measured on a ragged product.
RAGGED_PASSES = [("repack_operands", False), ("stage_stores", False)]


def passes_rows(dtype=torch.float16, shape=(4096, 4096, 4096), ragged=False):
    M, N, K = shape
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    c = torch.empty(M, N, device="cuda", dtype=dtype)
    flop = 2 * M * N * K
    cfg = (128, 128, 64, 8, {})
    base = median_ms(mt_run(a, b, c, cfg))
    rows = [f"| defaults | {flop / base / 1e9:.1f} | 1.00 |"]
    if ragged:
        switches = [({p: on}, f"{p}={on}") for p, on in RAGGED_PASSES]
    else:
        switches = [({p: on}, f"{p}={on}") for p, on in PASSES]
        switches += [({"wgmma": False, p: on}, f"wgmma=False, {p}={on}") for p, on in MMA_SYNC_PASSES]
    for passes, name in switches:
        run = mt_run(a, b, c, cfg, **passes)
        try:
            run()
        except Exception as e:
            rows.append(f"| {name} | {type(e).__name__}: {e} | |")
            continue
        check(name, c, a, b, 1e-2)
        ms = median_ms(run)
        rows.append(f"| {name} | {flop / ms / 1e9:.1f} | {base / ms:.2f} |")
    return rows


def split_k_rows(dtype=torch.float16, shape=(512, 512, 16384)):
    M, N, K = shape
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    c = torch.empty(M, N, device="cuda", dtype=dtype)
    flop = 2 * M * N * K
    rows = []
    for tile in ((128, 128, 64, 8), (64, 64, 32, 4)):
        base = None
        for s in (1, 2, 4, 8):
            run = mt_run(a, b, c, (*tile, {"split_k": s}))
            run()
            check(f"split_k={s}", c, a, b, 1e-2)
            ms = median_ms(run)
            base = base or ms
            rows.append(f"| {tile} | {s} | {flop / ms / 1e9:.1f} | {base / ms:.2f} |")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true", help="two shapes, fp16 only")
    ap.add_argument("--dtypes", default="fp16,bf16,tf32", help="comma-separated: fp16, bf16, tf32")
    ap.add_argument("--no-tables", action="store_true", help="skip the pass and split_k tables")
    ap.add_argument("--linear", action="store_true", help="add the linear layer's x @ w.T table")
    args = ap.parse_args()
    metile.set_device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    shapes = SHAPES[:2] if args.quick else SHAPES
    by_name = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}
    dtypes = [torch.float16] if args.quick else [by_name[d] for d in args.dtypes.split(",")]
    lines = [f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}", ""]
    for dtype in dtypes:
        name = "tf32" if dtype == torch.float32 else str(dtype).replace("torch.", "")
        lines += ["", f"| {name} M x N x K | meTile TFLOP/s | cuBLAS | Triton | meTile / cuBLAS | meTile / Triton "
                      "| rel. error | meTile config (BM, BN, BK, num_sgs, passes) |",
                  "|---|---|---|---|---|---|---|---|"]
        configs = MT_CONFIGS if dtype != torch.float32 else TF32_CONFIGS
        for shape in shapes:
            lines.append(row(shape, dtype, configs))
            print(lines[-1], flush=True)
    if args.linear:
        for dtype in dtypes:
            if dtype == torch.float32:
                continue
            lines += ["", f"| {str(dtype).replace('torch.', '')} linear x @ w.T, M x N x K | meTile TFLOP/s "
                          "| cuBLAS | meTile x @ w | meTile / cuBLAS | meTile / its x @ w | rel. error | config |",
                      "|---|---|---|---|---|---|---|---|"]
            for shape in LINEAR_SHAPES:
                lines.append(linear_row(shape, dtype))
                print(lines[-1], flush=True)
    if not args.no_tables:
        lines += ["", "| fp16 4096^3, 128x128x64, 8 warps | TFLOP/s | vs defaults |", "|---|---|---|"]
        lines += passes_rows()
        lines += ["", "| fp16 1023x1025x999, 128x128x64, 8 warps | TFLOP/s | vs defaults |", "|---|---|---|"]
        lines += passes_rows(shape=(1023, 1025, 999), ragged=True)
        lines += ["", "| fp16 512x512x16384 tile | split_k | TFLOP/s | vs split_k=1 |", "|---|---|---|---|"]
        lines += split_k_rows()
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
