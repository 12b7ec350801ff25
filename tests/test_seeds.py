"""Every code sample of the product specification (shared/seeds), as written."""

import numpy as np
import pytest

import metile
from metile.runtime.metal_device import MetalDevice


# --- readme: GEMM -----------------------------------------------------------
@metile.kernel
def gemm(A, B, C, M, N, K,
         BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
         BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


# --- readme: Softmax --------------------------------------------------------
@metile.kernel
def softmax(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    m = -1e38
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        m = metile.maximum(m, x)
    m = metile.max(m)

    s = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        s = s + metile.exp(x - m)
    s = metile.sum(s)

    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        metile.store(Out + row * N + cols, metile.exp(x - m) / s, mask=mask)


# --- first-kernel: add ------------------------------------------------------
@metile.kernel
def add(X, Y, Out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(Out + offs, x + y, mask=mask)


# --- memory-model: a kernel using the "Inside Kernels" lines -----------------
@metile.kernel
def double(X, Out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    metile.store(Out + offs, x * 2.0, mask=offs < N)


@metile.kernel
def tile_copy(A, C, stride, ROWS: metile.constexpr, COLS: metile.constexpr):
    row = metile.program_id(0) * ROWS
    col = metile.program_id(1) * COLS
    result = metile.tile_load(A, row, col, stride, (ROWS, COLS))
    metile.tile_store(C, row, col, stride, result, (ROWS, COLS))


# --- language-reference: the 128x128 dot loop and tile_swizzle ---------------
@metile.kernel
def gemm128(A, B, C, M, N, K, BLOCK_K: metile.constexpr):
    pid_m, pid_n = metile.tile_swizzle(
        metile.program_id(0), metile.program_id(1),
        pattern="morton", block_size=2,
    )
    acc = metile.zeros((128, 128), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * 128, k, K, (128, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * 128, N, (BLOCK_K, 128))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * 128, pid_n * 128, N, acc, (128, 128))


@metile.kernel
def row_max(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    # Two-pass softmax: find max, then compute normalized exponentials
    m = -1e38
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        x = metile.load(X + row * N + cols, mask=cols < N)
        m = metile.maximum(m, x)
    m = metile.max(m)   # reduce across the tile
    metile.store(Out + row, m)


def test_first_kernel_launching(device):
    N = 1024
    x = metile.Buffer(data=np.random.randn(N).astype(np.float32))
    y = metile.Buffer(data=np.random.randn(N).astype(np.float32))
    out = metile.Buffer.zeros((N,))

    grid = (metile.cdiv(N, 256),)   # ceil(1024 / 256) = 4 program instances
    add[grid](x, y, out, N, BLOCK=256)

    print(out.numpy()[:5])
    assert grid == (4,)
    np.testing.assert_allclose(out.numpy(), x.numpy() + y.numpy(), rtol=1e-6)


def test_readme_gemm(device, rng):
    M, N, K = 128, 96, 64
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm[(M // 32, N // 32)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def _softmax_rows(x):
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# The seed's softmax must be right for every N: multiples of BLOCK, ragged N,
# N < BLOCK, rows of only negative values, and rows holding -1e30.
@pytest.mark.parametrize(
    "rows, N, BLOCK, values",
    [
        (8, 256, 64, "normal"),
        (5, 300, 128, "normal"),
        (3, 1000, 256, "normal"),
        (4, 50, 128, "normal"),
        (4, 300, 128, "negative"),
        (3, 77, 64, "negative"),
        (4, 300, 128, "huge_negative"),
        (2, 1, 64, "negative"),
    ],
)
def test_readme_softmax(device, rng, rows, N, BLOCK, values):
    x = rng.standard_normal((rows, N)).astype(np.float32)
    if values == "negative":
        x = -np.abs(x) - 3.0
    elif values == "huge_negative":
        x[:, ::3] = -1e30
    out = np.full_like(x, np.nan)
    softmax[(rows,)](x, out, N, BLOCK=BLOCK)
    np.testing.assert_allclose(out, _softmax_rows(x), rtol=1e-5, atol=1e-7)


def test_memory_model_buffers(device):
    # Create from numpy (zero-copy, the GPU reads the same memory)
    x = metile.Buffer(data=np.random.randn(1024).astype(np.float32))

    # Allocate zeroed
    out = metile.Buffer.zeros((1024,))

    # Allocate from existing numpy array
    arr = np.zeros(1024, dtype=np.float32)
    buf = metile.Buffer.from_numpy(arr)

    # Read results back to numpy (also zero-copy)
    result = out.numpy()

    kernel = double
    N = 1024
    grid = (metile.cdiv(N, 256),)
    kernel[grid](x, out, N, BLOCK=256)
    MetalDevice.get().sync()   # wait for GPU to finish
    print(out.numpy())         # read results
    np.testing.assert_allclose(result, 2 * x.numpy())
    buf.numpy()[:3] = 7
    assert arr[:3].tolist() == [7, 7, 7]


def test_memory_model_masking(device):
    N, BLOCK = 10, 4
    x = np.arange(N, dtype=np.float32)
    out = np.full(12, -1, np.float32)
    double[(metile.cdiv(N, BLOCK),)](x, out, N, BLOCK=BLOCK)
    np.testing.assert_array_equal(out[:10], 2 * x)
    np.testing.assert_array_equal(out[10:], [-1, -1])


def test_memory_model_tile_access(device, rng):
    a = rng.standard_normal((16, 24)).astype(np.float32)
    c = np.zeros_like(a)
    tile_copy[(2, 3)](a, c, 24, ROWS=8, COLS=8)
    np.testing.assert_array_equal(c, a)


def test_language_reference_dot_and_swizzle(device, rng):
    M, N, K = 256, 384, 32
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    gemm128[(M // 128, N // 128)](a, b, c, M, N, K, BLOCK_K=16)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_language_reference_reductions(device, rng):
    x = rng.standard_normal((4, 300)).astype(np.float32)
    out = np.zeros(4, np.float32)
    row_max[(4,)](x, out, 300, BLOCK=128)
    # masked-off lanes read 0, so the max is at least 0, exactly as the seed writes it
    np.testing.assert_array_equal(out, np.maximum(x.max(1), 0.0))


def test_language_reference_helpers():
    assert metile.cdiv(1024, 256) == 4
    assert metile.cdiv(1025, 256) == 5
    assert metile.next_power_of_2(1000) == 1024
    assert metile.next_power_of_2(1024) == 1024
    assert metile.next_power_of_2(1) == 1
