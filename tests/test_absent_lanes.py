"""Masked-off lanes of a load without `other=` are absent (docs/semantics.md):
reductions skip them, carried variables keep their previous value there, and
anything else reads them as 0. Every backend runs the same explicit Tile IR."""

import numpy as np
import pytest

import metile


def _softmax_rows(x):
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@metile.kernel
def softmax_unrolled(X, Out, N: metile.constexpr, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    m = -1e38
    for i in range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        m = metile.maximum(m, x)
    m = metile.max(m)
    s = 0.0
    for i in range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        s = s + metile.exp(x - m)
    s = metile.sum(s)
    for i in range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        metile.store(Out + row * N + cols, metile.exp(x - m) / s, mask=mask)


@pytest.mark.parametrize("N, BLOCK", [(300, 128), (100, 128), (256, 64)])
@pytest.mark.parametrize("negative", [False, True])
def test_softmax_over_an_unrolled_python_range(device, rng, N, BLOCK, negative):
    x = rng.standard_normal((3, N)).astype(np.float32)
    if negative:
        x = -np.abs(x) - 2.0
    out = np.full_like(x, np.nan)
    softmax_unrolled[(3,)](x, out, N=N, BLOCK=BLOCK)
    np.testing.assert_allclose(out, _softmax_rows(x), rtol=1e-5, atol=1e-7)


@metile.kernel
def softmax_one_block(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    mask = cols < N
    x = metile.load(X + row * N + cols, mask=mask)
    m = metile.max(x)
    e = metile.exp(x - m)
    metile.store(Out + row * N + cols, e / metile.sum(e), mask=mask)


@pytest.mark.parametrize("N", [1, 37, 128])
def test_single_block_softmax_of_negative_rows(device, rng, N):
    x = -np.abs(rng.standard_normal((4, N)).astype(np.float32)) - 1.0
    out = np.full_like(x, np.nan)
    softmax_one_block[(4,)](x, out, N, BLOCK=128)
    np.testing.assert_allclose(out, _softmax_rows(x), rtol=1e-5, atol=1e-7)


@metile.kernel
def affine_into_padding(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    metile.store(Out + offs, x * 2.0 + 1.0)


def test_unmasked_store_writes_zero_in_absent_lanes(device, rng):
    n, block = 300, 128
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(3 * block, np.nan, np.float32)
    affine_into_padding[(3,)](x, out, n, BLOCK=block)
    np.testing.assert_allclose(out[:n], x * 2.0 + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out[n:], 0.0)


@metile.kernel
def gemm_masked(A, B, C, M, N, K, SCALE: metile.constexpr, BM: metile.constexpr, BN: metile.constexpr,
                BK: metile.constexpr):
    rm = metile.program_id(0) * BM + metile.arange(0, BM)
    rn = metile.program_id(1) * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN), dtype="f32")
    for k in metile.tile_range(0, K, BK):
        rk = k + metile.arange(0, BK)
        a = metile.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K))
        b = metile.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N))
        if SCALE != 1.0:
            a = a * SCALE + 1.0  # absent lanes of a are no longer 0 in registers
        acc = metile.dot(a, b, acc)
    metile.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("scale", [1.0, 2.0])
@pytest.mark.parametrize("M, N, K", [(33, 17, 45), (16, 16, 7)])
def test_ragged_gemm_with_masked_loads(device, rng, M, N, K, scale):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    grid = (metile.cdiv(M, 16), metile.cdiv(N, 16))
    gemm_masked[grid](a, b, c, M, N, K, SCALE=scale, BM=16, BN=16, BK=16)
    ref = (a.astype(np.float64) * scale + (1.0 if scale != 1.0 else 0.0)) @ b
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


@metile.kernel
def branch_join(X, Out, N, flag, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    acc = metile.zeros((BLOCK,), dtype="f32") - 5.0
    x = metile.load(X + offs, mask=offs < N)
    if flag > 0:
        acc = x * 2.0
    metile.store(Out + offs, acc)


@pytest.mark.parametrize("flag", [1, 0])
def test_if_join_keeps_the_previous_value_in_absent_lanes(device, rng, flag):
    n, block = 20, 32
    x = rng.standard_normal(n).astype(np.float32)
    out = np.full(block, np.nan, np.float32)
    branch_join[(1,)](x, out, n, flag, BLOCK=block)
    expected = np.full(block, -5.0, np.float32)
    if flag:
        expected[:n] = 2.0 * x
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@metile.kernel
def masked_extrema(X, Mx, Mn, S, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + row * N + cols, mask=cols < N)
    metile.store(Mx + row, metile.max(x))
    metile.store(Mn + row, metile.min(x))
    metile.store(S + row, metile.sum(x + 1))


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_reductions_skip_absent_lanes(device, rng, dtype):
    rows, n = 3, 45
    x = rng.integers(5, 1000, (rows, n)).astype(dtype)
    x[1] = -x[1]  # all negative: the max must not see the absent lanes' 0
    mx, mn, s = (np.zeros(rows, dtype) for _ in range(3))
    masked_extrema[(rows,)](x, mx, mn, s, n, BLOCK=64)
    np.testing.assert_array_equal(mx, x.max(1))
    np.testing.assert_array_equal(mn, x.min(1))
    np.testing.assert_array_equal(s, (x + 1).sum(1))


def test_a_reduction_over_no_lanes_gives_the_identity(device):
    x = np.ones(4, np.float32)
    mx, mn, s = (np.zeros(1, np.float32) for _ in range(3))
    masked_extrema[(1,)](x, mx, mn, s, 0, BLOCK=4)
    assert mx[0] == -np.inf and mn[0] == np.inf and s[0] == 0.0
    xi = np.ones(4, np.int32)
    mxi, mni, si = (np.zeros(1, np.int32) for _ in range(3))
    masked_extrema[(1,)](xi, mxi, mni, si, 0, BLOCK=4)
    assert (mxi[0], mni[0], si[0]) == (np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0)


@metile.kernel
def row_max_2d(X, Out, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.arange(0, BN)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = metile.load(X + rows[:, None] * N + cols[None, :], mask=mask)
    metile.store(Out + rows, metile.max(x, axis=1), mask=rows < M)


def test_axis_reduction_skips_absent_lanes(device, rng):
    m, n = 10, 13
    x = -np.abs(rng.standard_normal((m, n)).astype(np.float32)) - 1.0
    out = np.full(m, np.nan, np.float32)
    row_max_2d[(metile.cdiv(m, 8),)](x, out, m, n, BM=8, BN=16)
    np.testing.assert_array_equal(out, x.max(1))


@metile.kernel
def running_max_other(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    m = metile.full((BLOCK,), float("-inf"), dtype="f32")
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        x = metile.load(X + row * N + cols, mask=cols < N, other=float("-inf"))
        m = metile.maximum(m, x)
    metile.store(Out + row, metile.max(m))


def test_other_keeps_triton_semantics(device, rng):
    x = -np.abs(rng.standard_normal((3, 70)).astype(np.float32)) - 1.0
    out = np.zeros(3, np.float32)
    running_max_other[(3,)](x, out, 70, BLOCK=32)
    np.testing.assert_array_equal(out, x.max(1))


@metile.kernel
def count_where(X, Out, N, T, BLOCK: metile.constexpr):
    total = 0
    for i in metile.tile_range(0, N, BLOCK):
        offs = i + metile.arange(0, BLOCK)
        x = metile.load(X + offs, mask=offs < N)
        total = total + metile.sum(metile.where(x > T, 1, 0))
    metile.store(Out, total)


def test_where_on_absent_lanes_is_skipped_by_the_reduction(device, rng):
    # x > -1 is true in absent lanes (they read 0), but those lanes are absent.
    n = 100
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(1, np.int32)
    count_where[(1,)](x, out, n, -1, BLOCK=64)
    assert out[0] == int((x > -1).sum())
