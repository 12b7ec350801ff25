"""Trace → MSL time per kernel beside the trace-only time, and MSL line counts.

The reference is meTile's earlier pure-Python compiler measured on this kind of
machine (the figures the Rust rewrite is held to, at least 20x faster)."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from kernels import SPECS  # noqa: E402
from timing import per_call, table  # noqa: E402

from metile import _frontend, _metile  # noqa: E402

PYTHON_COMPILER_MS = {
    "add": 0.12,
    "softmax": 2.5,
    "layernorm": 2.4,
    "rmsnorm": 2.0,
    "gemm 64x64x32": 1.7,
    "fused gemm": 1.8,
}


def main():
    options = {"threads_per_group": 128}
    rows = []
    for name, (kernel, params, constexprs) in SPECS.items():
        fn = kernel.fn
        traced = _frontend.specialize(fn, params, constexprs, options)  # parse and rewrite once
        msl = _metile.compile_msl(traced)["msl"]

        def trace(f=fn, p=params, c=constexprs):
            return _frontend.specialize(f, p, c, options)

        def trace_to_msl(f=fn, p=params, c=constexprs):
            return _metile.compile_msl(_frontend.specialize(f, p, c, options))

        t_trace = per_call(trace, number=30, rep=5)
        t_msl = per_call(trace_to_msl, number=30, rep=5)
        ref = PYTHON_COMPILER_MS[name]
        rows.append(
            (
                name,
                f"{t_trace * 1e3:.3f}",
                f"{t_msl * 1e3:.3f}",
                len(msl.splitlines()),
                f"{ref:.2f}",
                f"{ref / (t_msl * 1e3):.1f}x",
            )
        )
    headers = ["kernel", "trace ms", "trace->MSL ms", "MSL lines", "Python compiler ms", "speed-up"]
    print(table(headers, rows))


if __name__ == "__main__":
    main()
