"""The kernels the benchmarks measure, with the launch parameters each uses."""

from metile.testing.reference_kernels import add, gemm, gemm_epilogue, layernorm, rmsnorm, softmax


def _ptr(name):
    return (name, "ptr", "f32")


def _i32(name):
    return (name, "scalar", "i32")


def _f32(name):
    return (name, "scalar", "f32")


# name -> (kernel, runtime params as the frontend sees them, constexprs)
SPECS = {
    "add": (add, [_ptr("X"), _ptr("Y"), _ptr("Out"), _i32("N")], {"BLOCK": 1024}),
    "softmax": (softmax, [_ptr("X"), _ptr("Out"), _i32("N")], {"BLOCK": 1024}),
    "layernorm": (layernorm, [_ptr("X"), _ptr("W"), _ptr("B"), _ptr("Out"), _i32("N"), _f32("eps")],
                  {"BLOCK": 1024}),
    "rmsnorm": (rmsnorm, [_ptr("X"), _ptr("W"), _ptr("Out"), _i32("N"), _f32("eps")], {"BLOCK": 1024}),
    "gemm 64x64x32": (gemm, [_ptr("A"), _ptr("B"), _ptr("C"), _i32("M"), _i32("N"), _i32("K")],
                      {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    "fused gemm": (gemm_epilogue, [_ptr("A"), _ptr("B"), _ptr("C"), _i32("M"), _i32("N"), _i32("K"), _f32("alpha")],
                   {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "ACT": "relu"}),
}
