"""Trace + Tile IR time per kernel (the source already parsed), and host
overhead of launching a cached kernel."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

from kernels import SPECS, add  # noqa: E402
from timing import per_call, table  # noqa: E402

import metile  # noqa: E402
from metile import _frontend  # noqa: E402


@metile.kernel
def empty(X, N):
    metile.program_id(0)


# Module values the next kernel reads: a launch reads each one to key the specialisation.
SCALE = 2.0
SHIFT = 1
OUT_DTYPE = metile.float32


def _shifted(x):
    return x + SHIFT


@metile.kernel
def empty_reading_globals(X, N):
    metile.program_id(0)
    metile.cast(_shifted(metile.zeros((4,), dtype=OUT_DTYPE)) * SCALE, OUT_DTYPE)


def trace_times():
    rows = []
    options = {"threads_per_group": 128}
    for name, (kernel, params, constexprs) in SPECS.items():
        fn = kernel.fn
        _frontend.specialize(fn, params, constexprs, options)  # parse and rewrite once
        t = per_call(lambda f=fn, p=params, c=constexprs: _frontend.specialize(f, p, c, options), number=50, rep=5)
        f = _frontend.specialize(fn, params, constexprs, options)
        rows.append((name, f"{t * 1e3:.3f}", len(f.text.splitlines())))
    return rows


def launch_overheads():
    x = np.ones(16, np.float32)
    out = np.zeros(16, np.float32)
    buf = metile.Buffer(data=x)
    rows = []
    cases = [
        ("empty kernel, grid (1,)", lambda: empty[(1,)](x, 16)),
        ("empty kernel reading 3 globals and a helper", lambda: empty_reading_globals[(1,)](x, 16)),
        ("empty kernel, grid (0,) (an empty launch)", lambda: empty[(0,)](x, 16)),
        ("add 16 floats, numpy args", lambda: add[(1,)](x, x, out, 16, BLOCK=16)),
        ("add 16 floats, Buffer args", lambda: add[(1,)](buf, buf, buf, 16, BLOCK=16)),
    ]
    launcher = add[(1,)]
    cases.append(("add, pre-bound launcher", lambda: launcher(x, x, out, 16, BLOCK=16)))
    for label, fn in cases:
        fn()
        t = per_call(fn, number=2000, rep=7)
        rows.append((label, f"{t * 1e6:.2f}"))
    return rows


def main():
    print(f"device: {metile.get_device()}\n")
    print("Trace + Tile IR (passes and verifier included), source already parsed")
    print(table(["kernel", "ms", "IR lines"], trace_times()))
    print("\nHost overhead of launching a cached kernel")
    print(table(["case", "us/launch"], launch_overheads()))


if __name__ == "__main__":
    main()
