"""Writes the ahead-of-time artifacts that crates/metile-runtime/tests/aot_artifacts.rs
launches (from crates/metile-runtime/tests/aot/kernels.py), with the meTile this
Python imports: `.venv/bin/python scripts/aot_fixtures.py`. tests/test_aot.py
fails when the checked-in artifacts differ from what this writes."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "crates" / "metile-runtime" / "tests" / "aot"

# (folder, kernel, signature, grid, target); cubins are left out: they depend on
# the NVRTC installed, and the runtime makes one from the source.
ARTIFACTS = [
    (f"{name}_{target}", kernel, signature, grid, target)
    for target in ("apple", "sm_90")
    for name, kernel, signature, grid in (
        ("add", "add_kernel", "X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256", "cdiv(N, BLOCK)"),
        ("neg_row_max", "neg_row_max", "X:*i32,Out:*i32,M:i32,N:i32,BLOCK:64", "M"),
    )
]


def write(out: Path) -> None:
    """Writes every artifact into a folder of `out`."""
    from metile import aot

    for folder, kernel, signature, grid, target in ARTIFACTS:
        k = aot.load_kernel(f"{FIXTURES / 'kernels.py'}:{kernel}")
        aot.compile_kernel(k, signature, target, out / folder, grid=grid, cubin=False)


if __name__ == "__main__":
    write(FIXTURES)
    print(f"wrote {len(ARTIFACTS)} artifacts into {FIXTURES}", file=sys.stderr)
