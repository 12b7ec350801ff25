"""The l2_order pass: GEMM programs renumbered in bands of rows so that concurrent
programs share operand tiles in L2 (docs/gemm.md). It must compute every
(program_id(0), program_id(1)) pair exactly once on any grid, on every backend
(the cpu backend runs the renumbering when asked, so the interpreter checks it),
and leave GEMM results bit for bit unchanged."""

import numpy as np
import pytest

import metile
from metile import _frontend, _metile
from metile.testing.reference_kernels import gemm_bounded, softmax


@metile.kernel
def stamp(Zero, Out, GY, BLOCK: metile.constexpr):
    """Writes 1 + (its tile of a zero product) at its (pid0, pid1) slot: the dot
    makes it a GEMM-like kernel the pass applies to."""
    pid0 = metile.program_id(0)
    pid1 = metile.program_id(1)
    z = metile.tile_load(Zero, 0, 0, BLOCK, (BLOCK, BLOCK))
    d = metile.dot(z, z, z) + 1.0
    metile.tile_store(Out, pid0 * BLOCK, pid1 * BLOCK, GY * BLOCK, d, (BLOCK, BLOCK))


@pytest.mark.parametrize("grid", [(1, 1), (1, 7), (7, 1), (9, 13), (16, 16), (17, 3)],
                         ids=lambda g: f"{g[0]}x{g[1]}")
@pytest.mark.parametrize("l2_order", [True, False])
def test_every_program_pair_runs_once(device, grid, l2_order):
    gx, gy = grid
    block = 8
    zero = np.zeros((block, block), np.float32)
    out = np.zeros((gx * block, gy * block), np.float32)
    stamp[grid](zero, out, gy, BLOCK=block, l2_order=l2_order)
    # A pair computed twice would leave another pair unwritten (the programs are as many as the pairs).
    np.testing.assert_array_equal(out, 1.0)


@pytest.mark.parametrize("M, N, K", [(200, 40, 48), (67, 45, 83)])
def test_gemm_results_are_identical_with_and_without_the_order(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    out = {}
    for on in (True, False):
        c = np.full((M, N), np.nan, np.float32)
        gemm_bounded[(metile.cdiv(M, 16), metile.cdiv(N, 16))](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16,
                                                                l2_order=on)
        out[on] = c
    np.testing.assert_array_equal(out[True], out[False])
    np.testing.assert_allclose(out[True], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


GEMM_PARAMS = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32"), ("M", "scalar", "i32"),
               ("N", "scalar", "i32"), ("K", "scalar", "i32")]


def _traced_gemm():
    return _frontend.specialize(gemm_bounded.fn, GEMM_PARAMS, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, {})


def test_the_order_is_on_by_default_on_gpus_and_switchable():
    traced = _traced_gemm()
    for compile_ in (lambda **p: _metile.compile_msl(traced, **p)["msl"],
                     lambda **p: _metile.compile_cuda(traced, arch="sm_90", **p)["cuda"]):
        assert compile_() == compile_(l2_order=True)
        assert compile_(l2_order=False) != compile_()
    # The renumbering divides by the grid extents, in 64-bit arithmetic.
    cuda = _metile.compile_cuda(traced, arch="sm_90")["cuda"]
    assert "gridDim" in cuda and "gridDim" not in _metile.compile_cuda(traced, arch="sm_90", l2_order=False)["cuda"]


@metile.kernel
def gemm_swizzled(A, B, C, M, N, K, BLOCK: metile.constexpr):
    pid_m, pid_n = metile.tile_swizzle(metile.program_id(0), metile.program_id(1), "diagonal", 2)
    acc = metile.zeros((BLOCK, BLOCK), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK):
        a = metile.tile_load(A, pid_m * BLOCK, k, K, (BLOCK, BLOCK), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK, N, (BLOCK, BLOCK), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK, pid_n * BLOCK, N, acc, (BLOCK, BLOCK), bounds=(M, N))


def test_only_gemm_grids_that_do_not_order_themselves_are_renumbered():
    def changes(fn, params, constexprs):
        traced = _frontend.specialize(fn, params, constexprs, {})
        return _metile.compile_msl(traced, l2_order=False)["msl"] != _metile.compile_msl(traced)["msl"]

    ptrs = [("Zero", "ptr", "f32"), ("Out", "ptr", "f32"), ("GY", "scalar", "i32")]
    assert changes(stamp.fn, ptrs, {"BLOCK": 8})
    # No dot and a 1-D grid; a kernel with its own tile_swizzle.
    assert not changes(softmax.fn, [("X", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32")],
                       {"BLOCK": 128})
    assert not changes(gemm_swizzled.fn, GEMM_PARAMS, {"BLOCK": 32})


def test_l2_order_switch_values_are_checked():
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(TypeError, match="the launch option l2_order switches a pass on or off and must be True or "
                                        "False, got 1"):
        stamp[(1, 1)](x, x, 1, BLOCK=8, l2_order=1)
    with pytest.raises(ValueError, match="l2_order switches a pass on or off and must be True or False, got 'on'"):
        metile.Config(BLOCK=8, l2_order="on")
    with pytest.raises(TypeError, match="the pass l2_order is switched on or off with True or False, got None"):
        _metile.compile_msl(_traced_gemm(), l2_order=None)
    assert dict(metile.Config(BLOCK=8, l2_order=False)) == {"BLOCK": 8, "l2_order": False}
