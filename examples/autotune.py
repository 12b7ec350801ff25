"""Autotuning a row softmax over block sizes and simdgroup counts.

    METILE_DEVICE=msl-emu python examples/autotune.py

The first launch for a row width times every config and prints the winner; a second
run of this script finds the winner on disk (METILE_AUTOTUNE=0 to search again)."""

import numpy as np

import metile
from metile.testing import do_bench
from metile.testing.reference_kernels import softmax

# The decorator form, `@metile.autotune(...)` stacked above `@metile.kernel`, applied
# here to the reference softmax (the seed's kernel) rather than a copy of it.
tuned_softmax = metile.autotune(
    configs=[metile.Config(BLOCK=b, num_sgs=s) for b in (256, 512, 1024) for s in (2, 4)],
    key=["N"],
    warmup=2,
    rep=10,
)(softmax)


def main():
    rows, cols = 128, 1000
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    out = np.empty_like(x)
    tuned_softmax[(rows,)](x, out, cols)  # tunes, then launches the winner
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)

    launch = tuned_softmax[(rows,)].prepare(x, out, cols)  # the winner, as a launcher of its own
    ms = do_bench(lambda: launch(x, out, cols), warmup=2, rep=10)
    print(f"best: {tuned_softmax.best_config}; {ms:.3f} ms a launch")


if __name__ == "__main__":
    main()
