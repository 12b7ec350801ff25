"""What msl-emu's memory checks cost: a few reference kernels run on msl-emu with
every device, constant and threadgroup access checked (the default) and built
without checks (`METILE_EMU_CHECKS=0`). Each mode runs in its own process with an
empty kernel cache, so the first launch includes the compile (two clang steps
with checks, one without). Results are checked against numpy in both modes.

    python benchmarks/emu_checks.py
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

from timing import table  # noqa: E402

CASES = ["add 2^20", "softmax 256x4096", "layernorm 256x4096", "gemm 256x256x256", "gemm 512x512x512"]


def _measure():
    """Runs in a child process: one JSON line of {case: [first launch s, steady ms]}."""
    import numpy as np

    import metile
    from metile.testing import do_bench
    from metile.testing import reference_kernels as rk

    rng = np.random.default_rng(0)
    results = {}

    def record(name, launch, check):
        # The first launch of a specialisation compiles it (gemm 512 reuses gemm 256's).
        start = time.perf_counter()
        launch()
        metile.synchronize()
        first = time.perf_counter() - start
        check()
        results[name] = [first, do_bench(launch, warmup=1, rep=5)]

    n = 1 << 20
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.empty_like(x)
    record("add 2^20", lambda: rk.add[(metile.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024),
           lambda: np.testing.assert_array_equal(out, x + y))

    rows, cols = 256, 4096
    m = rng.standard_normal((rows, cols)).astype(np.float32)
    o = np.empty_like(m)
    e = np.exp(m - m.max(1, keepdims=True))
    record("softmax 256x4096", lambda: rk.softmax[(rows,)](m, o, cols, BLOCK=1024),
           lambda: np.testing.assert_allclose(o, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7))

    w, b = rng.standard_normal(cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)
    mean, var = m.mean(1, keepdims=True), m.var(1, keepdims=True)
    record("layernorm 256x4096", lambda: rk.layernorm[(rows,)](m, w, b, o, cols, 1e-5, BLOCK=1024),
           lambda: np.testing.assert_allclose(o, (m - mean) / np.sqrt(var + 1e-5) * w + b, rtol=1e-4, atol=1e-4))

    for size in (256, 512):
        a = rng.standard_normal((size, size)).astype(np.float32)
        bm = rng.standard_normal((size, size)).astype(np.float32)
        c = np.empty((size, size), np.float32)
        grid = (size // 64, size // 64)
        record(f"gemm {size}x{size}x{size}",
               lambda a=a, bm=bm, c=c, size=size, grid=grid: rk.gemm[grid](
                   a, bm, c, size, size, size, BLOCK_M=64, BLOCK_N=64, BLOCK_K=32),
               lambda a=a, bm=bm, c=c: np.testing.assert_allclose(c, a @ bm, rtol=1e-4, atol=1e-3))
    print(json.dumps(results))


def _run(checks):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, METILE_DEVICE="msl-emu", METILE_EMU_CHECKS=checks, METILE_CACHE_DIR=cache)
        proc = subprocess.run([sys.executable, __file__, "--measure"], env=env, capture_output=True, text=True,
                              check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    unchecked, checked = _run("0"), _run("1")
    rows = []
    for name in CASES:
        (first_u, ms_u), (first_c, ms_c) = unchecked[name], checked[name]
        compiles = name != "gemm 512x512x512"
        first = (f"{first_u:.2f}", f"{first_c:.2f}") if compiles else ("(compiled)", "(compiled)")
        rows.append((name, f"{ms_u:.2f}", f"{ms_c:.2f}", f"{ms_c / ms_u:.2f}x", *first))
    print(f"msl-emu, {os.cpu_count()} cores; median of 5 launches; the first launch of a kernel compiles it\n")
    print(table(["kernel", "unchecked ms", "checked ms", "checked/unchecked", "first launch s (unchecked)",
                 "first launch s (checked)"], rows))


if __name__ == "__main__":
    if "--measure" in sys.argv:
        _measure()
    else:
        main()
