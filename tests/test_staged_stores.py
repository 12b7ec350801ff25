"""Staged stores (`stage_stores`): a matrix accumulator is stored through threadgroup memory
in the blocked layout's 16-byte runs instead of its own two-element runs; on a GPU with an
operand ring the exchange reuses the ring's memory once the K loop is done. Results never
depend on the switch: the same values reach the same addresses."""

import re

import numpy as np
import pytest
from test_gemm import gemm_masked_epilogue
from test_tma import gemm_persistent

import metile
from metile import _frontend, _metile
from metile.testing import reference_kernels as rk


def _params(c_dtype, hinted=True):
    ints = [(n, "scalar", "i32", 16) if hinted else (n, "scalar", "i32") for n in "MNK"]
    return [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", c_dtype), *ints]


def _cuda(blocks=(128, 128, 64), c_dtype="f16", num_sgs=8, hinted=True, **options):
    constexprs = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), blocks))
    traced = _frontend.specialize(rk.gemm_bounded.fn, _params(c_dtype, hinted), constexprs, {})
    return _metile.compile_cuda(traced, arch="sm_90", num_sgs=num_sgs, **options)["cuda"]


def _stores_to_c(src, lanes):
    """Vector stores into C per path (interior tiles unmasked, edge tiles masked)."""
    return len(re.findall(rf"\*\(\(metile_vec<(half|float), {lanes}>\*\)\(C \+", src)) / 2


@pytest.mark.parametrize("options", [{}, {"tma": False}, {"wgmma": False}])
def test_accumulators_are_stored_in_16_byte_runs_through_the_rings_memory(options):
    src = _cuda(**options)
    # The exchange's memory is the ring's (an alias at the same offset): no more shared memory.
    assert len(re.findall(r"half\* tg\d+ = reinterpret_cast<half\*>\(metile_smem \+ 0\);", src)) == 2
    assert _stores_to_c(src, 8) == 128 * 128 // 256 // 8 and _stores_to_c(src, 2) == 0
    direct = _cuda(stage_stores=False, **options)
    assert _stores_to_c(direct, 8) == 0 and _stores_to_c(direct, 2) > 0
    assert direct.count("__syncthreads();") < src.count("__syncthreads();")


def test_tensor_copy_rings_are_handed_back_behind_a_proxy_fence_and_a_barrier():
    # A loop around the K loop fills the ring again with tensor copies after the exchange.
    src = _cuda()
    epilogue = src[src.index("wgmma.wait_group.sync.aligned 0;"):]
    last_read = epilogue.rindex("tg3 + ")
    assert "fence.proxy.async.shared::cta" in epilogue[last_read:]
    assert "__syncthreads();" in epilogue[last_read:]


def test_a_tile_larger_than_the_ring_goes_in_chunks_of_rows():
    # f32 128x256 outputs take 132 KiB of padded rows; a 32-deep ring has 96 KiB.
    src = _cuda(blocks=(128, 256, 32), c_dtype="f32")
    assert "reinterpret_cast<float*>(metile_smem + 0)" in src
    epilogue = src[src.index("wgmma.wait_group.sync.aligned 0;"):]
    assert epilogue.count("__syncthreads();") == 5
    assert _stores_to_c(src, 4) == 128 * 256 // 256 // 4


def test_rows_of_unknown_alignment_are_stored_along_the_row_by_consecutive_threads():
    # N unknown to divide by 8: no 16-byte run of C is aligned, but the exchange still puts a warp's
    # 32 lanes on 32 consecutive elements of one row (the accumulator's layout spreads them over 8).
    src = _cuda(hinted=False)
    assert len(re.findall(r"reinterpret_cast<half\*>\(metile_smem \+ 0\)", src)) == 2
    assert _stores_to_c(src, 8) == 0 and _stores_to_c(src, 2) == 0
    assert len(re.findall(r"\bC\[", src)) == 128 * 128 // 256
    direct = _cuda(hinted=False, stage_stores=False)
    assert len(re.findall(r"reinterpret_cast<half\*>\(metile_smem \+ 0\)", direct)) == 1


def test_apple_gpus_keep_direct_stores_unless_asked():
    traced = _frontend.specialize(rk.gemm_bounded.fn, _params("f32"), {"BLOCK_M": 32, "BLOCK_N": 32,
                                                                       "BLOCK_K": 16}, {})
    default = _metile.compile_msl(traced)["msl"]
    assert default == _metile.compile_msl(traced, stage_stores=False)["msl"]
    staged = _metile.compile_msl(traced, stage_stores=True, async_copy=True)["msl"]
    # Metal has no aliasing of threadgroup parameters: the alias is a cast of the ring's pointer.
    assert "reinterpret_cast<threadgroup float*>(tg0)" in staged
    assert staged.count("[[threadgroup(") == default.count("[[threadgroup(")
    assert "float4" in staged and "float4" not in default


def _tiles(device):
    if device == "cuda":
        return [((128, 256, 64), 8, {}), ((128, 256, 32), 8, {}), ((128, 128, 32), 8, {"wgmma": False}),
                ((64, 64, 32), 4, {"tma": False})]
    return [((32, 32, 16), None, {}), ((64, 64, 16), None, {"async_copy": True}),
            ((128, 128, 16), None, {"async_copy": False})]


def _launch(device, kernel, grid, args, blocks, sgs, options, staged):
    bm, bn, bk = blocks
    extra = {} if device == "cpu" else {"stage_stores": staged, **options}
    if sgs is not None:
        extra["num_sgs"] = sgs
    kernel[grid](*args, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **extra)


# N odd or even but no multiple of 4: rows of unknown alignment, stored element by element.
@pytest.mark.parametrize("M, N, K", [(200, 136, 72), (130, 264, 40), (16, 8, 24), (256, 256, 64), (200, 131, 72),
                                     (70, 262, 40)])
@pytest.mark.parametrize("c_dtype", [np.float16, np.float32])
def test_staged_and_direct_stores_write_the_same(device, rng, M, N, K, c_dtype):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for blocks, sgs, options in _tiles(device):
        grid = (metile.cdiv(M, blocks[0]), metile.cdiv(N, blocks[1]))
        out = []
        for staged in (True, False):
            c = np.full((M + 1, N), np.nan, c_dtype)
            _launch(device, rk.gemm_bounded, grid, (a, b, c, M, N, K), blocks, sgs, options, staged)
            # Rows past M are not written.
            assert np.isnan(c[M]).all()
            out.append(c[:M])
        np.testing.assert_array_equal(out[0], out[1])
        np.testing.assert_allclose(out[0], want, rtol=2e-2, atol=2e-2 * np.sqrt(K))


def test_the_seed_tile_store_is_staged_too(device, rng):
    # The seed GEMM's unbounded tile_store (sides multiples of the tile; a run-time alignment
    # test picks its vector path), staged and direct.
    M, N, K = 256, 256, 128
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    for blocks, sgs, options in _tiles(device):
        grid = (M // blocks[0], N // blocks[1])
        out = []
        for staged in (True, False):
            c = np.full((M, N), np.nan, np.float32)
            _launch(device, rk.gemm, grid, (a, b, c, M, N, K), blocks, sgs, options, staged)
            out.append(c)
        np.testing.assert_array_equal(out[0], out[1])
        np.testing.assert_allclose(out[0], a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3, atol=2e-2)
    traced = _frontend.specialize(rk.gemm.fn, _params("f32"), {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}, {})
    src = _metile.compile_cuda(traced, arch="sm_90", num_sgs=8)["cuda"]
    # One path of 16-byte stores (the fallback for unaligned launches stores element by element).
    assert 2 * _stores_to_c(src, 4) == 128 * 128 // 256 // 4


def test_masked_epilogue_is_staged_after_its_math(device, rng):
    M, N, K = 150, 200, 48
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bias = rng.standard_normal(N).astype(np.float32)
    y = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + bias
    want = np.where(y > 0, y, 0.0) + 0.5 * y / (1.0 + np.exp(-y))
    for blocks, sgs, options in _tiles(device):
        grid = (metile.cdiv(M, blocks[0]), metile.cdiv(N, blocks[1]))
        out = []
        for staged in (True, False):
            c = np.full((M, N), np.nan, np.float16)
            _launch(device, gemm_masked_epilogue, grid, (a, b, bias, c, M, N, K, 0.5), blocks, sgs, options,
                    staged)
            out.append(c)
        np.testing.assert_array_equal(out[0], out[1])
        np.testing.assert_allclose(out[0], want, rtol=2e-2, atol=5e-2)


def test_a_persistent_gemm_stages_each_tile_in_its_ring(device, rng):
    # The ring is filled again for the next tile after each exchange.
    M, N, K = 300, 264, 200
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    bm, bn, bk = (128, 128, 64) if device == "cuda" else (32, 32, 16)
    tiles_n = metile.cdiv(N, bn)
    tiles = metile.cdiv(M, bm) * tiles_n
    extra = {} if device == "cpu" else {"stage_stores": True}
    if device == "cuda":
        extra["num_sgs"] = 8
    c = np.full((M, N), np.nan, np.float32)
    gemm_persistent[(3,)](a, b, c, M, N, K, tiles, tiles_n, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **extra)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=2e-3, atol=2e-2)
