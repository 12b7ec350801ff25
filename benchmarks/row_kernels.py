"""Single-pass row kernels (the whole row in one tile: softmax, layernorm, rmsnorm),
meTile beside Triton in one process on one NVIDIA GPU, f32 and bf16, math in f32 on
both sides (the same algorithm, written alike).

    python benchmarks/row_kernels.py          # the table
    python benchmarks/row_kernels.py --ncu NAME DTYPE ROWS N WARPS m|t
                                              # three launches of one kernel, for ncu

GB/s counts each input read once and each output written once; each side reports
its best of 4, 8 and 16 warps per program; the ratio is Triton's time over
meTile's. Every result is checked against torch first; nothing here is asserted.
"""

import sys

import torch
import triton
import triton.language as tl

import metile

metile.set_device("cuda")


@triton.jit
def t_softmax(X, Out, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    m = tl.max(x, 0)
    e = tl.exp(x - m)
    s = tl.sum(e, 0)
    tl.store(Out + row * N + cols, e / s, mask=cols < N)


@triton.jit
def t_layernorm(X, W, B, Out, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, 0) / N
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, 0) / N + eps)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    b = tl.load(B + cols, mask=mask).to(tl.float32)
    tl.store(Out + row * N + cols, d * rstd * w + b, mask=mask)


@triton.jit
def t_rmsnorm(X, W, Out, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    rms = tl.sqrt(tl.sum(x * x, 0) / N + eps)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    tl.store(Out + row * N + cols, x / rms * w, mask=mask)


@metile.kernel
def m_softmax(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + row * N + cols, mask=cols < N, other=-float("inf")).to(metile.float32)
    m = metile.max(x, axis=0)
    e = metile.exp(x - m)
    s = metile.sum(e, axis=0)
    metile.store(Out + row * N + cols, e / s, mask=cols < N)


@metile.kernel
def m_layernorm(X, W, B, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    mask = cols < N
    x = metile.load(X + row * N + cols, mask=mask, other=0.0).to(metile.float32)
    mean = metile.sum(x, axis=0) / N
    d = metile.where(mask, x - mean, 0.0)
    rstd = 1.0 / metile.sqrt(metile.sum(d * d, axis=0) / N + eps)
    w = metile.load(W + cols, mask=mask).to(metile.float32)
    b = metile.load(B + cols, mask=mask).to(metile.float32)
    metile.store(Out + row * N + cols, d * rstd * w + b, mask=mask)


@metile.kernel
def m_rmsnorm(X, W, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    mask = cols < N
    x = metile.load(X + row * N + cols, mask=mask, other=0.0).to(metile.float32)
    rms = metile.sqrt(metile.sum(x * x, axis=0) / N + eps)
    w = metile.load(W + cols, mask=mask).to(metile.float32)
    metile.store(Out + row * N + cols, x / rms * w, mask=mask)


def cases(rows, n, dtype):
    """Per kernel: (name, meTile launcher for a warp count, Triton's, the torch
    reference in f32, elements moved), and the output tensor they share."""
    x = torch.randn(rows, n, device="cuda").to(dtype)
    w = torch.randn(n, device="cuda").to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)
    out = torch.empty_like(x)
    xf = x.float()
    blk = triton.next_power_of_2(n)
    g = (rows,)
    eps = 1e-5
    return [
        ("softmax", lambda s: lambda: m_softmax[g](x, out, n, BLOCK=blk, num_sgs=s),
         lambda s: lambda: t_softmax[g](x, out, n, BLOCK=blk, num_warps=s), torch.softmax(xf, -1), 2 * x.numel()),
        ("layernorm", lambda s: lambda: m_layernorm[g](x, w, b, out, n, eps, BLOCK=blk, num_sgs=s),
         lambda s: lambda: t_layernorm[g](x, w, b, out, n, eps, BLOCK=blk, num_warps=s),
         torch.nn.functional.layer_norm(xf, (n,), w.float(), b.float(), eps), 2 * x.numel() + 2 * n),
        ("rmsnorm", lambda s: lambda: m_rmsnorm[g](x, w, out, n, eps, BLOCK=blk, num_sgs=s),
         lambda s: lambda: t_rmsnorm[g](x, w, out, n, eps, BLOCK=blk, num_warps=s),
         xf / torch.sqrt((xf * xf).mean(-1, keepdim=True) + eps) * w.float(), 2 * x.numel() + n),
    ], out


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
SHAPES = ((4096, 4096), (8192, 1000), (2048, 16384), (16384, 768))
WARPS = (4, 8, 16)


def profile_one(name, dt, rows, n, warps, who):
    """Three launches of one kernel (ncu -c 1 -s 2 profiles the last)."""
    for cname, m, t, _ref, _elems in cases(rows, n, DT[dt])[0]:
        if cname == name:
            launch = (m if who == "m" else t)(warps)
            for _ in range(3):
                launch()
            torch.cuda.synchronize()


def best_of(make, out, ref, label):
    """The fastest (ms, warps) of `make(warps)`, each result checked first."""
    best = None
    for warps in WARPS:
        out.fill_(float("nan"))
        make(warps)()
        err = float((out.float() - ref).norm() / ref.norm())
        if not err < 2e-2:
            print(f"WRONG {label} ({warps} warps): relative error {err:.2e}")
            continue
        ms = bench(make(warps))
        if best is None or ms < best[0]:
            best = (ms, warps)
    return best


def main():
    print("| kernel | shape | dtype | meTile GB/s (warps) | Triton GB/s (warps) | Triton time / meTile time |")
    print("|---|---|---|---|---|---|")
    for rows, n in SHAPES:
        for dt in ("f32", "bf16"):
            dtype = DT[dt]
            kernels, out = cases(rows, n, dtype)
            for name, m, t, ref, elems in kernels:
                label = f"{name} {rows}x{n} {dt}"
                mm, tt = best_of(m, out, ref, f"{label} meTile"), best_of(t, out, ref, f"{label} Triton")
                if mm is None or tt is None:
                    continue
                gbs = [elems * dtype.itemsize / ms / 1e6 for ms, _ in (mm, tt)]
                print(f"| {name} | {rows}x{n} | {dt} | {gbs[0]:.0f} ({mm[1]}) | {gbs[1]:.0f} ({tt[1]}) "
                      f"| {tt[0] / mm[0]:.2f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 8 and sys.argv[1] == "--ncu":
        profile_one(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    else:
        main()
