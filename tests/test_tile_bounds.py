"""`tile_load` / `tile_store` with `bounds=(rows, cols)`: meTile's extension of the
seed's block accesses for matrices whose sides are not multiples of the tile.
Elements outside the bounds read 0 and are not written."""

import numpy as np
import pytest

import metile
from metile.testing.reference_kernels import gemm_bounded


@pytest.mark.parametrize("M, N, K", [(32, 32, 32), (33, 17, 45), (5, 70, 3), (1, 1, 1)])
def test_ragged_gemm_with_bounds(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    grid = (metile.cdiv(M, 16), metile.cdiv(N, 32))
    gemm_bounded[grid](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=32, BLOCK_K=16)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@metile.kernel
def copy_block(X, Out, rows, cols, BR: metile.constexpr, BC: metile.constexpr):
    r0 = metile.program_id(0) * BR
    c0 = metile.program_id(1) * BC
    t = metile.tile_load(X, r0, c0, cols, (BR, BC), bounds=(rows, cols))
    metile.tile_store(Out, r0, c0, cols + 1, t + 1.0, (BR, BC), bounds=[rows, cols])


def test_bounds_read_zero_and_skip_writes_outside(device, rng):
    rows, cols = 7, 10
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((rows, cols + 1), -7.0, np.float32)
    copy_block[(metile.cdiv(rows, 4), metile.cdiv(cols, 4))](x, out, rows, cols, BR=4, BC=4)
    np.testing.assert_allclose(out[:, :cols], x + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(out[:, cols], -7.0)


@metile.kernel
def bad_bounds(X, Out, n, BR: metile.constexpr):
    t = metile.tile_load(X, 0, 0, n, (BR, BR), bounds=(n,))
    metile.tile_store(Out, 0, 0, n, t, (BR, BR))


def test_bounds_must_be_rows_and_cols():
    x = np.zeros(16, np.float32)
    with pytest.raises(metile.CompilationError, match=r"tile_load's bounds must be \(rows, cols\)") as info:
        bad_bounds[(1,)](x, x, 4, BR=4)
    assert "bounds=(n,)" in str(info.value)
