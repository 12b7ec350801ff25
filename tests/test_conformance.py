"""The conformance suite: kernels beyond the seed samples, on every backend,
checked against numpy (bit-exact for integers and data movement, tolerances for
float math)."""

import math

import numpy as np
import pytest

import metile
from metile.testing.reference_kernels import gemm, gemm_epilogue, layernorm, rmsnorm


@metile.kernel
def scale_shift(X, Out, N, BLOCK: metile.constexpr, SCALE: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(Out + offs, x * SCALE + 1, mask=mask)


@metile.kernel
def add2d(X, Y, Out, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.program_id(1) * BN + metile.arange(0, BN)
    offs = rows[:, None] * N + cols[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(Out + offs, x + y, mask=mask)


@metile.kernel
def grid3d(Out, BLOCK: metile.constexpr):
    x = metile.program_id(0)
    y = metile.program_id(1)
    z = metile.program_id(2)
    nx = metile.num_programs(0)
    ny = metile.num_programs(1)
    lin = (z * ny + y) * nx + x
    offs = lin * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, lin * 100 + metile.arange(0, BLOCK))


@metile.kernel
def int_ops(A, B, Q, R, S, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    a = metile.load(A + offs, mask=mask)
    b = metile.load(B + offs, mask=mask, other=1)
    metile.store(Q + offs, a // b, mask=mask)
    metile.store(R + offs, a % b, mask=mask)
    metile.store(S + offs, ((a << 2) ^ (b & 7)) | 1, mask=mask)


@metile.kernel
def row_sums(X, Out, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.arange(0, BN)
    x = metile.load(X + rows[:, None] * N + cols[None, :], mask=(rows[:, None] < M) & (cols[None, :] < N))
    metile.store(Out + rows, metile.sum(x, axis=1), mask=rows < M)


@metile.kernel
def col_extrema(X, Mx, Mn, N, BM: metile.constexpr, BN: metile.constexpr):
    rows = metile.arange(0, BM)
    cols = metile.arange(0, BN)
    x = metile.load(X + rows[:, None] * N + cols[None, :])
    metile.store(Mx + cols, metile.max(x, axis=0))
    metile.store(Mn + cols, metile.min(x, axis=0))


@metile.kernel
def math_ops(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask, other=1.0)
    ax = metile.abs(x)
    y = metile.exp(x * 0.5) + metile.log(ax + 1.0) + metile.sqrt(ax) + metile.tanh(x)
    y = metile.where(x > 0, y, -y)
    y = metile.minimum(metile.maximum(y, -3.0), 3.0)
    metile.store(Out + offs, y, mask=mask)


@metile.kernel
def relu_f16(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(Out + offs, metile.maximum(x * 2, 0.0), mask=mask)


def test_layernorm(device, rng):
    rows, n = 6, 300
    x = rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    layernorm[(rows,)](x, w, b, out, n, 1e-5, BLOCK=128)
    mean = x.mean(1, keepdims=True)
    ref = (x - mean) / np.sqrt(x.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_rmsnorm(device, rng):
    rows, n = 5, 200
    x = rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    rmsnorm[(rows,)](x, w, out, n, 1e-6, BLOCK=64)
    ref = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", ["none", "relu", "gelu", "silu", "scale"])
def test_fused_gemm_epilogues(device, rng, act):
    M, N, K = 64, 64, 48
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm_epilogue[(M // 32, N // 32)](a, b, c, M, N, K, 0.5, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, ACT=act)
    r = a @ b
    ref = {
        "none": r,
        "relu": np.maximum(r, 0),
        "gelu": 0.5 * r * (1 + np.tanh(math.sqrt(2 / math.pi) * (r + 0.044715 * r**3))),
        "silu": r / (1 + np.exp(-r)),
        "scale": 0.5 * r,
    }[act]
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4)


def test_gemm_f16_inputs_accumulate_in_f32(device, rng):
    M, N, K = 64, 32, 256
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    gemm[(M // 32, N // 32)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000])
def test_ragged_sizes(device, rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    scale_shift[(metile.cdiv(n, 256),)](x, out, n, BLOCK=256, SCALE=3.0)
    np.testing.assert_allclose(out, x * 3.0 + 1, rtol=1e-6)


def test_2d_grid_broadcast_indexing(device, rng):
    M, N = 37, 50
    x = rng.standard_normal((M, N)).astype(np.float32)
    y = rng.standard_normal((M, N)).astype(np.float32)
    out = np.zeros_like(x)
    add2d[(metile.cdiv(M, 16), metile.cdiv(N, 16))](x, y, out, M, N, BM=16, BN=16)
    np.testing.assert_array_equal(out, x + y)


def test_3d_grid(device):
    nx, ny, nz, block = 3, 4, 2, 8
    out = np.zeros(nx * ny * nz * block, np.int32)
    grid3d[(nx, ny, nz)](out, BLOCK=block)
    lin = np.repeat(np.arange(nx * ny * nz), block)
    np.testing.assert_array_equal(out, lin * 100 + np.tile(np.arange(block), nx * ny * nz))


def test_integer_kernel_truncates_like_c(device, rng):
    n = 300
    a = rng.integers(-1000, 1000, n).astype(np.int32)
    b = rng.integers(-20, 20, n).astype(np.int32)
    b[b == 0] = 3
    q, r, s = (np.zeros(n, np.int32) for _ in range(3))
    int_ops[(metile.cdiv(n, 128),)](a, b, q, r, s, n, BLOCK=128)
    np.testing.assert_array_equal(q, np.trunc(a / b).astype(np.int32))
    np.testing.assert_array_equal(r, np.fmod(a, b))
    np.testing.assert_array_equal(s, ((a << 2) ^ (b & 7)) | 1)


def test_axis_reductions(device, rng):
    M, N = 20, 16
    x = rng.standard_normal((M, N)).astype(np.float32)
    out = np.zeros(M, np.float32)
    row_sums[(metile.cdiv(M, 8),)](x, out, M, N, BM=8, BN=16)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-6)
    mx, mn = np.zeros(N, np.float32), np.zeros(N, np.float32)
    col_extrema[(1,)](x[:16].copy(), mx, mn, N, BM=16, BN=16)
    np.testing.assert_array_equal(mx, x[:16].max(0))
    np.testing.assert_array_equal(mn, x[:16].min(0))


def test_math_functions(device, rng):
    n = 500
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    out = np.zeros_like(x)
    math_ops[(metile.cdiv(n, 128),)](x, out, n, BLOCK=128)
    ax = np.abs(x)
    y = np.exp(x * 0.5) + np.log(ax + 1) + np.sqrt(ax) + np.tanh(x)
    ref = np.clip(np.where(x > 0, y, -y), -3, 3)
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=2e-5)


def test_f16_elementwise(device, rng):
    n = 300
    x = rng.standard_normal(n).astype(np.float16)
    out = np.zeros_like(x)
    relu_f16[(metile.cdiv(n, 128),)](x, out, n, BLOCK=128)
    np.testing.assert_array_equal(out, np.maximum(x * np.float16(2), np.float16(0)))


@metile.kernel
def arange_from(Out, start, SIZE: metile.constexpr):
    metile.store(Out + metile.arange(0, SIZE), metile.arange(start, SIZE))
    metile.store(Out + SIZE + metile.arange(0, SIZE), metile.arange(3, SIZE))


def test_arange_is_start_and_size(device):
    out = np.zeros(16, np.int32)
    arange_from[(1,)](out, 100, SIZE=8)
    np.testing.assert_array_equal(out, np.r_[np.arange(100, 108), np.arange(3, 11)])


@metile.kernel
def narrow_float_math(X, Out, N, DT: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask).to(DT)
    metile.store(Out + offs, (x * 3 + 1).to("f32"), mask=mask)


def _round_bf16(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_f16_and_bf16_round_after_each_op(device, rng, dt):
    n = 200
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    narrow_float_math[(metile.cdiv(n, 64),)](x, out, n, DT=dt, BLOCK=64)
    if dt == "f16":
        ref = ((x.astype(np.float16) * np.float16(3)) + np.float16(1)).astype(np.float32)
    else:
        ref = _round_bf16(_round_bf16(_round_bf16(x) * 3) + 1)
    np.testing.assert_array_equal(out, ref)


@metile.kernel
def u32_hash(A, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    a = metile.load(A + offs, mask=mask)
    metile.store(Out + offs, (a * 2654435761) ^ (a >> 3), mask=mask)


def test_u32_arithmetic_wraps(device, rng):
    n = 100
    a = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    out = np.zeros_like(a)
    u32_hash[(metile.cdiv(n, 64),)](a, out, n, BLOCK=64)
    np.testing.assert_array_equal(out, (a * np.uint32(2654435761)) ^ (a >> np.uint32(3)))


@metile.kernel
def bool_logic(A, B, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    a = metile.load(A + offs, mask=mask)
    b = metile.load(B + offs, mask=mask)
    metile.store(Out + offs, (a & ~b) | (b ^ (offs % 3 == 0)), mask=mask)


def test_bool_tiles(device, rng):
    n = 90
    a = rng.random(n) < 0.5
    b = rng.random(n) < 0.5
    out = np.zeros(n, bool)
    bool_logic[(metile.cdiv(n, 32),)](a, b, out, n, BLOCK=32)
    np.testing.assert_array_equal(out, (a & ~b) | (b ^ (np.arange(n) % 3 == 0)))
