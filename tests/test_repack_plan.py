"""The repack step of a launch plan: which `dot` operands of a compiled CUDA kernel a launch may
copy into rows padded to 16 bytes before the kernel runs (docs/pipeline.md, "Launch plans").
The compiler decides the candidates without a GPU; the cuda runtime decides at each launch
whether to copy them (tests/test_tma.py runs that on the GPU)."""

import pytest

import metile
from metile import _frontend, _metile
from metile.testing import reference_kernels as rk

F16_GEMM = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32"),
            ("M", "scalar", "i32", 300), ("N", "scalar", "i32", 261), ("K", "scalar", "i32", 99)]
BLOCKS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}


def _repack(kernel, params=F16_GEMM, constexprs=BLOCKS, arch="sm_90", **options):
    traced = _frontend.specialize(kernel.fn, params, constexprs, {})
    return _metile.compile_cuda(traced, arch=arch, num_sgs=8, **options)["repack"]


def test_a_gemm_may_repack_both_operands_and_names_their_extents():
    got = sorted((op["buffer"], op["dtype"], op["rows"], op["cols"], op["stride"]) for op in _repack(rk.gemm_bounded))
    # A is M x K with rows K apart, B K x N with rows N apart (arguments 3, 4, 5); C, which the
    # kernel writes, is never a candidate.
    assert got == [(0, "f16", ("arg", 3), ("arg", 5), ("arg", 5)),
                   (1, "f16", ("arg", 5), ("arg", 4), ("arg", 4))]
    maps = [op["map"] for op in _repack(rk.gemm_bounded)]
    assert sorted(maps) == list(range(len(maps)))
    assert all(op["box"][0] <= 256 and op["box"][1] * 2 <= 128 for op in _repack(rk.gemm_bounded))


@metile.kernel
def gemm_into_a(A, B, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                BLOCK_K: metile.constexpr):
    """Reads A and B with tensor copies and writes its product over A (K == N)."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(A, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc.to(metile.float16), (BLOCK_M, BLOCK_N),
                      bounds=(M, N))


def test_a_buffer_the_kernel_writes_is_never_copied():
    params = [("A", "ptr", "f16"), ("B", "ptr", "f16"),
              ("M", "scalar", "i32", 300), ("N", "scalar", "i32", 96), ("K", "scalar", "i32", 96)]
    assert [op["buffer"] for op in _repack(gemm_into_a, params)] == [1]


@pytest.mark.parametrize("arch, options", [("sm_90", {"repack_operands": False}), ("sm_90", {"tma": False}),
                                           ("sm_80", {})])
def test_no_repack_step_with_the_switch_off_or_without_tensor_maps(arch, options):
    assert _repack(rk.gemm_bounded, arch=arch, **options) == []


def test_a_kernel_without_dot_has_no_repack_step():
    params = [("X", "ptr", "f32"), ("Y", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32", 1000)]
    assert _repack(rk.add, params, {"BLOCK": 256}) == []

