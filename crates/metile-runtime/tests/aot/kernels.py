"""Kernels of the ahead-of-time artifacts the Rust tests launch
(`scripts/aot_fixtures.py` writes them; tests/test_aot.py checks they are current)."""

import metile


@metile.kernel
def add_kernel(X, Y, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) + metile.load(Y + offs, mask=mask), mask=mask)


@metile.kernel
def neg_row_max(X, Out, M, N, BLOCK: metile.constexpr):
    """Out[row] = max(-X[row, :N]) for M rows of int32 (M only sizes the grid):
    a reduction (threadgroup memory on Apple GPUs) and a negation (an opaque -1
    parameter on NVIDIA GPUs)."""
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + row * N + cols, mask=cols < N)
    metile.store(Out + row, metile.max(-x))
