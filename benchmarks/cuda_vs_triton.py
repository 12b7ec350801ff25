"""meTile's cuda backend beside Triton and torch in one process, on one NVIDIA GPU.

Run on a machine with a GPU, torch and triton:

    python benchmarks/cuda_vs_triton.py [--out results.md]

Prints (and writes with --out) markdown tables:
* GB/s of add, softmax, layernorm and rmsnorm (the `metile.testing.reference_kernels`
  and Triton kernels with the same loops and block sizes, each at its best of 4
  or 8 warps per program), counting each input read once and each output
  written once, with the ratio meTile / Triton;
* host launch overhead of a cached kernel (µs per launch of a tiny add) for
  meTile (Buffer and torch arguments), Triton and torch;
* first-launch time in a fresh process with an empty cache, and with the disk
  cache filled by an earlier process, for meTile and Triton;
* the generic-path GEMM's TFLOP/s beside torch.matmul (cuBLAS), after a
  correctness check.

Every result is checked against torch before it is timed. Timings are medians of
`triton.testing.do_bench` (CUDA events); nothing here is asserted.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time

import torch
import triton
import triton.language as tl

import metile
from metile.testing import reference_kernels as rk


@triton.jit
def t_add(X, Y, Out, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(Out + offs, tl.load(X + offs, mask=mask) + tl.load(Y + offs, mask=mask), mask=mask)


@triton.jit
def t_softmax(X, Out, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    m = tl.full((BLOCK,), -1e38, tl.float32)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        m = tl.maximum(m, tl.load(X + row * N + cols, mask=cols < N, other=-1e38).to(tl.float32))
    mx = tl.max(m, 0)
    s = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        x = tl.load(X + row * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
        s += tl.exp(x - mx)
    total = tl.sum(s, 0)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        x = tl.load(X + row * N + cols, mask=cols < N).to(tl.float32)
        tl.store(Out + row * N + cols, tl.exp(x - mx) / total, mask=cols < N)


@triton.jit
def t_layernorm(X, W, B, Out, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        acc += tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, 0) / N
    var = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        x = tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
        d = tl.where(cols < N, x - mean, 0.0)
        var += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(var, 0) / N + eps)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * N + cols, mask=mask).to(tl.float32)
        w = tl.load(W + cols, mask=mask).to(tl.float32)
        b = tl.load(B + cols, mask=mask).to(tl.float32)
        tl.store(Out + row * N + cols, (x - mean) * rstd * w + b, mask=mask)


@triton.jit
def t_rmsnorm(X, W, Out, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    sq = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        x = tl.load(X + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
        sq += x * x
    rms = tl.sqrt(tl.sum(sq, 0) / N + eps)
    for i in range(0, N, BLOCK):
        cols = i + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + row * N + cols, mask=mask).to(tl.float32)
        w = tl.load(W + cols, mask=mask).to(tl.float32)
        tl.store(Out + row * N + cols, x / rms * w, mask=mask)


@metile.kernel
def softmax_static_n(X, Out, N: metile.constexpr, BLOCK: metile.constexpr):
    """rk.softmax with the row length a constexpr: its offsets are provably
    16-byte aligned, so its loads are vectorised (diagnostic row)."""
    row = metile.program_id(0)
    m = -1e38
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        m = metile.maximum(m, metile.load(X + row * N + cols, mask=cols < N))
    m = metile.max(m)
    s = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        s = s + metile.exp(metile.load(X + row * N + cols, mask=cols < N) - m)
    s = metile.sum(s)
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        x = metile.load(X + row * N + cols, mask=cols < N)
        metile.store(Out + row * N + cols, metile.exp(x - m) / s, mask=cols < N)


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def rel_err(out, ref):
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


FAILURES = []


def check(name, out, ref, tol):
    """The relative error; one above `tol` (or NaN) is listed under the tables."""
    err = rel_err(out, ref)
    if not err <= tol:
        FAILURES.append(f"{name}: relative error {err:.2e} > {tol:.0e}")
    return err


WARPS = (4, 8)  # simdgroups (warps) per program tried for both; each reports its best


def best(make):
    """The fastest (ms, warps) of `make(warps)` over WARPS."""
    return min((median_ms(make(w)), w) for w in WARPS)


def add_row(n, block=1024):
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full_like(x, float("nan"))
    grid = (triton.cdiv(n, block),)
    rk.add[grid](x, y, out, n, BLOCK=block)
    check(f"add {n}", out, x + y, 1e-6)
    m = best(lambda w: lambda: rk.add[grid](x, y, out, n, BLOCK=block, num_sgs=w))
    t = best(lambda w: lambda: t_add[grid](x, y, out, n, BLOCK=block, num_warps=w))
    return (f"add 2^{n.bit_length() - 1} f32", 3 * n * 4, m, t)


def row_kernel_rows(shape, dtype, tol, block=1024, eps=1e-5):
    rows_n, n = shape
    size = torch.finfo(dtype).bits // 8
    x = torch.randn(shape, device="cuda").to(dtype)
    w = torch.randn(n, device="cuda").to(dtype)
    b = torch.randn(n, device="cuda").to(dtype)
    out = torch.empty_like(x)
    xf = x.float()
    tag = f"{rows_n}x{n} {str(dtype).removeprefix('torch.')}"
    g = (rows_n,)
    cases = [
        ("softmax", lambda s: lambda: rk.softmax[g](x, out, n, BLOCK=block, num_sgs=s),
         lambda s: lambda: t_softmax[g](x, out, n, BLOCK=block, num_warps=s),
         torch.softmax(xf, -1), 2 * x.numel()),
        ("softmax, N constexpr", lambda s: lambda: softmax_static_n[g](x, out, N=n, BLOCK=block, num_sgs=s),
         lambda s: lambda: t_softmax[g](x, out, n, BLOCK=block, num_warps=s),
         torch.softmax(xf, -1), 2 * x.numel()),
        ("layernorm", lambda s: lambda: rk.layernorm[g](x, w, b, out, n, eps, BLOCK=block, num_sgs=s),
         lambda s: lambda: t_layernorm[g](x, w, b, out, n, eps, BLOCK=block, num_warps=s),
         torch.nn.functional.layer_norm(xf, (n,), w.float(), b.float(), eps), 2 * x.numel() + 2 * n),
        ("rmsnorm", lambda s: lambda: rk.rmsnorm[g](x, w, out, n, eps, BLOCK=block, num_sgs=s),
         lambda s: lambda: t_rmsnorm[g](x, w, out, n, eps, BLOCK=block, num_warps=s),
         xf / torch.sqrt((xf * xf).mean(-1, keepdim=True) + eps) * w.float(), 2 * x.numel() + n),
    ]
    rows = []
    for name, m, t, ref, elems in cases:
        for which, make in (("meTile", m), ("Triton", t)):
            for warps in WARPS:
                out.fill_(float("nan"))
                make(warps)()
                check(f"{name} {tag} ({which}, {warps} warps)", out.float(), ref, tol)
        rows.append((f"{name} {tag}", elems * size, best(m), best(t)))
    return rows


def bandwidth_rows():
    rows = [add_row(1 << 24), add_row(1 << 28)]
    for shape in ((4096, 4096), (2048, 16384)):
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
            rows += row_kernel_rows(shape, dtype, tol)
    return rows


def launch_overhead_us():
    n = 1024
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    bx, by, bo = (metile.Buffer(data=v.cpu().numpy()) for v in (x, y, out))
    calls = {
        "meTile (Buffer args)": lambda: rk.add[(1,)](bx, by, bo, n, BLOCK=n),
        "meTile (torch args)": lambda: rk.add[(1,)](x, y, out, n, BLOCK=n),
        "Triton (torch args)": lambda: t_add[(1,)](x, y, out, n, BLOCK=n),
        "torch.add(out=)": lambda: torch.add(x, y, out=out),
    }
    result = {}
    for name, call in calls.items():
        for _ in range(100):
            call()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            reps = 2000
            t0 = time.perf_counter()
            for _ in range(reps):
                call()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            best = min(best, (t1 - t0) / reps * 1e6)
        result[name] = best
    return result


FIRST_LAUNCH = {
    "meTile": textwrap.dedent("""
        import time, torch, metile
        from metile.testing.reference_kernels import add
        x = torch.randn(4096, device="cuda"); out = torch.empty_like(x); torch.cuda.synchronize()
        t0 = time.perf_counter()
        add[(4,)](x, x, out, 4096, BLOCK=1024); metile.synchronize()
        print((time.perf_counter() - t0) * 1e3)
    """),
    "Triton": textwrap.dedent("""
        import time, torch, triton, triton.language as tl
        @triton.jit
        def add(X, Y, Out, N, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < N
            tl.store(Out + offs, tl.load(X + offs, mask=mask) + tl.load(Y + offs, mask=mask), mask=mask)
        x = torch.randn(4096, device="cuda"); out = torch.empty_like(x); torch.cuda.synchronize()
        t0 = time.perf_counter()
        add[(4,)](x, x, out, 4096, BLOCK=1024); torch.cuda.synchronize()
        print((time.perf_counter() - t0) * 1e3)
    """),
}


def first_launch_ms():
    result = {}
    for name, script in FIRST_LAUNCH.items():
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, METILE_CACHE_DIR=cache, TRITON_CACHE_DIR=cache, METILE_DEVICE="cuda")
            path = os.path.join(cache, "first_launch.py")  # both read kernels from their source file
            with open(path, "w") as f:
                f.write(script)
            times = []
            for _ in range(2):
                r = subprocess.run([sys.executable, path], capture_output=True, text=True, env=env)
                if r.returncode != 0:
                    raise SystemExit(f"{name} first launch failed:\n{r.stderr}")
                times.append(float(r.stdout.strip().splitlines()[-1]))
            result[name] = times
    return result


def gemm_row(size):
    a, b = torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda")
    c = torch.full((size, size), float("nan"), device="cuda")
    grid = (size // 64, size // 64)
    run = lambda: rk.gemm[grid](a, b, c, size, size, size, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)  # noqa: E731
    run()
    err = check(f"gemm {size}", c, a.double() @ b.double(), 1e-5)
    flop = 2 * size**3
    return size, err, flop / median_ms(run) / 1e9, flop / median_ms(lambda: torch.matmul(a, b)) / 1e9


def gemm_rows():
    torch.backends.cuda.matmul.allow_tf32 = False
    return [gemm_row(size) for size in (1024, 4096)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the tables to this file")
    args = parser.parse_args()
    metile.set_device("cuda")
    lines = [f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton.__version__}", ""]
    lines += ["| kernel | bytes | meTile GB/s (warps) | Triton GB/s (warps) | meTile / Triton |",
              "|---|---|---|---|---|"]
    for name, nbytes, (m_ms, m_w), (t_ms, t_w) in bandwidth_rows():
        lines.append(f"| {name} | {nbytes / 2**20:.0f} MiB | {nbytes / m_ms / 1e6:.0f} ({m_w}) "
                     f"| {nbytes / t_ms / 1e6:.0f} ({t_w}) | {t_ms / m_ms:.2f} |")
    lines += ["", "| cached launch, host time | µs per launch |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in launch_overhead_us().items()]
    lines += ["", "| first launch in a new process | empty cache (ms) | disk cache (ms) |", "|---|---|---|"]
    lines += [f"| {k} | {cold:.0f} | {warm:.0f} |" for k, (cold, warm) in first_launch_ms().items()]
    lines += ["", "| GEMM f32 (generic path, 64x64x32 tiles) | rel. error | meTile TFLOP/s | torch.matmul TFLOP/s |",
              "|---|---|---|---|"]
    lines += [f"| {n}x{n}x{n} | {e:.1e} | {m:.2f} | {t:.2f} |" for n, e, m, t in gemm_rows()]
    if FAILURES:
        lines += ["", "WRONG RESULTS:"] + FAILURES
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
