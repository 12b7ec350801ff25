"""Writes the ahead-of-time artifacts that crates/metile-runtime/tests/aot_artifacts.rs
launches (from crates/metile-runtime/tests/aot/kernels.py), with the meTile this
Python imports: `.venv/bin/python scripts/aot_fixtures.py`. tests/test_aot.py
fails when the checked-in artifacts differ from what this writes."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "crates" / "metile-runtime" / "tests" / "aot"

# (folder, kernel, signature, grid, target, num_sgs); cubins are left out: they
# depend on the NVRTC installed, and the runtime makes one from the source.
GEMM = "A:*fp16,B:*fp16,C:*fp32,M:i32,N:i32:16,K:i32:16,BLOCK_M:{0},BLOCK_N:{0},BLOCK_K:{1}"
ARTIFACTS = [
    (f"{name}_{target}", kernel, signature, grid, target, None)
    for target in ("apple", "sm_90")
    for name, kernel, signature, grid in (
        ("add", "add_kernel", "X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256", "cdiv(N, BLOCK)"),
        ("neg_row_max", "neg_row_max", "X:*i32,Out:*i32,M:i32,N:i32,BLOCK:64", "M"),
    )
] + [
    ("gemm_apple", "gemm", GEMM.format(64, 32), "cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)", "apple", None),
    # The H100's warpgroup MMA, its operands copied by the tensor memory accelerator.
    ("gemm_sm_90", "gemm", GEMM.format(128, 64), "cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)", "sm_90", 8),
]


def write(out: Path) -> None:
    """Writes every artifact into a folder of `out`."""
    from metile import aot

    for folder, kernel, signature, grid, target, num_sgs in ARTIFACTS:
        k = aot.load_kernel(f"{FIXTURES / 'kernels.py'}:{kernel}")
        aot.compile_kernel(k, signature, target, out / folder, grid=grid, num_sgs=num_sgs, cubin=False)


if __name__ == "__main__":
    write(FIXTURES)
    print(f"wrote {len(ARTIFACTS)} artifacts into {FIXTURES}", file=sys.stderr)
