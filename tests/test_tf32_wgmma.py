"""tf32 `dot` (`tf32=True`) on the H100's warpgroup MMA. tf32 `wgmma` reads threadgroup operands
only K-major, and `b` is N-major, so `dot` multiplies the transposed product: `a`'s tile is the
threadgroup operand, `b`'s fragments are read into registers. Other devices run the same launches
(the switch changes nothing where there is no tf32) and agree with the reference as well."""

import re

import numpy as np
import pytest
from test_gemm import gemm_masked_epilogue

import metile
from metile import _frontend, _metile
from metile.testing import reference_kernels as rk

F32_GEMM = [("A", "ptr", "f32"), ("B", "ptr", "f32"), ("C", "ptr", "f32"), ("M", "scalar", "i32"),
            ("N", "scalar", "i32"), ("K", "scalar", "i32")]


def _cuda(blocks, num_sgs=8, **options):
    constexprs = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), blocks))
    traced = _frontend.specialize(rk.gemm_bounded.fn, F32_GEMM, constexprs, {})
    return _metile.compile_cuda(traced, arch="sm_90", num_sgs=num_sgs, tf32=True, **options)["cuda"]


def test_the_transposed_product_reads_b_into_registers():
    src = _cuda((256, 128, 32))
    # The rows of C are the wgmma's n: one m64n256k8 per k8 step and warpgroup.
    assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in src
    # Each iteration issues two groups, reading one half's fragments while the other runs, and
    # every wait holds the registers the retired group read.
    assert src.count("wgmma.commit_group") == 2
    assert re.search(r'asm volatile\("" :: "f"\(r\d+\[\d+\]\) : "memory"\);', src)
    # 32 tf32 columns are 128 bytes: tensor copies fill the ring.
    assert "metile_tma_load(tg" in src
    assert "metile_tma_load(tg" not in _cuda((256, 128, 32), tma=False)


def test_tiles_the_transposed_product_does_not_fit():
    # Its atoms span 64 columns of C; 96 columns go to mma.sync, as does everything without wgmma.
    assert "wgmma" not in _cuda((128, 96, 32)) and "m16n8k8" in _cuda((128, 96, 32))
    assert "wgmma" not in _cuda((128, 128, 32), wgmma=False)
    # f32 without the switch stays exact: no tensor cores at all.
    traced = _frontend.specialize(rk.gemm_bounded.fn, F32_GEMM, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, {})
    assert "mma" not in _metile.compile_cuda(traced, arch="sm_90", num_sgs=8)["cuda"]


def _check(c, a, b):
    want = a.astype(np.float64) @ b.astype(np.float64)
    # tf32 keeps 10 of each input's mantissa bits (the tensor cores truncate the rest).
    np.testing.assert_allclose(c, want, rtol=1e-2, atol=5e-3 * np.sqrt(a.shape[1]))


# Tiles with two warpgroups (tensor copies or not), one warpgroup, and one k8 step an iteration
# (one group, waited for at once).
CUDA_TILES = [((256, 128, 32), 8, {}), ((128, 128, 32), 8, {"tma": False}), ((64, 64, 32), 4, {}),
              ((128, 64, 8), 4, {})]


@pytest.mark.parametrize("M, N, K", [(300, 260, 200), (257, 130, 333), (37, 70, 41), (128, 64, 8)])
@pytest.mark.parametrize("blocks, num_sgs, opts", CUDA_TILES)
def test_tf32_gemm(device, rng, M, N, K, blocks, num_sgs, opts):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    if device != "cuda":
        if (blocks, num_sgs, opts) != CUDA_TILES[0]:
            pytest.skip("the tiles differ on the H100 only: elsewhere one 32x32x16 launch covers the shape")
        blocks, opts = (32, 32, 16), {}
    bm, bn, bk = blocks
    rk.gemm_bounded[(metile.cdiv(M, bm), metile.cdiv(N, bn))](
        a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, tf32=True,
        **({"num_sgs": num_sgs, **opts} if device == "cuda" else {}))
    _check(c, a, b)


@pytest.mark.parametrize("M, N, K", [(256, 128, 96), (70, 150, 45)])
def test_tf32_seed_and_triton_style_gemms(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    cuda = device == "cuda"
    bm, bn, bk = (128, 128, 32) if cuda else (32, 32, 16)
    opts = {"num_sgs": 8, "tf32": True} if cuda else {"tf32": True}
    grid = (metile.cdiv(M, bm), metile.cdiv(N, bn))
    if M % bm == 0 and N % bn == 0 and K % bk == 0:
        c = np.full((M, N), np.nan, np.float32)
        rk.gemm[grid](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **opts)
        _check(c, a, b)
    bias = rng.standard_normal(N).astype(np.float32)
    out = np.full((M, N), np.nan, np.float16)
    gemm_masked_epilogue[grid](a, b, bias, out, M, N, K, 0.5, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **opts)
    y = 0.5 * (a.astype(np.float64) @ b) + bias
    want = np.where(y > 0, y, 0.0) + 0.5 * y / (1.0 + np.exp(-y))
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-2, atol=2e-2 * np.sqrt(K))
