"""Triton's tensor methods: `x.sum(axis=0)`, `x.max(1)`, `x.exp()`, ... are the module
functions with the tile first, on every backend."""

import numpy as np
import pytest

import metile


@metile.kernel
def _methods(X, Out, M, N, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    rows = metile.arange(0, BLOCK_M)
    cols = metile.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = metile.load(X + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    col_sums = x.sum(axis=0)
    row_max = x.max(1)
    row_min = x.min(axis=1, keep_dims=True)
    first_max = x.argmax(axis=1)
    scan = x.cumsum(axis=1)
    smooth = (x * 0.25).exp().sqrt().floor() + x.abs().sin().cos()
    metile.store(Out + cols, col_sums, mask=cols < N)
    metile.store(Out + BLOCK_N + rows, row_max, mask=rows < M)
    metile.store(Out + BLOCK_N + BLOCK_M + rows[:, None], row_min, mask=rows[:, None] < M)
    metile.store(Out + BLOCK_N + 2 * BLOCK_M + rows, first_max.to(metile.float32), mask=rows < M)
    base = BLOCK_N + 3 * BLOCK_M
    metile.store(Out + base + rows[:, None] * N + cols[None, :], scan, mask=mask)
    metile.store(Out + base + BLOCK_M * N + rows[:, None] * N + cols[None, :], smooth, mask=mask)


def test_tensor_methods_match_the_functions(device, rng):
    m, n, bm, bn = 5, 13, 8, 16
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.full(bn + 3 * bm + 2 * bm * n, np.nan, np.float32)
    _methods[(1,)](x, out, m, n, BLOCK_M=bm, BLOCK_N=bn)
    np.testing.assert_allclose(out[:n], x.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[bn:bn + m], x.max(1))
    np.testing.assert_array_equal(out[bn + bm:bn + bm + m], x.min(1))
    np.testing.assert_array_equal(out[bn + 2 * bm:bn + 2 * bm + m], x.argmax(1))
    base = bn + 3 * bm
    np.testing.assert_allclose(out[base:base + m * n].reshape(m, n), np.cumsum(x, 1), rtol=1e-5, atol=1e-5)
    smooth = np.floor(np.sqrt(np.exp(x * 0.25))) + np.cos(np.sin(np.abs(x)))
    got = out[base + bm * n:base + bm * n + m * n].reshape(m, n)
    np.testing.assert_allclose(got, smooth, rtol=1e-5, atol=1e-5)


@metile.kernel
def _bad_method(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), x.sum(axis=3))


def test_a_bad_argument_is_the_functions_error(device):
    with pytest.raises(metile.CompilationError, match="axis"):
        _bad_method[(1,)](np.zeros(8, np.float32), BLOCK=8)
