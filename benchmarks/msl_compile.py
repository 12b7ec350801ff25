"""Compile time per kernel: trace, trace -> MSL and trace -> CUDA C++, beside the
original pure-Python meTile's trace -> MSL, and the first compile of a kernel in a
fresh process.

    python benchmarks/msl_compile.py
    METILE_ORIGINAL=/tmp/meTile-719726b python benchmarks/msl_compile.py

The original is github.com/AndreSlavescu/meTile at commit 719726b, a checkout
needing only numpy (`original_compile.py` says what of it is timed). With
METILE_ORIGINAL set it is measured here, in processes that alternate with ours
(ROUNDS of each, default 3); without it its figures are the ones stored below,
measured on the 2-core Linux machine the project is developed on. Both packages
are called `metile`, so each side runs in a process of its own.

Every figure is the minimum over repeats and rounds, in milliseconds of CPU time
(`time.process_time`: the machine is shared, and wall time counts the waits for
a core) and of wall time. A first compile is one process per kernel: import
meTile (not timed), then trace, compile to MSL, compile the same trace to CUDA
C++; the original's is its first trace -> MSL. Ours is measured with the rewrite
cache (`metile/_frontend/code_cache.py`) empty, then in a second process that
finds what the first stored.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

from cpu_clock import best_per_call  # noqa: E402
from kernels import SPECS  # noqa: E402
from timing import table  # noqa: E402

# The original's CPU milliseconds on the development machine (2 shared cores,
# Python 3.11), 2026-11-26: trace -> MSL, and its first one in a fresh process.
ORIGINAL_STORED = {
    "add": {"msl": 0.101, "first": 0.321},
    "softmax": {"msl": 2.233, "first": 2.751},
    "layernorm": {"msl": 2.831, "first": 3.569},
    "rmsnorm": {"msl": 1.683, "first": 2.130},
    "gemm 64x64x32": {"msl": 1.516, "first": 2.032},
    "fused gemm": {"msl": 1.541, "first": 2.066},
}
OPTIONS = {"threads_per_group": 128}
_CHILD_ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}


def measure_ours():
    """Steady-state times of every kernel (the source already parsed and rewritten)."""
    from metile import _frontend, _metile

    result = {}
    for name, (kernel, params, constexprs) in SPECS.items():

        def trace(f=kernel.fn, p=params, c=constexprs):
            return _frontend.specialize(f, p, c, OPTIONS)

        msl = _metile.compile_msl(trace())["msl"]
        cuda = _metile.compile_cuda(trace())["cuda"]
        result[name] = {
            "trace": best_per_call(trace, 50, 5),
            "msl": best_per_call(lambda t=trace: _metile.compile_msl(t()), 20, 5),
            "cuda": best_per_call(lambda t=trace: _metile.compile_cuda(t()), 20, 5),
            "lines": len(msl.splitlines()),
            "cuda_lines": len(cuda.splitlines()),
        }
    return result


def first_ours(name):
    """The first trace and compiles of kernel `name` in this (fresh) process."""
    from metile import _frontend, _metile

    kernel, params, constexprs = SPECS[name]
    times = {}
    stamp = (time.perf_counter(), time.process_time())

    def lap(label):
        nonlocal stamp
        now = (time.perf_counter(), time.process_time())
        times[label] = [(now[0] - stamp[0]) * 1e3, (now[1] - stamp[1]) * 1e3]
        stamp = now

    traced = _frontend.specialize(kernel.fn, params, constexprs, OPTIONS)
    lap("trace")
    _metile.compile_msl(traced)
    lap("msl")
    _metile.compile_cuda(traced)
    lap("cuda")
    return {name: times}


def _child(args, env=None):
    out = subprocess.run(args, capture_output=True, text=True, env=env or _CHILD_ENV, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _first_cold_and_warm(me, name):
    """Our first compile of `name` in a process whose rewrite cache is empty, then
    in one that finds what the first stored (`_frontend/code_cache.py`)."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**_CHILD_ENV, "METILE_CACHE_DIR": folder}
        cold = _child([*me, "--first", name], env)
        warm = _child([*me, "--first", name], env)
    return {name: {**cold[name], **{f"warm {k}": v for k, v in warm[name].items()}}}


def _original_specs():
    specs = {}
    for name, (kernel, params, constexprs) in SPECS.items():
        kinds = ["ptr" if kind == "ptr" else dtype for _, kind, dtype in params]
        specs[name] = [kernel.fn.__name__, kinds, constexprs]
    return json.dumps(specs)


def _merge_min(into, new):
    """Keeps the element-wise minimum of [wall, cpu] pairs, per kernel and key."""
    for name, entry in new.items():
        kept = into.setdefault(name, {})
        for key, value in entry.items():
            if isinstance(value, list) and key in kept:
                kept[key] = [min(a, b) for a, b in zip(kept[key], value)]
            else:
                kept[key] = value


def run(rounds, original):
    me = [sys.executable, __file__]
    env = None
    if original:
        from metile.testing import reference_kernels

        env = {**_CHILD_ENV, "METILE_ORIGINAL": original, "METILE_REFERENCE_KERNELS": reference_kernels.__file__}
        theirs_cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "original_compile.py")]
        specs = _original_specs()
    ours, theirs, ours_first, theirs_first = {}, {}, {}, {}
    for _ in range(rounds):
        if original:
            _merge_min(theirs, _child([*theirs_cmd, specs], env))
        _merge_min(ours, _child([*me, "--ours"]))
        for name in SPECS:
            if original:
                _merge_min(theirs_first, _child([*theirs_cmd, specs, name], env))
            _merge_min(ours_first, _first_cold_and_warm(me, name))
    if not original:
        theirs = {n: {"msl": [None, v["msl"]], "lines": None} for n, v in ORIGINAL_STORED.items()}
        theirs_first = {n: {"first": [None, v["first"]]} for n, v in ORIGINAL_STORED.items()}
    return ours, theirs, ours_first, theirs_first


def _ms(pair):
    wall, cpu = pair
    return f"{cpu:.3f}" if wall is None else f"{cpu:.3f} ({wall:.3f})"


def report(ours, theirs, ours_first, theirs_first, measured):
    source = "measured here, alternating processes" if measured else "stored figures (CPU ms, 2026-11-26)"
    print(f"Steady state, CPU ms (wall ms); the original: {source}\n")
    rows = []
    for name in SPECS:
        o, t = ours[name], theirs[name]
        ref = t["msl"][1]
        rows.append((
            name,
            _ms(o["trace"]),
            _ms(o["msl"]),
            _ms(o["cuda"]),
            _ms(t["msl"]),
            f"{ref / o['msl'][1]:.1f}x",
            f"{ref / o['cuda'][1]:.1f}x",
            f"{o['lines']}/{t['lines'] if t['lines'] is not None else '-'}",
        ))
    headers = ["kernel", "trace", "trace->MSL", "trace->CUDA", "original ->MSL", "MSL x", "CUDA x",
               "MSL lines ours/orig"]
    print(table(headers, rows))
    print("\nFirst compile in a fresh process, CPU ms (wall ms); \"extra\": first trace + first MSL - trace;")
    print("cold: the rewrite cache empty, warm: holding what an earlier process stored\n")
    rows = []
    for name in SPECS:
        f, o = ours_first[name], ours[name]
        extra = f["trace"][1] + f["msl"][1] - o["trace"][1]
        warm_extra = f["warm trace"][1] + f["warm msl"][1] - o["trace"][1]
        rows.append((
            name,
            _ms(f["trace"]),
            _ms(f["msl"]),
            _ms(f["cuda"]),
            f"{extra:.3f}",
            _ms(f["warm trace"]),
            f"{warm_extra:.3f}",
            _ms(theirs_first[name]["first"]),
        ))
    headers = ["kernel", "first trace", "first ->MSL", "first ->CUDA", "extra", "warm first trace", "warm extra",
               "original first ->MSL"]
    print(table(headers, rows))


def main():
    if sys.argv[1:2] == ["--ours"]:
        print(json.dumps(measure_ours()))
        return
    if sys.argv[1:2] == ["--first"]:
        print(json.dumps(first_ours(sys.argv[2])))
        return
    original = os.environ.get("METILE_ORIGINAL")
    rounds = int(os.environ.get("ROUNDS", "3"))
    report(*run(rounds, original), measured=bool(original))


if __name__ == "__main__":
    main()
