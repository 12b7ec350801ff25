"""The `relaxed_math` pass switch: f32 `exp` and `/` feeding only 16-bit results
compile to the GPU's approximations on NVIDIA targets; f32 results, and values
whose terms may cancel, keep the exact functions. Checked on the emitted CUDA
(no GPU needed); the results themselves are checked on every backend by the
conformance and accuracy suites (16-bit results within one ulp)."""

import pytest

import metile
from metile import _frontend, _metile


@metile.kernel
def softmax_row(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + row * N + cols, mask=cols < N, other=-float("inf")).to(metile.float32)
    e = metile.exp(x - metile.max(x, axis=0))
    metile.store(Out + row * N + cols, e / metile.sum(e, axis=0), mask=cols < N)


@metile.kernel
def centred_exp(X, Out, N, BLOCK: metile.constexpr):
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + cols, mask=cols < N, other=0.0).to(metile.float32)
    # exp(x) - x mixes signs: the difference may cancel, so exp keeps every bit.
    metile.store(Out + cols, metile.exp(x) - x, mask=cols < N)


def cuda_source(kernel, dtype, **passes):
    params = [("X", "ptr", dtype), ("Out", "ptr", dtype), ("N", "scalar", "i32", 16)]
    traced = _frontend.specialize(kernel.fn, params, {"BLOCK": 256}, {})
    return _metile.compile_cuda(traced, arch="sm_90", **passes)["cuda"]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_a_16_bit_softmax_gets_the_approximations(dtype):
    body = cuda_source(softmax_row, dtype).split('extern "C"')[1]
    assert "metile_fast_exp(" in body and "metile_fast_div(" in body
    assert "expf(" not in body


def test_an_f32_softmax_keeps_the_exact_functions():
    src = cuda_source(softmax_row, "f32")
    assert "metile_fast" not in src and "expf(" in src


def test_the_switch_turns_it_off():
    src = cuda_source(softmax_row, "bf16", relaxed_math=False)
    assert "metile_fast" not in src and "expf(" in src


def test_terms_that_may_cancel_keep_every_bit():
    src = cuda_source(centred_exp, "bf16")
    assert "metile_fast_exp" not in src and "expf(" in src


def test_apple_targets_compile_the_exact_functions():
    params = [("X", "ptr", "f16"), ("Out", "ptr", "f16"), ("N", "scalar", "i32", 16)]
    traced = _frontend.specialize(softmax_row.fn, params, {"BLOCK": 256}, {})
    msl = _metile.compile_msl(traced)["msl"]
    assert "fast" not in msl.split("kernel void")[1]


@metile.kernel
def fast_functions(X, Y, Out, N, BLOCK: metile.constexpr):
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + cols, mask=cols < N, other=0.0)
    y = metile.load(Y + cols, mask=cols < N, other=1.0)
    metile.store(Out + cols, metile.math.fast_expf(x) + metile.fast_dividef(x, y), mask=cols < N)


def test_fast_functions_are_written_by_the_kernel_too(device):
    import numpy as np

    rng = np.random.default_rng(5)
    n = 300
    x = rng.uniform(-20, 20, n).astype(np.float32)
    y = rng.uniform(0.5, 4, n).astype(np.float32) * rng.choice([-1, 1], n).astype(np.float32)
    out = np.zeros(n, np.float32)
    fast_functions[(1,)](x, y, out, n, BLOCK=512)
    ref = np.exp(x.astype(np.float64)) + x.astype(np.float64) / y
    # Within the approximations' error on NVIDIA GPUs (relative 2^-17 for exp at |x| = 20).
    np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-6)
    params = [("X", "ptr", "f32"), ("Y", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32")]
    traced = _frontend.specialize(fast_functions.fn, params, {"BLOCK": 512}, {})
    src = _metile.compile_cuda(traced, arch="sm_80")["cuda"]
    assert "metile_fast_exp(" in src and "metile_fast_div(" in src
