"""The accuracy of the CUDA functions meTile's CUDA backend calls (`sinf`,
`erff`, `powf`, ... compiled by NVRTC with `--fmad=false`, as the backend
compiles), measured on the inputs and against the references of
`metile.testing.accuracy_cases`, with CuPy. It needs no meTile install: the
cases module is loaded by path, so it runs on any machine with CuPy and a GPU.

    python benchmarks/cuda_math_accuracy.py [path/to/accuracy_cases.py]
"""

import importlib.util
import os
import sys

import cupy as cp
import numpy as np

# The expression meTile's CUDA emitter writes for each function of `x`, `y`, `z`.
EXPRESSIONS = {
    "exp": "expf(x)",
    "exp2": "exp2f(x)",
    "log": "logf(x)",
    "log2": "log2f(x)",
    "log1p": "log1pf(x)",
    "expm1": "expm1f(x)",
    "sqrt": "sqrtf(x)",
    "rsqrt": "rsqrtf(x)",
    "sin": "sinf(x)",
    "cos": "cosf(x)",
    "tan": "tanf(x)",
    "asin": "asinf(x)",
    "acos": "acosf(x)",
    "atan": "atanf(x)",
    "sinh": "sinhf(x)",
    "cosh": "coshf(x)",
    "tanh": "tanhf(x)",
    "erf": "erff(x)",
    "sigmoid": "1.0f / (1.0f + expf(-x))",
    "floor": "floorf(x)",
    "ceil": "ceilf(x)",
    "round": "roundf(x)",
    "rint": "rintf(x)",
    "pow": "powf(x, y)",
    "atan2": "atan2f(x, y)",
    "fdiv": "x / y",
    "fma": "fmaf(x, y, z)",
}


def load_cases(path):
    spec = importlib.util.spec_from_file_location("accuracy_cases", path)
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up by name while they are made.
    sys.modules["accuracy_cases"] = module
    spec.loader.exec_module(module)
    return module


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "python", "metile", "testing", "accuracy_cases.py")
    cases = load_cases(sys.argv[1] if len(sys.argv) > 1 else default)
    n = 100_000
    print("| function | cuda worst ulp | worst input |")
    print("|---|---|---|")
    for name, expr in EXPRESSIONS.items():
        source = (
            'extern "C" __global__ void k(const float* xs, const float* ys, const float* zs, float* out, int n) {\n'
            "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "  if (i >= n) return;\n"
            "  float x = xs[i], y = ys[i], z = zs[i];\n"
            f"  out[i] = {expr};\n"
            "}\n"
        )
        kernel = cp.RawKernel(source, "k", options=("--fmad=false", "--std=c++17"))
        args = cases.inputs(name, n)
        padded = args + [np.ones(n, np.float32)] * (3 - len(args))
        device_args = [cp.asarray(a) for a in padded]
        out = cp.zeros(n, cp.float32)
        kernel(((n + 255) // 256,), (256,), (*device_args, out, np.int32(n)))
        with np.errstate(all="ignore"):
            want = cases.CASES[name].reference(*[a.astype(np.float64) for a in args])
        err = cases.ulp_error(cp.asnumpy(out), want)
        i = int(np.argmax(err))
        worst_input = ", ".join(f"{float(a[i]):.9g}" for a in args)
        print(f"| {name} | {err[i]:.3f} | {worst_input} |", flush=True)


if __name__ == "__main__":
    main()
