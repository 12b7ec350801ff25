"""Shape ops on every backend against numpy: transposes (`x.T`, `trans`,
`permute`, 2-D square and not, 3-D in every order), `reshape` both ways and to
a scalar, `expand_dims` with tuples, `broadcast_to`, `join`/`split` round trips,
`cat`, absent lanes through each, and the errors (type, message, kernel line).
`dot(a, b.T)` and `dot(a.T, b)` live in test_shape_dot.py. The suite's
METILE_CHECK_TARGETS also compiles each kernel for every GPU target."""

import inspect
import itertools

import numpy as np
import pytest

import metile


def line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _ragged_2d(rng, m, n, dtype):
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, (m, n)).astype(dtype)
    return rng.standard_normal((m, n)).astype(dtype)


# ---------------------------------------------------------------- transposes


@metile.kernel
def transpose_2d(X, Out, M, N, HOW: metile.constexpr, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    x = metile.load(X + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
    if HOW == "T":
        y = x.T
    elif HOW == "trans":
        y = metile.trans(x)
    elif HOW == "trans_dims":
        y = metile.trans(x, 1, 0)
    elif HOW == "permute":
        y = metile.permute(x, (1, 0))
    else:
        y = x.permute(1, 0)
    metile.store(Out + rn[:, None] * M + rm[None, :], y, mask=(rn[:, None] < N) & (rm[None, :] < M))


@pytest.mark.parametrize("m, n, bm, bn", [(5, 7, 8, 8), (30, 17, 32, 64), (64, 64, 64, 64), (1, 40, 2, 64),
                                          (100, 3, 128, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_transpose_2d_square_and_not(device, rng, m, n, bm, bn, dtype):
    x = _ragged_2d(rng, m, n, dtype)
    out = np.zeros((n, m), dtype)
    transpose_2d[(1,)](x, out, m, n, HOW="T", BM=bm, BN=bn)
    np.testing.assert_array_equal(out, x.T)


@pytest.mark.parametrize("how", ["trans", "trans_dims", "permute", "method"])
def test_every_transpose_spelling(device, rng, how):
    x = _ragged_2d(rng, 13, 9, np.float32)
    out = np.zeros((9, 13), np.float32)
    transpose_2d[(1,)](x, out, 13, 9, HOW=how, BM=16, BN=16)
    np.testing.assert_array_equal(out, x.T)


@metile.kernel
def transpose_then_reduce(X, Out, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    x = metile.load(X + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
    # Absent lanes (outside M x N) stay absent through the transpose, so the
    # max of all-negative rows is not 0.
    col_max = metile.max(x.T, axis=1)
    metile.store(Out + rn, col_max, mask=rn < N)


def test_absent_lanes_follow_a_transpose(device, rng):
    x = -1 - rng.random((5, 11)).astype(np.float32)
    out = np.zeros(11, np.float32)
    transpose_then_reduce[(1,)](x, out, 5, 11, BM=8, BN=16)
    np.testing.assert_array_equal(out, x.max(axis=0))


@metile.kernel
def permute_3d(X, Out, A, B, C, D0: metile.constexpr, D1: metile.constexpr, D2: metile.constexpr,
               BA: metile.constexpr, BB: metile.constexpr, BC: metile.constexpr):
    i = metile.arange(0, BA)[:, None, None]
    j = metile.arange(0, BB)[None, :, None]
    k = metile.arange(0, BC)[None, None, :]
    inside = (i < A) & (j < B) & (k < C)
    x = metile.load(X + (i * B + j) * C + k, mask=inside)
    y = metile.permute(x, D0, D1, D2)
    # The same indices, permuted the same way, address the result.
    idx = metile.permute(i + 0 * j + 0 * k, D0, D1, D2)
    jdx = metile.permute(j + 0 * i + 0 * k, D0, D1, D2)
    kdx = metile.permute(k + 0 * i + 0 * j, D0, D1, D2)
    ok = metile.permute(inside, (D0, D1, D2))
    shape = (A, B, C)
    dims = (idx, jdx, kdx)
    flat = dims[D0] * shape[D1] * shape[D2] + dims[D1] * shape[D2] + dims[D2]
    metile.store(Out + flat, y, mask=ok)


@pytest.mark.parametrize("dims", [p for p in itertools.permutations(range(3)) if p != (0, 1, 2)])
@pytest.mark.parametrize("shape, block", [((2, 4, 8), (2, 4, 8)), ((3, 5, 6), (4, 8, 8))])
def test_permute_3d_every_order(device, rng, dims, shape, block):
    x = rng.standard_normal(shape).astype(np.float32)
    out = np.zeros([shape[d] for d in dims], np.float32)
    permute_3d[(1,)](x, out, *shape, D0=dims[0], D1=dims[1], D2=dims[2], BA=block[0], BB=block[1], BC=block[2])
    np.testing.assert_array_equal(out, np.transpose(x, dims))


@metile.kernel
def transposed_pointers(X, Out, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)[:, None]
    rn = metile.arange(0, BN)[None, :]
    ptrs = (X + rm * N + rn).T  # [BN, BM] pointers
    inside = ((rm < M) & (rn < N)).T
    y = metile.load(ptrs, mask=inside, other=-1.0)
    flat = metile.reshape(Out + metile.arange(0, BN * BM), (BN, BM))
    metile.store(flat, y)


def test_pointer_tiles_transpose_and_reshape(device, rng):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    out = np.zeros((8, 8), np.float32)
    transposed_pointers[(1,)](x, out, 5, 6, BM=8, BN=8)
    expected = np.full((8, 8), -1.0, np.float32)
    expected[:6, :5] = x.T
    np.testing.assert_array_equal(out, expected)


# ------------------------------------------------------------------- reshape


@metile.kernel
def flat_to_rows(X, Out, Sums, N, R: metile.constexpr, C: metile.constexpr):
    offs = metile.arange(0, R * C)
    x = metile.load(X + offs, mask=offs < N)
    m = x.reshape(R, C)
    rows = metile.arange(0, R)[:, None] * C + metile.arange(0, C)[None, :]
    metile.store(Out + rows, m, mask=rows < N)
    metile.store(Sums + metile.arange(0, R), metile.sum(m, axis=1))


@pytest.mark.parametrize("n, r, c", [(64, 8, 8), (50, 4, 16), (1000, 32, 32), (7, 1, 8), (96, 3, 32)])
def test_reshape_flat_to_rows(device, rng, n, r, c):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    sums = np.zeros(r, np.float32)
    flat_to_rows[(1,)](x, out, sums, n, R=r, C=c)
    np.testing.assert_array_equal(out, x)
    padded = np.zeros(r * c, np.float64)
    padded[:n] = x
    np.testing.assert_allclose(sums, padded.reshape(r, c).sum(axis=1), rtol=1e-5, atol=1e-5)


@metile.kernel
def rows_to_flat(X, Out, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)[:, None]
    rn = metile.arange(0, BN)[None, :]
    x = metile.load(X + rm * N + rn, mask=(rm < M) & (rn < N), other=-7)
    flat = metile.reshape(x, (BM * BN,))
    offs = metile.arange(0, BM * BN)
    metile.store(Out + offs, flat)


@pytest.mark.parametrize("m, n, bm, bn", [(4, 8, 4, 8), (5, 3, 8, 4), (32, 32, 32, 32), (2, 100, 2, 128)])
def test_reshape_rows_to_flat(device, rng, m, n, bm, bn):
    x = rng.integers(-100, 100, (m, n)).astype(np.int32)
    out = np.zeros(bm * bn, np.int32)
    rows_to_flat[(1,)](x, out, m, n, BM=bm, BN=bn)
    expected = np.full((bm, bn), -7, np.int32)
    expected[:m, :n] = x
    np.testing.assert_array_equal(out, expected.reshape(-1))


@metile.kernel
def reshape_3d_2d(X, Out, A: metile.constexpr, B: metile.constexpr, C: metile.constexpr):
    offs = metile.arange(0, A * B * C)
    x = metile.load(X + offs).reshape(A, B, C)
    y = metile.reshape(x * 2, A * B, C)
    rows = metile.arange(0, A * B)[:, None] * C + metile.arange(0, C)[None, :]
    metile.store(Out + rows, y)


@pytest.mark.parametrize("shape", [(4, 8, 8), (2, 3, 16), (8, 2, 2)])
def test_reshape_between_ranks(device, rng, shape):
    x = rng.standard_normal(int(np.prod(shape))).astype(np.float32)
    out = np.zeros_like(x)
    reshape_3d_2d[(1,)](x, out, A=shape[0], B=shape[1], C=shape[2])
    np.testing.assert_array_equal(out, x * 2)


@metile.kernel
def reshape_to_scalar(X, Out):
    one = metile.load(X + metile.arange(0, 1))
    s = metile.reshape(one[None, :], ())
    metile.store(Out, s + 1)
    metile.store(Out + 1 + metile.arange(0, 4), metile.reshape(s, 1) + metile.zeros((4,)))


def test_reshape_to_and_from_a_scalar(device):
    out = np.zeros(5, np.float32)
    reshape_to_scalar[(1,)](np.array([2.5], np.float32), out)
    np.testing.assert_array_equal(out, [3.5, 2.5, 2.5, 2.5, 2.5])


@metile.kernel
def reshape_2d_2d(X, Out, A: metile.constexpr, B: metile.constexpr, C: metile.constexpr, D: metile.constexpr):
    x = metile.load(X + metile.arange(0, A)[:, None] * B + metile.arange(0, B)[None, :])
    y = x.reshape(C, D) + metile.arange(0, C)[:, None] * 1000
    metile.store(Out + metile.arange(0, C)[:, None] * D + metile.arange(0, D)[None, :], y)


@pytest.mark.parametrize("shapes", [(6, 4, 4, 6), (1, 12, 4, 3), (3, 4, 2, 6), (8, 8, 4, 16), (4, 6, 24, 1)])
@pytest.mark.parametrize("num_sgs", [1, 4])
def test_reshapes_whose_layouts_do_not_split(device, rng, shapes, num_sgs):
    # Runs of elements a thread holds cross the new rows: the values move
    # through threadgroup memory on GPUs.
    a, b, c, d = shapes
    x = rng.integers(-100, 100, (a, b)).astype(np.int32)
    out = np.zeros((c, d), np.int32)
    reshape_2d_2d[(1,)](x, out, A=a, B=b, C=c, D=d, num_sgs=num_sgs)
    np.testing.assert_array_equal(out, x.reshape(c, d) + np.arange(c)[:, None] * 1000)


@metile.kernel
def split_small(X, Lo, Hi, N: metile.constexpr):
    # A [N, 2] tile small enough that threads, not registers, hold its pairs.
    x = metile.load(X + metile.arange(0, N)[:, None] * 2 + metile.arange(0, 2)[None, :])
    lo, hi = metile.split(x + 1)
    metile.store(Lo + metile.arange(0, N), lo)
    metile.store(Hi + metile.arange(0, N), hi * lo)


@pytest.mark.parametrize("n", [1, 8, 48])
@pytest.mark.parametrize("num_sgs", [1, 4])
def test_split_of_pairs_held_by_different_threads(device, rng, n, num_sgs):
    x = rng.integers(-100, 100, (n, 2)).astype(np.int32)
    lo = np.zeros(n, np.int32)
    hi = np.zeros(n, np.int32)
    split_small[(1,)](x, lo, hi, N=n, num_sgs=num_sgs)
    np.testing.assert_array_equal(lo, x[:, 0] + 1)
    np.testing.assert_array_equal(hi, (x[:, 1] + 1) * (x[:, 0] + 1))


@metile.kernel
def thread_level_shapes(X, Out):
    tid = metile.thread_id()
    x = metile.load(X + tid) * 2
    y = x.reshape(4, 32).T  # [32, 4]: y[i, j] = x[j * 32 + i]
    metile.store(Out + metile.arange(0, 32)[:, None] * 4 + metile.arange(0, 4)[None, :], y)


def test_thread_level_values_reshape_and_transpose(device, rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.zeros((32, 4), np.float32)
    thread_level_shapes[(1,)](x, out, num_sgs=4)
    np.testing.assert_array_equal(out, (x * 2).reshape(4, 32).T)


@metile.kernel
def quotient_transposed(X, Y, Keep, Out, N: metile.constexpr):
    r = metile.arange(0, N)[:, None] * N + metile.arange(0, N)[None, :]
    q = (metile.load(X + r) // metile.load(Y + r)).T
    # Lane (i, j) of the transpose is lane (j, i) of the quotient: a store
    # masked by the transposed nonzero divisors observes no undefined quotient.
    keep = (metile.load(Keep + r) != 0).T
    metile.store(Out + r, q, mask=keep)


def test_undefined_lanes_follow_a_transpose(device):
    x = np.arange(16, dtype=np.int32).reshape(4, 4) + 1
    y = np.ones((4, 4), np.int32)
    y[0, 3] = 0
    out = np.full((4, 4), -1, np.int32)
    quotient_transposed[(1,)](x, y, y, out, N=4)
    np.testing.assert_array_equal(out, np.where(y.T != 0, x.T, -1))
    if device == "cpu":
        # A mask transposed once too often stores the undefined lane.
        with pytest.raises(ZeroDivisionError, match=r"integer division by zero: 4 // 0"):
            quotient_transposed[(1,)](x, y, y.T.copy(), out, N=4)


# ------------------------------------------------- expand_dims, broadcast_to


@metile.kernel
def expand_and_broadcast(X, Out, Out2, N, M: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N, other=0.5)
    e = metile.expand_dims(x, (0, -1))  # [1, BLOCK, 1]
    b = metile.broadcast_to(e, 2, BLOCK, M)
    i = metile.arange(0, 2)[:, None, None]
    j = metile.arange(0, BLOCK)[None, :, None]
    k = metile.arange(0, M)[None, None, :]
    metile.store(Out + (i * BLOCK + j) * M + k, b + 0 * i)
    rows = x.expand_dims(1).broadcast_to((BLOCK, M))
    metile.store(Out2 + metile.arange(0, BLOCK)[:, None] * M + metile.arange(0, M)[None, :], rows)


@pytest.mark.parametrize("n, block, m", [(5, 8, 4), (16, 16, 1), (30, 32, 8)])
def test_expand_dims_with_tuples_and_broadcast_to(device, rng, n, block, m):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros((2, block, m), np.float32)
    out2 = np.zeros((block, m), np.float32)
    expand_and_broadcast[(1,)](x, out, out2, n, M=m, BLOCK=block)
    padded = np.full(block, 0.5, np.float32)
    padded[:n] = x
    np.testing.assert_array_equal(out, np.broadcast_to(padded[None, :, None], (2, block, m)))
    np.testing.assert_array_equal(out2, np.broadcast_to(padded[:, None], (block, m)))


@metile.kernel
def broadcast_pair(X, Y, Out, N: metile.constexpr):
    a = metile.load(X + metile.arange(0, N))[:, None]
    b = metile.load(Y + metile.arange(0, N))[None, :]
    a2, b2 = metile.broadcast(a, b)
    metile.store(Out + metile.arange(0, N)[:, None] * N + metile.arange(0, N)[None, :], a2 * 10 + b2)


def test_broadcast_of_two_tiles(device, rng):
    x = rng.integers(0, 9, 8).astype(np.int32)
    y = rng.integers(0, 9, 8).astype(np.int32)
    out = np.zeros((8, 8), np.int32)
    broadcast_pair[(1,)](x, y, out, N=8)
    np.testing.assert_array_equal(out, x[:, None] * 10 + y[None, :])


# ------------------------------------------------------- join, split and cat


@metile.kernel
def join_split(A, B, Joined, A2, B2, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(A + offs, mask=offs < N)
    b = metile.load(B + offs, mask=offs < N)
    j = metile.join(a, b)  # [BLOCK, 2]
    pair = metile.arange(0, 2)[None, :]
    metile.store(Joined + offs[:, None] * 2 + pair, j, mask=offs[:, None] < N)
    a2, b2 = metile.split(j * 3)
    metile.store(A2 + offs, a2, mask=offs < N)
    metile.store(B2 + offs, b2, mask=offs < N)


@pytest.mark.parametrize("n, block", [(1, 16), (13, 16), (64, 64), (200, 256)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_join_split_round_trip(device, rng, n, block, dtype):
    a = _ragged_2d(rng, 1, n, dtype)[0]
    b = _ragged_2d(rng, 1, n, dtype)[0]
    joined = np.zeros((n, 2), dtype)
    a2, b2 = np.zeros_like(a), np.zeros_like(b)
    join_split[(1,)](a, b, joined, a2, b2, n, BLOCK=block)
    np.testing.assert_array_equal(joined, np.stack([a, b], axis=-1))
    np.testing.assert_array_equal(a2, a * 3)
    np.testing.assert_array_equal(b2, b * 3)


@metile.kernel
def split_interleaved(X, Re, Im, M, BM: metile.constexpr, BN: metile.constexpr):
    # A row-major [M, BN, 2] array of complex numbers, split into its parts.
    i = metile.arange(0, BM)[:, None, None]
    j = metile.arange(0, BN)[None, :, None]
    k = metile.arange(0, 2)[None, None, :]
    z = metile.load(X + (i * BN + j) * 2 + k, mask=i < M)
    re, im = z.split()
    out = metile.arange(0, BM)[:, None] * BN + metile.arange(0, BN)[None, :]
    metile.store(Re + out, re, mask=out < M * BN)
    metile.store(Im + out, im, mask=out < M * BN)
    back = metile.join(re, im)
    metile.store(X + (i * BN + j) * 2 + k, back + 1, mask=i < M)


@pytest.mark.parametrize("m, bm, bn", [(3, 4, 8), (16, 16, 16), (5, 8, 1)])
def test_split_of_an_interleaved_tile(device, rng, m, bm, bn):
    z = rng.standard_normal((m, bn, 2)).astype(np.float32)
    original = z.copy()
    re = np.zeros((m, bn), np.float32)
    im = np.zeros((m, bn), np.float32)
    split_interleaved[(1,)](z, re, im, m, BM=bm, BN=bn)
    np.testing.assert_array_equal(re, original[..., 0])
    np.testing.assert_array_equal(im, original[..., 1])
    np.testing.assert_array_equal(z, original + 1)


@metile.kernel
def join_scalars_and_mixed(X, Out, Out2):
    pair = metile.join(1.5, 2)  # two scalars: a tile of 2
    metile.store(Out + metile.arange(0, 2), pair)
    x = metile.load(X + metile.arange(0, 4))
    mixed = metile.join(x, 0)  # f32 and a literal, broadcast
    metile.store(Out2 + metile.arange(0, 4)[:, None] * 2 + metile.arange(0, 2)[None, :], mixed)
    first, second = metile.split(pair)
    metile.store(Out + 2, first * 10 + second)


def test_join_of_scalars_and_a_literal(device):
    out = np.zeros(3, np.float32)
    out2 = np.zeros((4, 2), np.float32)
    x = np.arange(4, dtype=np.float32) + 0.25
    join_scalars_and_mixed[(1,)](x, out, out2)
    np.testing.assert_array_equal(out, [1.5, 2.0, 17.0])
    np.testing.assert_array_equal(out2, np.stack([x, np.zeros(4, np.float32)], axis=-1))


@metile.kernel
def join_absent(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(X + offs, mask=offs < N)
    j = metile.join(a, -a)
    # Absent lanes of `a` are absent in both halves: the max skips them.
    metile.store(Out + metile.arange(0, 2), metile.max(j, axis=0))


def test_absent_lanes_follow_join(device, rng):
    x = -1 - rng.random(5).astype(np.float32)
    out = np.zeros(2, np.float32)
    join_absent[(1,)](x, out, 5, BLOCK=8)
    np.testing.assert_array_equal(out, [x.max(), (-x).max()])


@metile.kernel
def cat_kernel(A, B, Out, M: metile.constexpr, N: metile.constexpr):
    rows = metile.arange(0, M)[:, None] * N + metile.arange(0, N)[None, :]
    c = metile.cat(metile.load(A + rows), metile.load(B + rows), can_reorder=True)
    both = metile.arange(0, 2 * M)[:, None] * N + metile.arange(0, N)[None, :]
    metile.store(Out + both, c)


@pytest.mark.parametrize("m, n", [(4, 8), (1, 16), (16, 1)])
def test_cat_keeps_order(device, rng, m, n):
    a = rng.standard_normal((m, n)).astype(np.float32)
    b = rng.standard_normal((m, n)).astype(np.float32)
    out = np.zeros((2 * m, n), np.float32)
    cat_kernel[(1,)](a, b, out, M=m, N=n)
    np.testing.assert_array_equal(out, np.concatenate([a, b]))


# -------------------------------------------------------------------- errors


@metile.kernel
def bad_shape_op(X, WHAT: metile.constexpr):
    offs = metile.arange(0, 8)
    x = metile.load(X + offs)
    m = x.reshape(2, 4)
    if WHAT == "permute_count":
        metile.store(X + offs, metile.permute(m, 0, 1, 2).reshape(8))
    elif WHAT == "permute_twice":
        metile.store(X + offs, metile.permute(m, (1, 1)).reshape(8))
    elif WHAT == "permute_range":
        metile.store(X + offs, m.permute(0, 2).reshape(8))
    elif WHAT == "trans_3d":
        metile.store(X + offs, metile.trans(m[None]).reshape(8))
    elif WHAT == "T_1d":
        metile.store(X + offs, x.T)
    elif WHAT == "reshape_size":
        metile.store(X + offs, metile.reshape(x, (3, 3)).reshape(8))
    elif WHAT == "reshape_zero":
        metile.store(X + offs, metile.reshape(x, 0, 8))
    elif WHAT == "split_odd":
        metile.store(X + offs, metile.split(m)[0])
    elif WHAT == "expand_twice":
        metile.store(X + offs, metile.expand_dims(x, (0, 0)))
    elif WHAT == "expand_range":
        metile.store(X + offs, metile.expand_dims(x, 3))
    elif WHAT == "broadcast_to":
        metile.store(X + offs, metile.broadcast_to(m, 4, 4).reshape(8))
    elif WHAT == "cat_shapes":
        metile.store(X + offs, metile.cat(x, m))
    elif WHAT == "join_pointers":
        metile.join(X + offs, X + offs)
    elif WHAT == "runtime_dims":
        metile.store(X + offs, metile.permute(m, metile.program_id(0), 0))


@pytest.mark.parametrize("what, message", [
    ("permute_count", r"permute: dims \[0, 1, 2\] must name each of the 2 axes of the tile once"),
    ("permute_twice", r"permute: dims \[1, 1\] must name each of the 2 axes"),
    ("permute_range", r"permute: dims \[0, 2\] must name each of the 2 axes"),
    ("trans_3d", r"metile.trans\(\) without dims transposes a 2-D tile, but this one has shape \[1, 2, 4\]"),
    ("T_1d", r"Tile.T without dims transposes a 2-D tile, but this one has shape \[8\]"),
    ("reshape_size", r"reshape: a tile of shape \[8\] \(8 elements\) cannot take shape \[3, 3\] \(9 elements\)"),
    ("reshape_zero", r"reshape: shape \[0, 8\] has a size 0; every size must be a positive integer"),
    ("split_odd", r"split needs a tile whose last axis has size 2 \(as join makes\), got shape \[2, 4\]"),
    ("expand_twice", r"expand_dims: axes \[0, 0\] name axis 0 twice"),
    ("expand_range", r"expand_dims: axis 3 is out of range for a result of rank 2"),
    ("broadcast_to", r"cannot broadcast a tile of shape \[2, 4\] to shape \[4, 4\]"),
    ("cat_shapes", r"cat needs two tiles of one shape, got shapes \[8\] and \[2, 4\]"),
    ("join_pointers", r"join does not accept a pointer operand"),
    ("runtime_dims", r"permute's dims must be known when the kernel is compiled"),
])
def test_shape_op_errors_name_the_line(what, message):
    with pytest.raises(metile.CompilationError, match=message) as e:
        bad_shape_op[(1,)](np.zeros(8, np.float32), WHAT=what)
    marker = {"T_1d": "x.T", "reshape_size": "(3, 3)", "reshape_zero": "reshape(x, 0, 8)",
              "runtime_dims": "program_id(0), 0", "join_pointers": "metile.join(X"}.get(what, f'"{what}"')
    line = line_of(bad_shape_op, marker)
    if marker.startswith('"'):
        line += 1  # the statement after the `elif` naming the case
    assert f"line {line}" in str(e.value)


@metile.kernel
def view_kernel(X, Out):
    x = metile.load(X + metile.arange(0, 8))
    metile.store(Out + metile.arange(0, 8), metile.view(x, 2, 4).reshape(8))


def test_view_is_a_deprecated_reshape():
    x = np.arange(8, dtype=np.float32)
    out = np.zeros(8, np.float32)
    with pytest.warns(DeprecationWarning, match="metile.view is deprecated"):
        view_kernel[(1,)](x, out)
    np.testing.assert_array_equal(out, x)
