"""The original pure-Python meTile's trace -> MSL time, run by msl_compile.py in a
process of its own (both packages are called `metile`).

    METILE_ORIGINAL=/path/to/meTile python benchmarks/original_compile.py SPECS_JSON [FIRST_KERNEL]

The original (github.com/AndreSlavescu/meTile, commit 719726b) is pure Python:
`KernelLauncher._compile` traces the kernel, lowers it to its Metal IR, runs its
passes and emits MSL, then compiles the MSL on the Metal device. Here the device
is a stand-in (Linux has no Metal framework): no Metal 4 tensor ops (the
simdgroup-matrix GEMM path, as on Apple7 to Apple9 GPUs), no offline compiler,
and its MSL compile returns at once, so what is timed is the original's trace
-> MSL path. The kernels are the ones meTile's benchmarks use
(`metile/testing/reference_kernels.py`), executed with the original's `metile`:
their spelling is the same in both.

SPECS_JSON maps a benchmark name to `[kernel name, argument kinds ("ptr", "i32",
"f32"), constexprs]`. Prints one JSON object: per kernel, the best wall and CPU
milliseconds per compile and the MSL line count; with FIRST_KERNEL, only the
first compile of that kernel in this process.
"""

import json
import os
import sys
import time
import types

from cpu_clock import best_per_call


def _stand_in_device() -> None:
    """Registers a Metal device module that has no Metal behind it."""

    class MetalDevice:
        supports_tensor_ops = False
        has_metal_compiler = False
        max_threadgroup_memory = 32 * 1024
        _instance = None

        @classmethod
        def get(cls):
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

        def compile_msl(self, source, function_name):
            return None

    class MTLSize:
        pass

    module = types.ModuleType("metile.runtime.metal_device")
    module.MetalDevice = MetalDevice
    module.MTLSize = MTLSize
    sys.modules["metile.runtime.metal_device"] = module


def _stand_in_attention() -> None:
    """Registers `metile.testing.reference_attention`, which this package's reference
    kernels import and the original has not; the attention kernels are never timed."""
    testing = types.ModuleType("metile.testing")
    testing.__path__ = []
    attention = types.ModuleType("metile.testing.reference_attention")
    attention.attention = attention.attention_backward = None
    sys.modules.setdefault("metile.testing", testing)
    sys.modules["metile.testing.reference_attention"] = attention


def main():
    root = os.environ["METILE_ORIGINAL"]
    specs = json.loads(sys.argv[1])
    first = sys.argv[2] if len(sys.argv) > 2 else None
    sys.path.insert(0, root)
    _stand_in_device()
    _stand_in_attention()
    import numpy as np

    from metile.frontend.kernel import KernelLauncher

    source_file = os.environ["METILE_REFERENCE_KERNELS"]
    kernels: dict = {}
    with open(source_file) as f:
        exec(compile(f.read(), source_file, "exec"), kernels)  # noqa: S102 - meTile's own reference kernels

    def compiler(name):
        kernel_name, kinds, constexprs = specs[name]
        kernel = kernels[kernel_name]
        args = [np.zeros(1, np.float32) if k == "ptr" else (1 if k == "i32" else 1.0) for k in kinds]
        launcher = KernelLauncher(kernel, (1,))
        params = list(kernel._sig.parameters)
        return lambda: launcher._compile(args, dict(constexprs), params)

    if first is not None:
        compile_once = compiler(first)
        w0, c0 = time.perf_counter(), time.process_time()
        compiled = compile_once()
        wall, cpu = (time.perf_counter() - w0) * 1e3, (time.process_time() - c0) * 1e3
        print(json.dumps({first: {"first": [wall, cpu], "lines": len(compiled.msl_source.splitlines())}}))
        return
    result = {}
    for name in specs:
        compile_once = compiler(name)
        lines = len(compile_once().msl_source.splitlines())
        result[name] = {"msl": best_per_call(compile_once, 10, 5), "lines": lines}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
