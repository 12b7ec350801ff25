"""`dot(a, b.T)` and `dot(a.T, b)` written exactly so, on every backend against
numpy: one block and a K loop (which the prefetch pass pipelines), ragged
sizes, f16 and f32, an attention block `softmax(q @ k.T) @ v`, and the code the
GPU targets get (matrix atoms on Apple, `mma.sync` on sm_80, `wgmma` on sm_90:
a transposed operand is staged into threadgroup memory transposed, straight
from its registers)."""

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


def _operand(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "f16":
        x = x.astype(np.float16)
    return x, x.astype(np.float64)


@metile.kernel
def dot_b_transposed(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    """C = A @ B.T with A [M, K] and B [N, K], one program per C block, a K loop."""
    rm = metile.program_id(0) * BM + metile.arange(0, BM)
    rn = metile.program_id(1) * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN), dtype="f32")
    for k in metile.tile_range(0, K, BK):
        rk = k + metile.arange(0, BK)
        a = metile.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = metile.load(B + rn[:, None] * K + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K), other=0.0)
        acc = metile.dot(a, b.T, acc)
    metile.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@metile.kernel
def dot_a_transposed(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    """C = A.T @ B with A [K, M] and B [K, N], tile_load operands."""
    pm = metile.program_id(0) * BM
    pn = metile.program_id(1) * BN
    acc = metile.zeros((BM, BN), dtype="f32")
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, k, pm, M, (BK, BM), bounds=(K, M))
        b = metile.tile_load(B, k, pn, N, (BK, BN), bounds=(K, N))
        acc = metile.dot(a.T, b, acc)
    metile.tile_store(C, pm, pn, N, acc, (BM, BN), bounds=(M, N))


@metile.kernel
def dot_one_block(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    """C = A @ B.T in one block, without a loop; masked loads without other=
    (absent lanes count as 0 in dot)."""
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    rk = metile.arange(0, BK)
    a = metile.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K))
    b = metile.load(B + rn[:, None] * K + rk[None, :], mask=(rn[:, None] < N) & (rk[None, :] < K))
    c = metile.dot(a, metile.trans(b))
    metile.store(C + rm[:, None] * N + rn[None, :], c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def _tol(dtype, k):
    tol = 1e-4 if dtype == "f32" else 2e-3
    return {"rtol": tol, "atol": tol * np.sqrt(k)}


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("M, N, K, blocks", [(64, 64, 64, (32, 32, 16)), (67, 45, 83, (32, 32, 16)),
                                             (5, 30, 17, (16, 32, 16)), (1, 1, 1, (8, 8, 8)),
                                             (70, 50, 64, (64, 32, 32))])
def test_dot_with_b_transposed(device, rng, dtype, M, N, K, blocks):
    a, a64 = _operand(rng, (M, K), dtype)
    b, b64 = _operand(rng, (N, K), dtype)
    c = np.full((M, N), np.nan, np.float32)
    bm, bn, bk = blocks
    dot_b_transposed[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk)
    np.testing.assert_allclose(c, a64 @ b64.T, **_tol(dtype, K))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("M, N, K, blocks", [(64, 64, 64, (32, 32, 16)), (45, 67, 29, (32, 32, 16)),
                                             (16, 8, 40, (16, 8, 8))])
def test_dot_with_a_transposed(device, rng, dtype, M, N, K, blocks):
    a, a64 = _operand(rng, (K, M), dtype)
    b, b64 = _operand(rng, (K, N), dtype)
    c = np.full((M, N), np.nan, np.float32)
    bm, bn, bk = blocks
    dot_a_transposed[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk)
    np.testing.assert_allclose(c, a64.T @ b64, **_tol(dtype, K))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("M, N, K, blocks", [(16, 16, 16, (16, 16, 16)), (13, 7, 30, (16, 8, 32)),
                                             (64, 64, 32, (64, 64, 32))])
def test_dot_of_a_transposed_tile_in_one_block(device, rng, dtype, M, N, K, blocks):
    a, a64 = _operand(rng, (M, K), dtype)
    b, b64 = _operand(rng, (N, K), dtype)
    c = np.full((M, N), np.nan, np.float32)
    dot_one_block[(1,)](a, b, c, M, N, K, BM=blocks[0], BN=blocks[1], BK=blocks[2])
    np.testing.assert_allclose(c, a64 @ b64.T, **_tol(dtype, K))


@pytest.mark.parametrize("splits", [2, 3])
def test_split_k_of_a_transposed_operand(device, rng, splits):
    M, N, K = 67, 45, 83
    a, a64 = _operand(rng, (M, K), "f16")
    b, b64 = _operand(rng, (N, K), "f16")
    c = np.full((M, N), np.nan, np.float32)
    dot_b_transposed[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, c, M, N, K, BM=32, BN=32, BK=16,
                                                               split_k=splits)
    np.testing.assert_allclose(c, a64 @ b64.T, **_tol("f16", K))


@metile.kernel
def attention_block(Q, K, V, Out, S, D: metile.constexpr, BM: metile.constexpr, BN: metile.constexpr):
    """One block of attention: softmax(q @ k.T * scale) @ v, ragged key count S."""
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    rd = metile.arange(0, D)
    q = metile.load(Q + rm[:, None] * D + rd[None, :])
    k = metile.load(K + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
    v = metile.load(V + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
    s = metile.dot(q, k.T) * 0.125
    s = metile.where(rn[None, :] < S, s, float("-inf"))
    p = metile.softmax(s, dim=1)
    o = metile.dot(p.to(q.dtype), v)
    metile.store(Out + rm[:, None] * D + rd[None, :], o)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("s", [32, 21])
def test_attention_block_q_at_k_transposed(device, rng, dtype, s):
    bm, bn, d = 16, 32, 64
    q, q64 = _operand(rng, (bm, d), dtype)
    k, k64 = _operand(rng, (s, d), dtype)
    v, v64 = _operand(rng, (s, d), dtype)
    o = np.zeros((bm, d), np.float32)
    attention_block[(1,)](q, k, v, o, s, D=d, BM=bm, BN=bn)
    logits = q64 @ k64.T * 0.125
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    if dtype == "f16":
        p = p.astype(np.float16).astype(np.float64)
    tol = 1e-4 if dtype == "f32" else 1e-2
    np.testing.assert_allclose(o, p @ v64, rtol=tol, atol=tol)


@metile.kernel
def dot_result_shapes(A, B, CT, Rows, Even, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    """A dot's result (in the matrix atom's layout) transposed, reduced after
    the transpose and split into its even and odd columns."""
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    rk = metile.arange(0, BK)
    a = metile.load(A + rm[:, None] * BK + rk[None, :])
    b = metile.load(B + rk[:, None] * BN + rn[None, :])
    c = metile.dot(a, b)
    metile.store(CT + rn[:, None] * BM + rm[None, :], c.T)
    metile.store(Rows + rm, metile.sum(c.T, axis=0))
    even, odd = metile.split(c.reshape(BM, BN // 2, 2))
    half = metile.arange(0, BN // 2)
    metile.store(Even + rm[:, None] * (BN // 2) + half[None, :], even - odd)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("blocks", [(16, 16, 8), (32, 64, 16), (8, 8, 8)])
def test_shape_ops_on_a_dot_result(device, rng, dtype, blocks):
    bm, bn, bk = blocks
    a, a64 = _operand(rng, (bm, bk), dtype)
    b, b64 = _operand(rng, (bk, bn), dtype)
    ct = np.zeros((bn, bm), np.float32)
    rows = np.zeros(bm, np.float32)
    even = np.zeros((bm, bn // 2), np.float32)
    dot_result_shapes[(1,)](a, b, ct, rows, even, BM=bm, BN=bn, BK=bk)
    c = a64 @ b64
    np.testing.assert_allclose(ct, c.T, **_tol(dtype, bk))
    np.testing.assert_allclose(rows, c.sum(axis=1), rtol=1e-4, atol=1e-3 * bn)
    np.testing.assert_allclose(even, c[:, 0::2] - c[:, 1::2], **_tol(dtype, bk))


DOT_PARAMS = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32"), ("M", "scalar", "i32"),
              ("N", "scalar", "i32"), ("K", "scalar", "i32")]


def _traced(kernel, blocks):
    return _frontend.specialize(kernel.fn, DOT_PARAMS, dict(zip(("BM", "BN", "BK"), blocks)), {})


@pytest.mark.parametrize("kernel", [dot_b_transposed, dot_a_transposed])
def test_transposed_operands_take_the_matrix_atoms(kernel):
    traced = _traced(kernel, (64, 64, 32))
    assert "simdgroup_multiply_accumulate(" in _metile.compile_msl(traced)["msl"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in _metile.compile_cuda(traced, arch="sm_80")["cuda"]
    sm90 = _metile.compile_cuda(_traced(kernel, (128, 128, 64)), arch="sm_90", num_sgs=8)["cuda"]
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in sm90
