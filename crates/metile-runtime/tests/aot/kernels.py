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


@metile.kernel
def gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    """C = A @ B for row-major matrices whose sizes are multiples of the blocks:
    simdgroup matrices on Apple GPUs, wgmma fed by tensor copies on the H100."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))
