"""What the Apple GEMM compiles to, per config, without a Mac.

    python benchmarks/apple_gemm.py [--arch apple|apple10] [--out table.md]

For the seed GEMM (tile_load, dot, tile_store) at several block shapes,
dtypes and simdgroup counts, prints the matrix atom `dot` uses, the
simdgroup grid, the threadgroup memory of the kernel, the row padding chosen
for the staged operands and the bank conflicts of the fragment reads it
leaves (computed from the layouts, for 32 banks of 4 bytes: Apple does not
document its banks), the fragment reads per simdgroup_multiply_accumulate,
and the number of matrix instructions in the emitted MSL. The same figures
without padding show what the padding pass buys. `--arch apple10` compiles
for Apple10 GPUs, whose f16/bf16 dots run on Metal 4's matmul2d.
"""

import argparse

from metile import _frontend, _metile
from metile.testing.reference_kernels import gemm

CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, num_sgs)
    (32, 32, 16, 4), (64, 64, 16, 4), (64, 64, 32, 4), (64, 32, 32, 2), (32, 64, 32, 4), (64, 64, 32, 8),
]


def row(cfg, dtype, arch):
    bm, bn, bk, sgs = cfg
    params = [("A", "ptr", dtype, 1), ("B", "ptr", dtype, 1), ("C", "ptr", "f32", 1),
              ("M", "scalar", "i32", 16), ("N", "scalar", "i32", 16), ("K", "scalar", "i32", 16)]
    traced = _frontend.specialize(gemm.fn, params, {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, {})
    out = _metile.compile_msl(traced, num_sgs=sgs, arch=arch)
    plan = _metile.dot_plan(bm, bn, bk, dtype, sgs, arch=arch)
    bare = _metile.dot_plan(bm, bn, bk, dtype, sgs, arch=arch, pad_dot_scratch=False)
    mmas = out["msl"].count("simdgroup_multiply_accumulate(") + out["msl"].count(".run(")
    if plan is None:
        return f"| {bm}x{bn}x{bk} | {dtype} | {sgs} | generic | | {out['threadgroup_bytes']} | | | | |"
    return (f"| {bm}x{bn}x{bk} | {dtype} | {sgs} | {plan['atom']} | {plan['warps'][0]}x{plan['warps'][1]} "
            f"| {out['threadgroup_bytes']} | {plan['pad_bytes'][0]}, {plan['pad_bytes'][1]} "
            f"| {plan['bank_conflicts'][0]}, {plan['bank_conflicts'][1]} "
            f"| {bare['bank_conflicts'][0]}, {bare['bank_conflicts'][1]} | {plan['reads_per_mma']:.2f} | {mmas} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--arch", default="apple", choices=("apple", "apple10"))
    args = ap.parse_args()
    lines = ["| tile MxNxK | dtype | simdgroups | atom | simdgroup grid | threadgroup bytes | row pad A, B (bytes) "
             "| bank conflicts A, B | without padding | reads per MMA | MMAs in the MSL |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for dtype in ("f32", "f16", "bf16"):
        lines += [row(cfg, dtype, args.arch) for cfg in CONFIGS]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
