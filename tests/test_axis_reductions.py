"""Axis reductions spelled the way Triton users write them: `max(x, axis=0)` on a
1-D row, `sum(x, axis=1)[:, None]` broadcasts, reductions of reductions, a scalar
sum divided into a tile, in loops and branches; on every backend at ragged sizes,
against numpy. The suite's `METILE_CHECK_TARGETS=all` also compiles each one for
every GPU target."""

from pathlib import Path

import numpy as np
import pytest
from isolated import assert_ok, run_isolated

import metile


@metile.kernel
def softmax_rows(X, Out, n_cols, stride, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    offs = metile.arange(0, BLOCK)
    mask = offs < n_cols
    x = metile.load(X + row * stride + offs, mask=mask, other=-float("inf"))
    x = x - metile.max(x, axis=0)
    num = metile.exp(x)
    den = metile.sum(num, axis=0)
    metile.store(Out + row * stride + offs, num / den, mask=mask)


@metile.kernel
def layernorm_rows(X, Y, W, B, n_cols, stride, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    offs = metile.arange(0, BLOCK)
    mask = offs < n_cols
    x = metile.load(X + row * stride + offs, mask=mask, other=0.0)
    mean = metile.sum(x, axis=0) / n_cols
    xc = metile.where(mask, x - mean, 0.0)
    var = metile.sum(xc * xc, axis=0) / n_cols
    rstd = 1 / metile.sqrt(var + eps)
    w = metile.load(W + offs, mask=mask)
    b = metile.load(B + offs, mask=mask)
    metile.store(Y + row * stride + offs, xc * rstd * w + b, mask=mask)


@metile.kernel
def centred_2d(X, Out, Total, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.program_id(0) * BM + metile.arange(0, BM)
    rn = metile.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = metile.load(X + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    row_mean = metile.sum(x, axis=1) / N
    col_max = metile.max(metile.where(mask, x, -float("inf")), axis=0)
    total = metile.sum(metile.sum(x, axis=1), axis=0)
    y = (x - row_mean[:, None]) * col_max[None, :]
    metile.store(Out + rm[:, None] * N + rn[None, :], y, mask=mask)
    metile.store(Total + metile.program_id(0), total)


@metile.kernel
def column_then_scalar(X, Cols, Rows, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    x = metile.load(X + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.0)
    col = metile.sum(x, axis=0)
    biggest = metile.max(col, axis=0)
    row = metile.min(metile.where(rn[None, :] < N, x, float("inf")), axis=1)
    metile.store(Cols + rn, col / biggest, mask=rn < N)
    metile.store(Rows + rm, row * biggest, mask=rm < M)


@metile.kernel
def int_axis_reductions(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask, other=0)
    positives = metile.sum((x > 0).to(metile.int32), axis=0)
    hi = metile.max(metile.where(mask, x, -(2**31)), axis=-1)
    lo = metile.min(metile.where(mask, x, 2**31 - 1), axis=0)
    metile.store(Out + offs, x * positives + hi - lo, mask=mask)


@metile.kernel
def looped_sum(X, Out, N, BLOCK: metile.constexpr):
    acc = 0.0
    for start in range(0, N, BLOCK):
        offs = start + metile.arange(0, BLOCK)
        acc += metile.sum(metile.load(X + offs, mask=offs < N, other=0.0), axis=0)
    metile.store(Out, acc)


@metile.kernel
def branch_on_max(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N, other=-float("inf"))
    m = metile.max(x, axis=0)
    if m > 0:
        y = x / m
    else:
        y = x - m
    metile.store(Out + offs, y, mask=offs < N)


@pytest.mark.parametrize("n_cols", [1, 97, 128, 781])
def test_triton_softmax(device, rng, n_cols):
    rows = 5
    block = max(16, 1 << (n_cols - 1).bit_length())
    x = (rng.standard_normal((rows, n_cols)) * 4).astype(np.float32)
    out = np.zeros_like(x)
    softmax_rows[(rows,)](x, out, n_cols, n_cols, BLOCK=block)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_triton_softmax_all_negative_huge(device):
    x = np.full((3, 300), -3e38, np.float32)
    x[:, 7] = -1e38
    out = np.zeros_like(x)
    softmax_rows[(3,)](x, out, 300, 300, BLOCK=512)
    ref = np.zeros_like(x)
    ref[:, 7] = 1.0
    np.testing.assert_allclose(out, ref, atol=1e-7)


@pytest.mark.parametrize("n_cols", [3, 200, 1000])
def test_triton_layernorm(device, rng, n_cols):
    rows = 4
    block = max(16, 1 << (n_cols - 1).bit_length())
    x = rng.standard_normal((rows, n_cols)).astype(np.float32) + 3
    w = rng.standard_normal(n_cols).astype(np.float32)
    b = rng.standard_normal(n_cols).astype(np.float32)
    y = np.zeros_like(x)
    layernorm_rows[(rows,)](x, y, w, b, n_cols, n_cols, 1e-5, BLOCK=block)
    ref = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_row_and_column_reductions_broadcast_back(device, rng):
    M, N, BM = 37, 45, 16
    x = rng.random((M, N)).astype(np.float32)
    out = np.zeros_like(x)
    totals = np.zeros(metile.cdiv(M, BM), np.float32)
    centred_2d[(metile.cdiv(M, BM),)](x, out, totals, M, N, BM=BM, BN=64)
    for p in range(len(totals)):
        blk = x[p * BM:(p + 1) * BM]
        ref = (blk - blk.mean(1, keepdims=True)) * blk.max(0, keepdims=True)
        np.testing.assert_allclose(out[p * BM:(p + 1) * BM], ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(totals[p], blk.sum(), rtol=1e-5)


def test_a_reduced_column_reduced_again(device, rng):
    M, N = 30, 20
    x = rng.random((M, N)).astype(np.float32) + 0.5
    cols, rows = np.zeros(N, np.float32), np.zeros(M, np.float32)
    column_then_scalar[(1,)](x, cols, rows, M, N, BM=32, BN=32)
    c = x.sum(0)
    np.testing.assert_allclose(cols, c / c.max(), rtol=1e-5)
    np.testing.assert_allclose(rows, x.min(1) * c.max(), rtol=1e-5)


@pytest.mark.parametrize("n", [1, 50, 64])
def test_integer_axis_reductions_are_exact(device, rng, n):
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros_like(x)
    int_axis_reductions[(1,)](x, out, n, BLOCK=64)
    np.testing.assert_array_equal(out, x * (x > 0).sum() + x.max() - x.min())


def test_axis_reduction_carried_through_a_loop(device, rng):
    x = rng.random(1000).astype(np.float32)
    out = np.zeros(1, np.float32)
    looped_sum[(1,)](x, out, 1000, BLOCK=128)
    np.testing.assert_allclose(out[0], x.sum(), rtol=1e-5)


@pytest.mark.parametrize("sign", [1, -1])
def test_axis_reduction_decides_a_branch(device, rng, sign):
    x = (sign * rng.random(100) + sign * 0.1).astype(np.float32)
    out = np.zeros_like(x)
    branch_on_max[(1,)](x, out, 100, BLOCK=128)
    m = x.max()
    np.testing.assert_allclose(out, x / m if m > 0 else x - m, rtol=1e-6)


def test_an_unknown_check_target_is_named():
    out = run_isolated(
        """
        import numpy as np, metile
        from test_axis_reductions import looped_sum
        try:
            looped_sum[(1,)](np.ones(4, np.float32), np.zeros(1, np.float32), 4, BLOCK=16)
        except ValueError as e:
            print("ValueError:", e)
        """,
        device="cpu",
        env={"METILE_CHECK_TARGETS": "apple,vulkan"},
        cwd=str(Path(__file__).parent),
    )
    text = assert_ok(out)
    assert "ValueError: METILE_CHECK_TARGETS names an unknown target 'vulkan'" in text


@metile.kernel
def branch_joins_layouts(X, R, Out, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    x = metile.load(X + rm[:, None] * BN + rn[None, :])
    r0 = metile.load(R + rm)
    s = metile.max(x)
    rows = metile.sum(x, axis=1)
    if s > 0.0:
        v = rows
    else:
        v = -r0
    metile.store(Out + rm, v)


@pytest.mark.parametrize("bm, bn", [(4, 8), (32, 2), (16, 16), (1, 64)])
@pytest.mark.parametrize("sign", [1, -1])
def test_a_branch_on_a_whole_tile_reduction_may_exchange_layouts(device, rng, bm, bn, sign):
    # The join moves `r0` into the layout of `rows` through threadgroup memory (a
    # barrier) inside the branch: legal because every thread holds the same `s`.
    x = (sign * (rng.random((bm, bn)) + 0.1)).astype(np.float32)
    r = rng.standard_normal(bm).astype(np.float32)
    out = np.zeros(bm, np.float32)
    branch_joins_layouts[(1,)](x, r, out, BM=bm, BN=bn)
    np.testing.assert_allclose(out, x.sum(1) if sign > 0 else -r, rtol=1e-6)
