"""What the absent-lane selects cost: the seed's softmax (masked loads without
`other=`, so the carried max and sum get one `select` per iteration) beside the
same softmax written Triton's way (`other=` fills, no select), in one process on
the current device (`METILE_DEVICE`). Both are checked against numpy first.

    python benchmarks/absent_lanes.py
"""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from timing import table  # noqa: E402

import metile  # noqa: E402
from metile.testing import do_bench  # noqa: E402
from metile.testing import reference_kernels as rk  # noqa: E402


@metile.kernel
def softmax_with_fills(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    m = metile.full((BLOCK,), -1e38, dtype="f32")
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        m = metile.maximum(m, metile.load(X + row * N + cols, mask=cols < N, other=-1e38))
    mx = metile.max(m)
    s = metile.zeros((BLOCK,), dtype="f32")
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        s = s + metile.exp(metile.load(X + row * N + cols, mask=cols < N, other=float("-inf")) - mx)
    total = metile.sum(s)
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        metile.store(Out + row * N + cols, metile.exp(x - mx) / total, mask=mask)


def _time(launch, x, out, n):
    return do_bench(lambda: launch(x, out, n, BLOCK=1024), warmup=10, rep=50)


def main():
    device = metile.get_device()
    gpu = device in ("cuda", "metal")
    shapes = [(4096, 4096), (2048, 16384), (4096, 4000)] if gpu else [(512, 4096), (512, 4000)]
    rng = np.random.default_rng(0)
    rows = []
    for m, n in shapes:
        x_host = rng.standard_normal((m, n)).astype(np.float32)
        e = np.exp(x_host - x_host.max(1, keepdims=True))
        ref = e / e.sum(1, keepdims=True)
        x = metile.Buffer(data=x_host)
        out = metile.Buffer.zeros((m * n,))
        times = []
        for kernel in (rk.softmax, softmax_with_fills):
            kernel[(m,)](x, out, n, BLOCK=1024)
            metile.synchronize()
            np.testing.assert_allclose(out.numpy().reshape(m, n), ref, rtol=1e-5, atol=1e-7)
            times.append(_time(kernel[(m,)], x, out, n))
        gbs = [2 * m * n * 4 / (t * 1e-3) / 1e9 for t in times]
        rows.append((f"softmax {m}x{n} f32", f"{gbs[0]:.0f}", f"{gbs[1]:.0f}", f"{times[1] / times[0]:.2f}"))
    print(f"device: {device} ({metile._metile.device_model()})\n")
    print(table(("kernel", "seed form GB/s", "other= form GB/s", "seed / other="), rows))


if __name__ == "__main__":
    main()
