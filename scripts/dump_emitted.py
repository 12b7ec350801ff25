"""Dumps the CUDA C++ (sm_80, sm_90) and MSL (apple, apple10) that meTile emits for
the benchmark kernels (`benchmarks/kernels.py`) and for every kernel the given test
files trace, one file per kernel and target, so that two builds can be compared
byte for byte:

    python scripts/dump_emitted.py [--ones-as-scalars] OUT_DIR [tests/test_gemm.py ...]
    diff -r BEFORE_DIR AFTER_DIR

`--ones-as-scalars` compiles integer arguments equal to 1 as ordinary scalars, as
builds before that specialisation did, which separates its effect from the rest.

Each test kernel is recorded as traced (run-time parameter kinds, constexprs,
threads per group) while pytest runs the files on the cpu backend, then compiled
for each target. A file's name is the kernel's name and a hash of its
specialisation, with parameters that a build specialises on the value 1 counted
as ordinary scalars, so that the same launch names the same file in both builds.
"""

import hashlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

TARGETS = [("sm_80", "cuda"), ("sm_90", "cuda"), ("apple", "msl"), ("apple10", "msl")]


class Recorder:
    """A pytest plugin that records every specialisation the frontend traces."""

    def __init__(self):
        self.seen = {}

    def pytest_configure(self, config):
        from metile import _frontend

        original = _frontend.specialize

        def recording(fn, runtime_params, constexprs, options):
            traced = original(fn, runtime_params, constexprs, options)
            key = launch_key(fn, runtime_params, constexprs, options)
            self.seen.setdefault(key, (fn, list(runtime_params), dict(constexprs), dict(options)))
            return traced

        _frontend.specialize = recording


def launch_key(fn, runtime_params, constexprs, options):
    params = [(p[0], "scalar" if p[1] == "one" else p[1], *p[2:3]) for p in runtime_params]
    text = repr((fn.__module__, fn.__qualname__, params, sorted((k, repr(v)) for k, v in constexprs.items()),
                 options.get("threads_per_group", 128)))
    return f"{fn.__name__}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def emit(out, key, fn, params, constexprs, options, ones_as_scalars=False):
    from metile import _frontend, _metile

    if ones_as_scalars:
        params = [(p[0], "scalar", *p[2:]) if p[1] == "one" else p for p in params]

    threads = options.get("threads_per_group", 128)
    try:
        traced = _frontend.specialize(fn, params, constexprs, {"threads_per_group": threads})
    except Exception as e:  # noqa: BLE001 - a kernel the tests expect to fail to trace
        (out / f"{key}.error").write_text(f"{type(e).__name__}: {e}\n")
        return
    num_sgs = max(threads // 32, 1)
    (out / f"{key}.params").write_text(f"{params!r}\n{constexprs!r}\n")
    for arch, lang in TARGETS:
        try:
            if lang == "cuda":
                text = _metile.compile_cuda(traced, num_sgs=num_sgs, arch=arch)["cuda"]
            else:
                text = _metile.compile_msl(traced, num_sgs=num_sgs, arch=arch)["msl"]
        except Exception as e:  # noqa: BLE001 - refused for this target: record the refusal
            text = f"// refused: {type(e).__name__}: {e}\n"
        (out / f"{key}.{arch}.{'cu' if lang == 'cuda' else 'metal'}").write_text(text)


def main():
    args = sys.argv[1:]
    ones_as_scalars = "--ones-as-scalars" in args
    args = [a for a in args if a != "--ones-as-scalars"]
    out = Path(args[0])
    out.mkdir(parents=True, exist_ok=True)
    test_files = args[1:]
    recorder = Recorder()
    if test_files:
        os.environ.setdefault("METILE_TEST_DEVICES", "cpu")
        pytest.main(["-q", "-x", "-p", "no:cacheprovider", *test_files], plugins=[recorder])
    from kernels import SPECS

    for name, (kernel, params, constexprs) in SPECS.items():
        key = "bench-" + name.replace(" ", "_")
        emit(out, key, kernel.fn, params, constexprs, {"threads_per_group": 128})
    for key, (fn, params, constexprs, options) in sorted(recorder.seen.items()):
        emit(out, key, fn, params, constexprs, options, ones_as_scalars)
    print(f"{len(SPECS)} benchmark kernels and {len(recorder.seen)} test specialisations dumped to {out}")


if __name__ == "__main__":
    main()
