"""meTile demo: vector add, softmax and GEMM on the default device, checked against numpy.

Run with METILE_DEVICE=cpu|msl-emu|metal|cuda to pick a backend, and
METILE_DEBUG=tile_ir (or gpu_ir, msl, all) to see what the compiler makes.
"""

import time

import numpy as np

import metile
from metile.runtime.metal_device import MetalDevice


@metile.kernel
def add(X, Y, Out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(Out + offs, x + y, mask=mask)


@metile.kernel
def softmax(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    m = -1e38
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        x = metile.load(X + row * N + cols, mask=cols < N, other=-1e38)
        m = metile.maximum(m, x)
    m = metile.max(m)
    s = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        s = s + metile.where(mask, metile.exp(x - m), 0.0)
    s = metile.sum(s)
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        metile.store(Out + row * N + cols, metile.exp(x - m) / s, mask=mask)


@metile.kernel
def gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


def timed(label, fn):
    t0 = time.perf_counter()
    fn()
    MetalDevice.get().sync()
    print(f"  {label:<28} {1e3 * (time.perf_counter() - t0):8.2f} ms")


def main():
    rng = np.random.default_rng(0)
    print(f"meTile demo on device: {metile.get_device()}")

    n = 1_000_003
    x = metile.Buffer(data=rng.standard_normal(n).astype(np.float32))
    y = metile.Buffer(data=rng.standard_normal(n).astype(np.float32))
    out = metile.Buffer.zeros((n,))
    timed("add (first call: compile)", lambda: add[(metile.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024))
    timed("add (cached)", lambda: add[(metile.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024))
    np.testing.assert_allclose(out.numpy(), x.numpy() + y.numpy(), rtol=1e-6)

    rows, cols = 512, 1000
    xs = rng.standard_normal((rows, cols)).astype(np.float32)
    ys = np.empty_like(xs)
    timed("softmax 512x1000", lambda: softmax[(rows,)](xs, ys, cols, BLOCK=256))
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(ys, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)

    m, n2, k = 256, 256, 128
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n2)).astype(np.float32)
    c = np.zeros((m, n2), np.float32)
    timed("gemm 256x256x128", lambda: gemm[(m // 64, n2 // 64)](a, b, c, m, n2, k, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)

    print("all results match numpy")


if __name__ == "__main__":
    main()
