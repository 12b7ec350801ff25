"""Autotuning a row softmax over block sizes and simdgroup counts.

    METILE_DEVICE=msl-emu python examples/autotune.py

The first launch for a row width times every config and prints the winner; a second
run of this script finds the winner on disk (METILE_AUTOTUNE=0 to search again)."""

import numpy as np

import metile
from metile.testing import do_bench


@metile.autotune(
    configs=[metile.Config(BLOCK=b, num_sgs=s) for b in (256, 512, 1024) for s in (2, 4)],
    key=["N"],
    warmup=2,
    rep=10,
)
@metile.kernel
def softmax(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    m = -1e38
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        m = metile.maximum(m, metile.load(X + row * N + cols, mask=cols < N))
    m = metile.max(m)
    s = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        s += metile.exp(metile.load(X + row * N + cols, mask=cols < N) - m)
    s = metile.sum(s)
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        metile.store(Out + row * N + cols, metile.exp(metile.load(X + row * N + cols, mask=mask) - m) / s, mask=mask)


def main():
    rows, cols = 128, 1000
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    out = np.empty_like(x)
    softmax[(rows,)](x, out, cols)  # tunes, then launches the winner
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)

    launch = softmax[(rows,)].prepare(x, out, cols)  # the winner, as a launcher of its own
    print(f"best: {softmax.best_config}; {do_bench(lambda: launch(x, out, cols), warmup=2, rep=10):.3f} ms a launch")


if __name__ == "__main__":
    main()
