"""`argmax`/`argmin` (first index of the extreme, NaNs skipped as `max` skips
them), `max(..., return_indices=True)`, `xor_sum`, `keep_dims=` and `dtype=` on
reductions, on 1-D and 2-D tiles along either axis, with absent lanes, on every
backend against numpy."""

import numpy as np
import pytest

import metile


def _np_argmax_skip_nan(x, axis, op):
    """numpy's argmax/argmin with NaNs skipped unless a line is all NaN (then its
    first NaN); meTile's `max` ignores NaNs the same way."""
    fill = -np.inf if op == "max" else np.inf
    filled = np.where(np.isnan(x), fill, x)
    idx = np.argmax(filled, axis) if op == "max" else np.argmin(filled, axis)
    if axis is None:
        return idx if not np.isnan(x).all() else 0
    all_nan = np.isnan(x).all(axis)
    return np.where(all_nan, 0, idx)


@metile.kernel
def arg_1d(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    metile.store(Out, metile.argmax(x, axis=0))
    metile.store(Out + 1, metile.argmin(x, axis=0))
    m, i = metile.max(x, axis=0, return_indices=True)
    metile.store(Out + 2, metile.where(m == metile.max(x), i, -1))


@pytest.mark.parametrize("n, block", [(1, 16), (13, 16), (100, 128), (1024, 1024)])
def test_argmax_argmin_1d_ragged(device, rng, n, block):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(3, np.int32)
    arg_1d[(1,)](x, out, n, BLOCK=block)
    assert list(out) == [np.argmax(x), np.argmin(x), np.argmax(x)]


def test_ties_give_the_first_index(device, rng):
    x = rng.integers(0, 3, 50).astype(np.int32)
    out = np.zeros(3, np.int32)
    arg_1d[(1,)](x, out, 50, BLOCK=64)
    assert list(out[:2]) == [np.argmax(x), np.argmin(x)]


@pytest.mark.parametrize("dtype", [np.uint32, np.int64, np.float16])
def test_other_dtypes(device, rng, dtype):
    x = rng.integers(0, 60000, 77).astype(dtype)
    out = np.zeros(3, np.int32)
    arg_1d[(1,)](x, out, 77, BLOCK=128)
    assert list(out[:2]) == [np.argmax(x), np.argmin(x)]


def test_nans_are_skipped_unless_every_element_is_nan(device):
    x = np.array([np.nan, 1.0, 5.0, np.nan, 5.0, -2.0, -2.0, np.nan], np.float32)
    out = np.zeros(3, np.int32)
    arg_1d[(1,)](x, out, 8, BLOCK=8)
    assert list(out[:2]) == [2, 5]
    arg_1d[(1,)](np.full(8, np.nan, np.float32), out, 8, BLOCK=8)
    assert list(out[:2]) == [0, 0]
    y = np.array([np.nan, np.nan, np.nan, np.nan], np.float32)
    arg_1d[(1,)](y, out, 3, BLOCK=4)
    assert list(out[:2]) == [0, 0]


def test_minus_infinity_and_signed_zeros(device):
    x = np.array([-np.inf, -np.inf, 0.0, -0.0, np.inf, np.inf, -0.0, 0.0], np.float32)
    out = np.zeros(3, np.int32)
    arg_1d[(1,)](x, out, 8, BLOCK=8)
    assert list(out[:2]) == [4, 0]
    z = np.array([-0.0, 0.0, -0.0, 0.0], np.float32)
    arg_1d[(1,)](z, out, 4, BLOCK=4)
    assert list(out[:2]) == [0, 0]


@metile.kernel
def arg_absent(X, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs % 4 != 0)
    metile.store(Out, metile.argmax(x, 0))
    metile.store(Out + 1, metile.argmin(x, 0))
    none = metile.load(X + offs, mask=offs < 0)
    metile.store(Out + 2, metile.argmax(none, 0))


def test_absent_lanes_are_skipped(device, rng):
    x = rng.standard_normal(32).astype(np.float32)
    x[0], x[8] = 100.0, -100.0
    out = np.full(3, -1, np.int32)
    arg_absent[(1,)](x, out, BLOCK=32)
    present = np.arange(32) % 4 != 0
    masked = np.where(present, x, np.nan)
    assert list(out) == [np.nanargmax(masked), np.nanargmin(masked), 0]


@metile.kernel
def arg_2d(X, Out, M, N, AXIS: metile.constexpr, KEEP: metile.constexpr,
           BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = metile.load(X + rm[:, None] * N + rn[None, :], mask=mask)
    i = metile.argmax(x, AXIS, keep_dims=KEEP)
    j = metile.argmin(x, axis=AXIS, tie_break_left=False, keep_dims=KEEP)
    if AXIS == 0:
        idx = rn[None, :] if KEEP else rn
        metile.store(Out + idx, i * 1000 + j, mask=idx < N)
    else:
        idx = rm[:, None] if KEEP else rm
        metile.store(Out + idx, i * 1000 + j, mask=idx < M)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("keep", [False, True])
def test_argmax_2d_along_either_axis(device, rng, axis, keep):
    M, N = 9, 21
    x = rng.integers(-50, 50, (M, N)).astype(np.int32)
    out = np.zeros(N if axis == 0 else M, np.int32)
    arg_2d[(1,)](x, out, M, N, AXIS=axis, KEEP=keep, BM=16, BN=32)
    np.testing.assert_array_equal(out, np.argmax(x, axis) * 1000 + np.argmin(x, axis))


@metile.kernel
def arg_rows(X, Out, Vals, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    x = metile.load(X + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
    v, i = metile.min(x, axis=1, return_indices=True)
    metile.store(Out + rm, i, mask=rm < M)
    metile.store(Vals + rm, v, mask=rm < M)
    metile.store(Out + BM, metile.argmax(x))


def test_row_indices_and_the_flattened_index(device, rng):
    M, N = 5, 7
    x = rng.standard_normal((M, N)).astype(np.float32)
    x[2, 3] = np.nan
    out = np.zeros(9, np.int32)
    vals = np.zeros(M, np.float32)
    arg_rows[(1,)](x, out, vals, M, N, BM=8, BN=8)
    np.testing.assert_array_equal(out[:M], _np_argmax_skip_nan(x, 1, "min"))
    np.testing.assert_array_equal(vals, np.nanmin(x, 1))
    assert out[8] == np.nanargmax(x)


# ------------------------------------------------------------------ xor_sum, keep_dims, dtype


@metile.kernel
def xor_kernel(X, Rows, Cols, All, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    x = metile.load(X + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
    metile.store(Rows + rm, metile.xor_sum(x, axis=1), mask=rm < M)
    metile.store(Cols + rn, metile.xor_sum(x, 0), mask=rn < N)
    metile.store(All, metile.xor_sum(x))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64])
def test_xor_sum_along_each_axis_skips_absent_lanes(device, rng, dtype):
    M, N = 6, 37
    x = rng.integers(0, 2**31 - 1, (M, N)).astype(dtype)
    rows, cols, total = np.zeros(M, dtype), np.zeros(N, dtype), np.zeros(1, dtype)
    xor_kernel[(1,)](x, rows, cols, total, M, N, BM=8, BN=64)
    np.testing.assert_array_equal(rows, np.bitwise_xor.reduce(x, 1))
    np.testing.assert_array_equal(cols, np.bitwise_xor.reduce(x, 0))
    assert total[0] == np.bitwise_xor.reduce(x, None)


@metile.kernel
def keep_dims_kernel(X, Out, Total, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = rm[:, None] * N + rn[None, :]
    x = metile.load(X + ptrs, mask=mask)
    centred = x - metile.max(x, 1, keep_dims=True) - metile.min(x, axis=0, keep_dims=True)
    metile.store(Out + ptrs, centred / metile.sum(x, axis=None, keep_dims=True), mask=mask)
    metile.store(Total, metile.sum(x > 0, dtype=metile.int64))


def test_keep_dims_broadcasts_back(device, rng):
    M, N = 10, 12
    x = rng.standard_normal((M, N)).astype(np.float32)
    out = np.zeros_like(x)
    total = np.zeros(1, np.int64)
    keep_dims_kernel[(1,)](x, out, total, M, N, BM=16, BN=16)
    want = (x - x.max(1, keepdims=True) - x.min(0, keepdims=True)) / x.sum()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    assert total[0] == (x > 0).sum()


# ------------------------------------------------------------------ errors


@metile.kernel
def xor_of_floats(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X, metile.xor_sum(metile.load(X + offs)))


def test_xor_sum_of_floats_is_refused(device):
    with pytest.raises(metile.CompilationError, match=r"xor_sum needs an integer tile, got f32\[8\]"):
        xor_of_floats[(1,)](np.zeros(8, np.float32), BLOCK=8)


@metile.kernel
def arg_bad_axis(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X, metile.argmin(metile.load(X + offs), axis=2))


def test_argmin_axis_out_of_range(device):
    with pytest.raises(metile.CompilationError, match="argmin: axis 2 is out of range for a tile of rank 1"):
        arg_bad_axis[(1,)](np.zeros(8, np.float32), BLOCK=8)


@metile.kernel
def keep_dims_not_static(X, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X, metile.sum(metile.load(X + offs), 0, keep_dims=N > 0))


def test_keep_dims_must_be_known_at_compile_time(device):
    with pytest.raises(metile.CompilationError, match="keep_dims must be known when the kernel is compiled"):
        keep_dims_not_static[(1,)](np.zeros(8, np.float32), 1, BLOCK=8)
