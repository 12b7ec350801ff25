"""CPU-backend throughput against numpy, measured in the same process."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from kernels import add, softmax  # noqa: E402
from timing import per_call, table  # noqa: E402

import metile  # noqa: E402


def bench_add(n=1 << 24, block=1024):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    ref = np.empty_like(x)
    grid = (metile.cdiv(n, block),)
    add[grid](x, y, out, n, BLOCK=block)
    np.testing.assert_array_equal(out, x + y)
    t_mt = per_call(lambda: add[grid](x, y, out, n, BLOCK=block))
    t_np = per_call(lambda: np.add(x, y, out=ref))
    return ("add 2^24 f32", t_mt, t_np)


def bench_softmax(rows=4096, cols=4096, block=1024):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.empty_like(x)

    def numpy_softmax():
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    softmax[(rows,)](x, out, cols, BLOCK=block)
    np.testing.assert_allclose(out, numpy_softmax(), rtol=1e-5, atol=1e-8)
    t_mt = per_call(lambda: softmax[(rows,)](x, out, cols, BLOCK=block), rep=5)
    t_np = per_call(numpy_softmax, rep=5)
    return ("softmax 4096x4096 f32", t_mt, t_np)


def main():
    print(f"device: {metile.get_device()}, cores: {os.cpu_count()}\n")
    rows = []
    for name, t_mt, t_np in (bench_add(), bench_softmax()):
        rows.append((name, f"{t_mt * 1e3:.2f}", f"{t_np * 1e3:.2f}", f"{t_np / t_mt:.2f}x"))
    print(table(["kernel", "meTile ms", "numpy ms", "speed vs numpy"], rows))


if __name__ == "__main__":
    main()
