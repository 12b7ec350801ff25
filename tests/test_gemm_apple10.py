"""GEMM on Apple10's Metal 4 `matmul2d` (the `arch="apple10"` launch option): the
emitted MSL runs on the MSL emulator and agrees with the cpu interpreter and numpy
for f16/bf16 operands, ragged shapes, every threadgroup size, a fused epilogue and
an accumulator carried over k; dots the atom does not fit take the 8x8 simdgroup
matrices or the generic path; bad values of the option are refused."""

import numpy as np
import pytest
from test_gemm import GEMM_PARAMS, _operands, gemm, gemm_masked_epilogue

import metile
from metile import _frontend, _metile

needs_emulator = pytest.mark.skipif(not metile.device_available("msl-emu"), reason="no msl-emu device here")


def _on(device, launch):
    previous = metile.get_device()
    metile.set_device(device)
    try:
        return launch()
    finally:
        metile.set_device(previous)


def _gemm_everywhere(rng, M, N, K, dtype, blocks, num_sgs=None):
    """The GEMM on the interpreter and on the emulator with arch="apple10": both
    agree with numpy, and with each other up to f32 summation order."""
    a, a64 = _operands(rng, (M, K), dtype)
    b, b64 = _operands(rng, (K, N), dtype)
    bm, bn, bk = blocks
    opts = {"arch": "apple10"} if num_sgs is None else {"arch": "apple10", "num_sgs": num_sgs}

    def launch():
        c = np.full((M, N), np.nan, np.float32)
        gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                            DT=dtype, **opts)
        return c

    want = _on("cpu", launch)
    got = _on("msl-emu", launch)
    np.testing.assert_allclose(want, a64 @ b64, rtol=1e-4, atol=1e-4 * np.sqrt(K))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(K))


def _msl(dtype, blocks, num_sgs=None, arch="apple10"):
    params = [(n, k, "f16" if n in "AB" and dtype == "f16" else d) for n, k, d in GEMM_PARAMS]
    constexprs = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), blocks), DT=dtype)
    return _metile.compile_msl(_frontend.specialize(gemm.fn, params, constexprs, {}), num_sgs=num_sgs, arch=arch)


@needs_emulator
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("M, N, K", [(64, 64, 64), (67, 45, 83), (5, 20, 17), (1, 1, 1), (100, 130, 48)])
def test_apple10_gemm_on_matmul2d_and_ragged_edges(rng, dtype, M, N, K):
    # N=20 and 45 are smaller than the 64-wide tile; K=83 and 17 leave a ragged last k block.
    blocks = (32, 64, 32)
    assert "matmul2d<" in _msl(dtype, blocks)["msl"]
    _gemm_everywhere(rng, M, N, K, dtype, blocks)


@needs_emulator
@pytest.mark.parametrize("num_sgs", [1, 2, 4, 8])
def test_apple10_gemm_at_every_threadgroup_size(rng, num_sgs):
    # 32x64 tiles are 2x2 atom tiles: 8 simdgroups repeat the work of the first four.
    assert "matmul2d<" in _msl("f16", (32, 64, 16), num_sgs)["msl"]
    _gemm_everywhere(rng, 70, 90, 48, "f16", (32, 64, 16), num_sgs=num_sgs)


@needs_emulator
def test_apple10_accumulator_is_carried_over_many_k_steps(rng):
    # K=200 in 16-wide steps: twelve iterations and a ragged one, the accumulator in
    # registers in the atom's C layout throughout.
    _gemm_everywhere(rng, 48, 64, 200, "bf16", (16, 32, 16), num_sgs=2)


@needs_emulator
@pytest.mark.parametrize("M, N, K", [(64, 64, 32), (50, 37, 29)])
def test_apple10_masked_gemm_with_fused_epilogue(rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float32)

    def launch():
        c = np.full((M, N), np.nan, np.float16)
        gemm_masked_epilogue[(metile.cdiv(M, 32), metile.cdiv(N, 32))](
            a, b, bias, c, M, N, K, 0.5, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, arch="apple10")
        return c.astype(np.float64)

    want, got = _on("cpu", launch), _on("msl-emu", launch)
    y = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + bias
    np.testing.assert_allclose(want, np.where(y > 0, y, 0.0) + 0.5 * y / (1.0 + np.exp(-y)), rtol=5e-3, atol=5e-3)
    # f16 output: at most one rounding step apart.
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@needs_emulator
def test_dots_without_the_atom_still_run_on_apple10(rng):
    # f32 (relaxed precision is not offered), N and K tiles that are no multiple of
    # the atom (8x8 simdgroup matrices), and a tile no atom fits (generic path).
    for dtype, blocks in [("f32", (32, 32, 16)), ("f16", (32, 16, 16)), ("f16", (32, 32, 8)), ("f16", (12, 8, 8))]:
        msl = _msl(dtype, blocks)
        assert "matmul2d<" not in msl["msl"] and msl["language_version"] == "3.1", (dtype, blocks)
        assert ("simdgroup_multiply_accumulate" in msl["msl"]) == (blocks != (12, 8, 8)), (dtype, blocks)
        _gemm_everywhere(rng, 40, 30, 24, dtype, blocks)


def test_apple10_msl_is_metal_4():
    msl = _msl("bf16", (64, 64, 32), 4)
    assert msl["language_version"] == "4.0"
    text = msl["msl"]
    for needed in ("#include <metal_tensor>", "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>",
                   "using namespace mpp::tensor_ops;", "execution_simdgroup",
                   "matmul2d_descriptor(16, 32, 16, false, false, true, matmul2d_descriptor::mode::"
                   "multiply_accumulate)", "get_left_input_cooperative_tensor<bfloat, bfloat, float>()"):
        assert needed in text, needed
    default = _msl("bf16", (64, 64, 32), 4, arch="apple")
    assert default["language_version"] == "3.1" and "metal_tensor" not in default["msl"]
    assert _msl("bf16", (64, 64, 32), 4, arch=None)["msl"] == default["msl"]
    assert _metile.dot_plan(64, 64, 32, "f16", 4, arch="apple10")["atom"] == "matmul2d16x32x16"
    assert _metile.dot_plan(64, 64, 32, "f32", 4, arch="apple10")["atom"] == "simdgroup8x8"


@needs_emulator
def test_arch_enters_the_specialisation_key(rng):
    @metile.kernel
    def tiny(A, B, C, BLOCK: metile.constexpr):
        r = metile.arange(0, BLOCK)
        a = metile.load(A + r[:, None] * BLOCK + r[None, :])
        b = metile.load(B + r[:, None] * BLOCK + r[None, :])
        metile.store(C + r[:, None] * BLOCK + r[None, :], metile.dot(a, b))

    a = rng.standard_normal((32, 32)).astype(np.float16)
    c = np.zeros((32, 32), np.float32)

    def launch():
        tiny[(1,)](a, a, c, BLOCK=32)
        tiny[(1,)](a, a, c, BLOCK=32, arch="apple10")
        tiny[(1,)](a, a, c, BLOCK=32, arch="apple")
        tiny[(1,)](a, a, c, BLOCK=32, arch="apple10")

    _on("msl-emu", launch)
    # No arch, "apple" and "apple10": three specialisations (an unset arch is keyed apart).
    assert tiny.cache_info()["specializations"] == 3
    np.testing.assert_allclose(c, a.astype(np.float64) @ a, rtol=1e-3, atol=1e-2)


def test_the_arch_option_is_checked():
    x = np.zeros((16, 16), np.float16)
    c = np.zeros((16, 16), np.float32)
    launch = gemm[(1, 1)]
    with pytest.raises(TypeError, match="the launch option arch names an Apple GPU family and must be a str, "
                                        "'apple' or 'apple10', got 10"):
        launch(x, x, c, 16, 16, 16, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, arch=10)
    with pytest.raises(ValueError, match="the launch option arch must be 'apple' or 'apple10' .*got 'apple9'"):
        launch(x, x, c, 16, 16, 16, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, arch="apple9")
    with pytest.raises(ValueError, match="arch must be 'apple' or 'apple10' \\(an Apple GPU family\\), got 'm5'"):
        metile.Config(BLOCK_M=16, arch="m5")
    with pytest.raises(ValueError, match="got 10"):
        metile.Config(BLOCK_M=16, arch=10)
    assert dict(metile.Config(BLOCK_M=16, arch="apple10")) == {"BLOCK_M": 16, "arch": "apple10"}
    configured = gemm[(1, 1)].configure(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, arch="apple10")
    with pytest.raises(TypeError, match="multiple values for the launch option arch"):
        configured(x, x, c, 16, 16, 16, arch="apple")
    with pytest.raises(ValueError, match="got 'sm_90'"):
        _msl("f16", (32, 32, 16), arch="sm_90")
    with pytest.raises(TypeError, match="must be a str"):
        _msl("f16", (32, 32, 16), arch=b"apple10")
    with pytest.raises(ValueError, match="NVIDIA architecture"):
        _metile.dot_plan(64, 64, 32, "f16", 4, arch="apple11")


@pytest.mark.skipif(not metile.device_available("cuda"), reason="no cuda device here")
def test_the_cuda_device_refuses_an_apple_arch():
    x = np.zeros((16, 16), np.float16)
    c = np.zeros((16, 16), np.float32)

    def launch():
        gemm[(1, 1)](x, x, c, 16, 16, 16, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, arch="apple10")

    with pytest.raises(ValueError, match="arch='apple10' selects an Apple GPU family"):
        _on("cuda", launch)
