"""What the Apple kernels do, counted on msl-emu: matrix operations, threadgroup and device
traffic, bank conflicts and barriers of the seed GEMM and the attention forward.

    python benchmarks/apple_profile.py [--quick] [--out table.md]

Runs each kernel once on the msl-emu device inside `metile.testing.emu_profile()` (the emitted
MSL, byte for byte, with counting compiled into the shim; docs/msl-emu.md, "Profiling"), checks
its result against numpy, and prints one table per kernel. Columns:

- atom: the matrix instruction the products ran on (`mma` = simdgroup_multiply_accumulate,
  8x8x8; `matmul2d` = Metal 4 matmul2d 16x32x16, `apple10`).
- issued/needed: the multiply-adds the matrix instructions did over those of the product
  (1.00: every matrix instruction is needed; more: simdgroups repeating work; less: part of the
  product ran on the generic path, scalar FMAs).
- tg B/8x8x8: threadgroup bytes loaded and stored per 512 multiply-adds issued on matrix units.
- tg B/out: the same bytes per output element (they grow with K or N_CTX).
- tg wavefronts/8x8x8: threadgroup access wavefronts (32 banks of 4 bytes, an assumption) per
  512 multiply-adds: the threadgroup-memory cycles a product step needs if one wavefront takes one.
- conflicts: wavefronts per access instruction, and over the least the same accesses need
  (1.00 = conflict-free; the first exceeds 1 for accesses wider than 4 bytes).
- dev B/out: device bytes (loads and stores) per output element.
- barriers/iter: threadgroup barriers per threadgroup and step of the main loop.

Then, per attention config, the kernel lines whose threadgroup accesses take the most wavefronts
(loads and stores apart): their share of all wavefronts, wavefronts per instruction and over the
least.
"""

import argparse
import math

import numpy as np

import metile
from metile.testing import emu_profile
from metile.testing.reference_attention import FORWARD_BLOCKS, LOG2E, attention_fwd
from metile.testing.reference_kernels import gemm

try:
    import ml_dtypes  # noqa: F401  (bf16 arrays)
except ImportError:
    ml_dtypes = None

GEMM_CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_sgs or None for the compiler's choice)
    (32, 32, 16, None), (64, 64, 16, 4), (64, 64, 32, 4), (64, 64, 32, None), (64, 32, 32, 2),
]
ATTENTION_HEAD_DIMS = (64, 128)

COLUMNS = ["atom", "ops", "issued/needed", "tg B/8x8x8", "tg B/out", "tg wavefronts/8x8x8",
           "conflicts (per instr, excess)", "dev B/out", "barriers/iter"]


def _atoms(total):
    """(atom name, count, multiply-adds issued on matrix units)."""
    mma, runs = total["simdgroup_mma"], total["matmul2d_runs"]
    names = [name for name, count in (("mma", mma), ("matmul2d", runs)) if count]
    return " + ".join(names) or "none", mma + runs, mma * 512 + runs * 16 * 32 * 16


def _row(label, total, needed_macs, outputs, iterations):
    atom, ops, issued = _atoms(total)
    units = issued / 512 if issued else float("nan")
    tg_bytes = total["threadgroup_load_bytes"] + total["threadgroup_store_bytes"]
    wavefronts = total["threadgroup_load_wavefronts"] + total["threadgroup_store_wavefronts"]
    dev_bytes = total["device_load_bytes"] + total["device_store_bytes"]
    ratio, excess = total["bank_conflict_ratio"], total["bank_conflict_excess"]
    conflicts = "-" if ratio is None else f"{ratio:.2f}, {excess:.2f}"
    barriers = total["threadgroup_barriers"] / total["threadgroups"] / iterations
    cells = [label, atom, str(ops), f"{issued / needed_macs:.2f}", f"{tg_bytes / units:.0f}",
             f"{tg_bytes / outputs:.0f}", f"{wavefronts / units:.1f}", conflicts, f"{dev_bytes / outputs:.1f}",
             f"{barriers:.2f}"]
    return "| " + " | ".join(cells) + " |"


def _site_rows(label, total, top=4):
    """The `top` kernel lines (loads and stores apart) with the most threadgroup wavefronts."""
    merged = {}
    for site in total["threadgroup_sites"]:
        key = (site["source"] or f"MSL line {site['msl_line']}", site["store"])
        counts = merged.setdefault(key, [0, 0, 0])
        for i, name in enumerate(("instructions", "wavefronts", "min_wavefronts")):
            counts[i] += site[name]
    everything = sum(counts[1] for counts in merged.values()) or 1
    rows = []
    for (where, store), (instructions, wavefronts, least) in sorted(merged.items(), key=lambda kv: -kv[1][1])[:top]:
        rows.append(f"| {label} | {where} | {'stores' if store else 'loads'} | {wavefronts / everything:.0%} "
                    f"| {wavefronts / instructions:.2f} | {wavefronts / least:.2f} |")
    return rows


def _dtype(name):
    if name == "bfloat16":
        return ml_dtypes.bfloat16
    return np.dtype(name)


def gemm_rows(size, dtypes, archs):
    m = n = k = size
    rng = np.random.default_rng(0)
    rows = []
    for arch in archs:
        for dtype in dtypes:
            a = rng.integers(-3, 4, (m, k)).astype(_dtype(dtype))
            b = rng.integers(-3, 4, (k, n)).astype(_dtype(dtype))
            expected = a.astype(np.float32) @ b.astype(np.float32)
            for bm, bn, bk, sgs in GEMM_CONFIGS:
                c = np.zeros((m, n), np.float32)
                options = {"arch": arch} if sgs is None else {"arch": arch, "num_sgs": sgs}
                with emu_profile() as profile:
                    gemm[(m // bm, n // bn)](a, b, c, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **options)
                np.testing.assert_array_equal(c, expected)
                total = profile.total()
                sgs_used = profile.launches[0]["threads_per_threadgroup"] // 32
                label = f"{bm}x{bn}x{bk}, {sgs_used} sg{'' if sgs else ' (default)'} | {dtype} | {arch}"
                rows.append(_row(label, total, m * n * k, m * n, k // bk))
    return rows


def attention_rows(n_ctx, head_dims, dtypes, archs, heads=2):
    """The table's rows, and the rows of the sites table."""
    rng = np.random.default_rng(1)
    rows, sites = [], []
    for arch in archs:
        for dtype in dtypes:
            for hd in head_dims:
                shape = (1, heads, n_ctx, hd)
                q, k, v = (rng.standard_normal(shape).astype(_dtype(dtype)) for _ in range(3))
                o = np.zeros(shape, q.dtype)
                lse = np.zeros(shape[:3], np.float32)
                block_m, block_n = FORWARD_BLOCKS["apple"][hd]
                scale = 1.0 / math.sqrt(hd)
                with emu_profile() as profile:
                    attention_fwd[(metile.cdiv(n_ctx, block_m), heads)](
                        q, k, v, o, lse, scale, n_ctx, HEAD_DIM=hd, BLOCK_M=block_m, BLOCK_N=block_n,
                        CAUSAL=False, arch=arch)
                qf, kf, vf = (x.astype(np.float32) for x in (q, k, v))
                scores = qf @ kf.transpose(0, 1, 3, 2) * scale
                p = np.exp(scores - scores.max(-1, keepdims=True))
                reference = (p / p.sum(-1, keepdims=True)) @ vf
                np.testing.assert_allclose(o.astype(np.float32), reference, atol=3e-2, rtol=3e-2)
                np.testing.assert_allclose(lse, np.log2(p.sum(-1)) + scores.max(-1) * LOG2E, atol=1e-2)
                total = profile.total()
                needed = 2 * heads * n_ctx * n_ctx * hd
                label = f"hd{hd} N{n_ctx}, ({block_m}, {block_n}) | {dtype} | {arch}"
                rows.append(_row(label, total, needed, heads * n_ctx * hd, n_ctx // block_n))
                sites += _site_rows(f"hd{hd} {dtype} {arch}", total)
    return rows, sites


def _table(title, first, rows):
    head = [first, "dtype", "arch"] + COLUMNS
    return [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows, ""]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="f16 only, apple only, smaller sizes")
    ap.add_argument("--size", type=int, default=256, help="GEMM M = N = K")
    ap.add_argument("--n-ctx", type=int, default=256, help="attention sequence length")
    ap.add_argument("--out")
    args = ap.parse_args()
    metile.set_device("msl-emu")
    dtypes = ["float16"] if args.quick else ["float32", "float16"]
    archs = ["apple"] if args.quick else ["apple", "apple10"]
    size = 128 if args.quick else args.size
    lines = _table(f"Seed GEMM, M = N = K = {size}", "tile, simdgroups", gemm_rows(size, dtypes, archs))
    attention_dtypes = ["float16"] if args.quick or ml_dtypes is None else ["float16", "bfloat16"]
    rows, sites = attention_rows(args.n_ctx, ATTENTION_HEAD_DIMS, attention_dtypes, archs)
    lines += _table(f"Attention forward, Z = 1, H = 2, N_CTX = {args.n_ctx}, not causal", "head dim, blocks", rows)
    lines += ["### Attention: the threadgroup access sites with the most wavefronts", "",
              "| config | kernel line | access | share of wavefronts | wavefronts/instr | excess |",
              "|---|---|---|---|---|---|", *sites, ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
