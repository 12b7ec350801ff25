"""GEMM conformance: `dot` on the targets' matrix atoms (Apple simdgroup_matrix,
NVIDIA mma.sync) and on the generic path, against numpy, for f32/f16/bf16
operands, ragged shapes, fused epilogues, Triton-style masked GEMMs, swizzled
grids and every threadgroup size."""

import re

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


def _bf16(x):
    """Rounds float32 values to bfloat16 (to nearest even), returned as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def _operands(rng, shape, dtype):
    """The array to pass and its exact values; bf16 operands are f32 arrays of
    bf16-representable values that the kernel casts (numpy has no bfloat16)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "f16":
        x = x.astype(np.float16)
    elif dtype == "bf16":
        x = _bf16(x)
    return x, x.astype(np.float64)


@metile.kernel
def gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr,
         DT: metile.constexpr = "f16"):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K)).to(DT)
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N)).to(DT)
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


def _run_gemm(rng, M, N, K, dtype, blocks, num_sgs=None):
    a, a64 = _operands(rng, (M, K), dtype)
    b, b64 = _operands(rng, (K, N), dtype)
    c = np.full((M, N), np.nan, np.float32)
    bm, bn, bk = blocks
    opts = {} if num_sgs is None else {"num_sgs": num_sgs}
    gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                        DT=dtype, **opts)
    want = a64 @ b64
    tol = 1e-4 if dtype == "f32" else 2e-3
    np.testing.assert_allclose(c, want, rtol=tol, atol=tol * np.sqrt(K))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("M, N, K", [(64, 64, 64), (67, 45, 83), (5, 130, 17), (1, 1, 1)])
def test_gemm_on_matrix_atoms_and_ragged_edges(device, rng, dtype, M, N, K):
    _run_gemm(rng, M, N, K, dtype, (32, 32, 16))


@pytest.mark.parametrize("num_sgs", [1, 2, 4, 8])
def test_gemm_at_every_threadgroup_size(device, rng, num_sgs):
    # 16x16 tiles with 8 simdgroups: more simdgroups than atom tiles (some repeat the work).
    _run_gemm(rng, 40, 24, 48, "f16", (16, 16, 16), num_sgs=num_sgs)


@pytest.mark.parametrize("blocks", [(16, 8, 16), (8, 8, 8), (48, 40, 32), (64, 32, 64)])
def test_gemm_block_shapes(device, rng, blocks):
    _run_gemm(rng, 70, 50, 64, "f16", blocks)


@metile.kernel
def gemm_masked_epilogue(A, B, Bias, C, M, N, K, alpha, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                         BLOCK_K: metile.constexpr):
    """Triton-style: 2-D masked loads and stores, a fused bias + scale + SiLU/ReLU epilogue."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    rm = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    rk = metile.arange(0, BLOCK_K)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a_mask = (rm[:, None] < M) & ((k + rk)[None, :] < K)
        b_mask = ((k + rk)[:, None] < K) & (rn[None, :] < N)
        a = metile.load(A + rm[:, None] * K + (k + rk)[None, :], mask=a_mask, other=0.0)
        b = metile.load(B + (k + rk)[:, None] * N + rn[None, :], mask=b_mask, other=0.0)
        acc = metile.dot(a, b, acc)
    bias = metile.load(Bias + rn, mask=rn < N, other=0.0)
    y = alpha * acc + bias[None, :]
    y = metile.where(y > 0, y, 0.0) + 0.5 * y / (1.0 + metile.exp(-y))
    metile.store(C + rm[:, None] * N + rn[None, :], y.to("f16"), mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("M, N, K", [(64, 64, 32), (50, 37, 29)])
def test_masked_gemm_with_fused_epilogue(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float32)
    c = np.full((M, N), np.nan, np.float16)
    gemm_masked_epilogue[(metile.cdiv(M, 32), metile.cdiv(N, 32))](
        a, b, bias, c, M, N, K, 0.5, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    y = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + bias
    want = np.where(y > 0, y, 0.0) + 0.5 * y / (1.0 + np.exp(-y))
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=5e-3, atol=5e-3)


@metile.kernel
def gemm_swizzled(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                  BLOCK_K: metile.constexpr, GROUP: metile.constexpr):
    pid_m, pid_n = metile.tile_swizzle(metile.program_id(0), metile.program_id(1), "morton", GROUP)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


def test_gemm_on_a_swizzled_odd_grid(device, rng):
    M, N, K = 80, 112, 32
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    gemm_swizzled[(metile.cdiv(M, 16), metile.cdiv(N, 16))](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16,
                                                            GROUP=2)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3, atol=2e-2)


GEMM_PARAMS = [("A", "ptr", "f32"), ("B", "ptr", "f32"), ("C", "ptr", "f32"), ("M", "scalar", "i32"),
               ("N", "scalar", "i32"), ("K", "scalar", "i32")]


def _traced(dtype, blocks=(64, 64, 32)):
    params = [(n, k, "f16" if n in "AB" and dtype == "f16" else d) for n, k, d in GEMM_PARAMS]
    constexprs = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), blocks), DT=dtype)
    return _frontend.specialize(gemm.fn, params, constexprs, {})


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_apple_gemm_uses_simdgroup_matrices(dtype):
    msl = _metile.compile_msl(_traced(dtype))["msl"]
    assert "simdgroup_multiply_accumulate(" in msl
    assert "thread_elements()" in msl


@pytest.mark.parametrize("dtype, atom", [("f16", "m16n8k16.row.col.f32.f16.f16.f32"),
                                         ("bf16", "m16n8k16.row.col.f32.bf16.bf16.f32")])
def test_nvidia_gemm_uses_mma_sync(dtype, atom):
    src = _metile.compile_cuda(_traced(dtype), arch="sm_80")["cuda"]
    assert f"mma.sync.aligned.{atom}" in src
    assert "wgmma" not in src
    assert f"mma.sync.aligned.{atom}" in _metile.compile_cuda(_traced(dtype), arch="sm_90", wgmma=False)["cuda"]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_h100_gemm_uses_wgmma_on_swizzled_shared_memory(dtype):
    ty = {"f16": "f16", "bf16": "bf16"}[dtype]
    src = _metile.compile_cuda(_traced(dtype, (128, 128, 64)), arch="sm_90", num_sgs=8)["cuda"]
    # Two warpgroups, each an m64n128 tile: four k16 steps of one wgmma.
    assert src.count(f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{ty}.{ty}") == 4
    assert "mma.sync" not in src and "ldmatrix" not in src
    # a is K-major with a 128-byte swizzle (8 rows of 128 bytes per 1024); b N-major (transposed),
    # its 64-column blocks 64 rows of 128 bytes apart.
    assert "16, 1024, 1))" in src and "8192, 1024, 1))" in src
    assert "p, 1, 1, 0, 1;" in src
    assert "__align__(1024)" in src and "fence.proxy.async.shared::cta" in src
    assert "wgmma.wait_group.sync.aligned 0;" in src


def test_wgmma_needs_a_warpgroup_and_swizzlable_rows():
    # 64 threads are no warpgroup; rows of 24 f16 (48 bytes) fit no swizzle: mma.sync takes both.
    assert "wgmma" not in _metile.compile_cuda(_traced("f16", (64, 64, 32)), arch="sm_90", num_sgs=2)["cuda"]
    src = _metile.compile_cuda(_traced("f16", (64, 24, 32)), arch="sm_90", num_sgs=4)["cuda"]
    assert "wgmma" not in src and "mma.sync" in src


def test_shapes_without_an_atom_take_the_generic_path():
    # f32 on NVIDIA (tf32 would change results), and a tile that is no multiple of the atom.
    assert "mma.sync" not in _metile.compile_cuda(_traced("f32"), arch="sm_90")["cuda"]
    assert "mma.sync" not in _metile.compile_cuda(_traced("f16", (24, 20, 16)), arch="sm_90")["cuda"]
    assert "mma.sync" not in _metile.compile_cuda(_traced("f16"), arch="sm_75")["cuda"]
    assert "simdgroup_multiply_accumulate" not in _metile.compile_msl(_traced("f16", (12, 8, 8)))["msl"]


def test_tf32_is_opt_in_and_uses_the_tf32_atom():
    traced = _traced("f32")
    assert "mma.sync" not in _metile.compile_cuda(traced, arch="sm_90")["cuda"]
    src = _metile.compile_cuda(traced, arch="sm_80", tf32=True)["cuda"]
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in src
    assert "cvt.rna.tf32.f32" in src
    assert _metile.compile_cuda(traced, arch="sm_90", tf32=True, wgmma=False)["cuda"].count("m16n8k8") > 1
    # The H100 multiplies the transposed product, b's fragments in registers: tf32 wgmma reads
    # threadgroup operands only K-major.
    src = _metile.compile_cuda(traced, arch="sm_90", tf32=True)["cuda"]
    assert re.search(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k8\.f32\.tf32\.tf32", src) and "mma.sync" not in src
    assert 'asm volatile("" :: "f"(' in src
    # Apple GPUs have no tf32: the switch changes nothing there.
    assert _metile.compile_msl(traced, tf32=True)["msl"] == _metile.compile_msl(traced)["msl"]


@pytest.mark.parametrize("M, N, K", [(64, 64, 64), (37, 70, 41)])
def test_tf32_gemm_agrees_within_tf32_rounding(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    gemm[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, DT="f32",
                                                    tf32=True)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-2, atol=1e-2 * np.sqrt(K))


PASS_SETTINGS = [{"matrix_atoms": False}, {"prefetch": True}, {"prefetch": False}, {"pad_dot_scratch": False},
                 {"ldmatrix": False}, {"serpentine": False}, {"occupancy": False}, {"tma": False}]


@pytest.mark.parametrize("passes", PASS_SETTINGS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()))
def test_every_pass_setting_gives_the_same_gemm(device, rng, passes):
    M, N, K = 45, 70, 50
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    gemm[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, **passes)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3, atol=2e-2)


def test_passes_change_the_emitted_code():
    traced = _traced("f16")
    cuda = lambda **p: _metile.compile_cuda(traced, arch="sm_90", **{"wgmma": False, **p})["cuda"]  # noqa: E731
    assert "wgmma" in cuda(wgmma=True) and "wgmma" not in cuda()
    assert "ldmatrix" in cuda() and "ldmatrix" not in cuda(ldmatrix=False)
    assert "mma.sync" not in cuda(matrix_atoms=False)
    assert "cp.async" in cuda() and "cp.async" not in cuda(async_copy=False)
    assert cuda(prefetch=True, async_copy=False) != cuda(async_copy=False) and cuda(pad_dot_scratch=False) != cuda()
    assert cuda(serpentine=False) != cuda()
    assert "__launch_bounds__(256, 2)" in cuda() and "__launch_bounds__(256)" in cuda(occupancy=False)
    msl = lambda **p: _metile.compile_msl(traced, **p)["msl"]  # noqa: E731
    assert msl(prefetch=False) != msl()
    assert "simdgroup_multiply_accumulate" not in msl(matrix_atoms=False)
    # Apple GPUs and NVIDIA GPUs before the H100 have no wgmma: the switch changes nothing there.
    assert msl(wgmma=True) == msl()
    a100 = lambda **p: _metile.compile_cuda(traced, arch="sm_80", **p)["cuda"]  # noqa: E731
    assert a100(wgmma=True) == a100() and a100(tma=True) == a100()
    assert msl(tma=True) == msl()


def test_pass_switches_are_checked():
    x = np.zeros((16, 16), np.float16)
    c = np.zeros((16, 16), np.float32)
    with pytest.raises(TypeError, match="the launch option prefetch switches a pass on or off and must be True or "
                                        "False, got 1"):
        gemm[(1, 1)](x, x, c, 16, 16, 16, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, prefetch=1)
    with pytest.raises(TypeError, match="unknown keyword argument 'prefetching'.*launch options num_sgs, "
                                        "matrix_atoms, prefetch"):
        gemm[(1, 1)](x, x, c, 16, 16, 16, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, prefetching=True)
    with pytest.raises(ValueError, match="tf32 switches a pass on or off and must be True or False, got 'yes'"):
        metile.Config(BLOCK_M=16, tf32="yes")
    with pytest.raises(TypeError, match="unknown pass 'fast'"):
        _metile.compile_cuda(_traced("f16"), fast=True)
    launcher = gemm[(1, 1)].configure(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, prefetch=False)
    with pytest.raises(TypeError, match="multiple values for the launch option prefetch"):
        launcher(x, x, c, 16, 16, 16, prefetch=True)
    cfg = metile.Config(BLOCK_M=16, num_sgs=2, prefetch=False)
    assert dict(cfg) == {"BLOCK_M": 16, "num_sgs": 2, "prefetch": False}


def test_operands_too_big_to_stage_at_once_go_through_in_k_chunks(device, rng):
    # 64x128 and 128x64 f32 operands exceed Apple's 32 KiB: the atom path stages k in chunks.
    _run_gemm(rng, 64, 64, 256, "f32", (64, 64, 128))


def test_atom_staging_that_cannot_fit_falls_back_to_the_generic_path(device, rng):
    # One 8-wide k step of a 1024-row f32 tile and of b passes Apple's 32 KiB; the generic
    # path stages fewer k at a time and still runs.
    msl = _metile.compile_msl(_traced("f32", (1024, 64, 8)), num_sgs=32)["msl"]
    assert "simdgroup_multiply_accumulate" not in msl
    _run_gemm(rng, 1024, 64, 16, "f32", (1024, 64, 8), num_sgs=32)


def test_dot_plan_reports_the_atom_path():
    apple = _metile.dot_plan(64, 64, 32, "f16", 4)
    assert apple["atom"] == "simdgroup8x8" and apple["warps"] == (2, 2) and apple["bank_conflicts"] == (1, 1)
    nv = _metile.dot_plan(128, 128, 32, "bf16", 8, arch="sm_80")
    assert nv["atom"] == "m16n8k16" and nv["warps"][0] * nv["warps"][1] == 8
    h100 = _metile.dot_plan(128, 128, 64, "bf16", 8, arch="sm_90")
    assert h100["atom"] == "wgmma.m64k16" and h100["warps"] == (2, 1) and h100["reads_per_mma"] == 0
    assert _metile.dot_plan(128, 128, 32, "f32", 8, arch="sm_90") is None
    assert _metile.dot_plan(128, 128, 32, "f32", 8, arch="sm_80", tf32=True)["atom"] == "m16n8k8.tf32"
    assert _metile.dot_plan(128, 128, 32, "f32", 8, arch="sm_90", tf32=True)["atom"] == "wgmma.m64k8.tf32"
    assert _metile.dot_plan(12, 8, 8, "f32", 1) is None
    with pytest.raises(ValueError, match="unknown dtype 'f8'"):
        _metile.dot_plan(64, 64, 32, "f8", 4)


@metile.kernel
def gemm_onto_c(A, B, C, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    """C += A @ B for one tile, the accumulator starting from C in f32."""
    acc = metile.tile_load(C, 0, 0, BN, (BM, BN))
    for k0 in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, 0, k0, K, (BM, BK))
        b = metile.tile_load(B, k0, 0, BN, (BK, BN))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, 0, 0, BN, acc, (BM, BN))


def test_an_f32_accumulator_conversion_leaves_room_for_f16_staging(device, rng):
    # Converting the 96x96 f32 accumulator through threadgroup memory used to take all of Apple's
    # 32 KiB, leaving none for staging the f16 operands.
    a = rng.standard_normal((96, 64)).astype(np.float16)
    b = rng.standard_normal((64, 96)).astype(np.float16)
    c = rng.standard_normal((96, 96)).astype(np.float32)
    want = c + a.astype(np.float64) @ b.astype(np.float64)
    gemm_onto_c[(1,)](a, b, c, 64, BM=96, BN=96, BK=32, num_sgs=2)
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=2e-2)
