"""The asynchronous operand ring (`async_copy`): a GEMM loop whose `dot`
operands are single loads keeps them in a ring of threadgroup stages filled
several iterations ahead (cp.async on NVIDIA, plain copies on Apple GPUs).
Results must not depend on the switch: same products for loops shorter than
the ring, longer ones that wrap it many times, ragged and unaligned edges
(which copy through registers), and a ring reused by an enclosing loop."""

import re

import numpy as np
import pytest

import metile
from metile import _frontend, _metile
from metile.testing import reference_kernels as rk


def _product(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


def _check(c, a, b, tol=2e-3):
    np.testing.assert_allclose(c, _product(a, b), rtol=tol, atol=tol * np.sqrt(a.shape[1]))


@pytest.mark.parametrize("async_copy", [False, True])
@pytest.mark.parametrize("M, N, K", [(64, 64, 512), (67, 45, 83), (5, 130, 17), (128, 96, 16), (33, 65, 200)])
def test_bounded_gemm_through_the_ring(device, rng, async_copy, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    rk.gemm_bounded[(metile.cdiv(M, 64), metile.cdiv(N, 32))](
        a, b, c, M, N, K, BLOCK_M=64, BLOCK_N=32, BLOCK_K=16, num_sgs=4, async_copy=async_copy)
    _check(c, a, b)


@pytest.mark.parametrize("K", [16, 48, 256])
def test_seed_gemm_through_the_ring(device, rng, K):
    # Unbounded tile_load: aligned rows copy as vectors.
    M, N = 64, 96
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    rk.gemm[(M // 32, N // 32)](a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, async_copy=True)
    _check(c, a, b)


def test_rows_that_break_vector_alignment_copy_through_registers(device, rng):
    # K = 37 puts every row of a at an odd element offset: no 4-byte copies.
    M, N, K = 48, 40, 37
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    rk.gemm_bounded[(metile.cdiv(M, 16), metile.cdiv(N, 16))](
        a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, async_copy=True)
    _check(c, a, b)


@metile.kernel
def masked_gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    rm = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    rk_ = metile.arange(0, BLOCK_K)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.load(A + rm[:, None] * K + (k + rk_)[None, :],
                        mask=(rm[:, None] < M) & ((k + rk_)[None, :] < K), other=0.0)
        b = metile.load(B + (k + rk_)[:, None] * N + rn[None, :],
                        mask=((k + rk_)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
    metile.store(C + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("M, N, K", [(64, 64, 128), (70, 33, 100)])
def test_triton_style_masked_gemm_through_the_ring(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    masked_gemm[(metile.cdiv(M, 32), metile.cdiv(N, 32))](
        a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, async_copy=True)
    _check(c, a, b)


@metile.kernel
def batched_gemm(A, B, C, BATCH, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                 BLOCK_K: metile.constexpr):
    """Every program multiplies all batches: the ring is refilled by each pass of the outer loop."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    for z in range(0, BATCH):
        acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
        for k in metile.tile_range(0, K, BLOCK_K):
            a = metile.tile_load(A, z * M + pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(z * M + M, K))
            b = metile.tile_load(B, z * K + k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(z * K + K, N))
            acc = metile.dot(a, b, acc)
        metile.tile_store(C, z * M + pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N),
                          bounds=(z * M + M, N))


def test_ring_reused_by_an_enclosing_loop(device, rng):
    batch, M, N, K = 3, 32, 48, 80
    a = rng.standard_normal((batch * M, K)).astype(np.float16)
    b = rng.standard_normal((batch * K, N)).astype(np.float16)
    c = np.full((batch * M, N), np.nan, np.float32)
    batched_gemm[(1, metile.cdiv(N, 32))](a, b, c, batch, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16,
                                         async_copy=True)
    for z in range(batch):
        _check(c[z * M:(z + 1) * M], a[z * M:(z + 1) * M], b[z * K:(z + 1) * K])


@pytest.mark.parametrize("M, N, K", [(64, 64, 96), (37, 70, 41)])
def test_tf32_gemm_through_the_ring(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    rk.gemm_bounded[(metile.cdiv(M, 32), metile.cdiv(N, 32))](
        a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, tf32=True, async_copy=True)
    # tf32 keeps 10 mantissa bits of each input (NVIDIA); other targets are exact.
    _check(c, a, b, tol=5e-3)


def _traced(dtype="f16", blocks=(128, 128, 32), divisible=True, by=16):
    ints = [("M", "scalar", "i32", by), ("N", "scalar", "i32", by), ("K", "scalar", "i32", by)]
    if not divisible:
        ints = [p[:3] for p in ints]
    params = [("A", "ptr", dtype), ("B", "ptr", dtype), ("C", "ptr", "f32"), *ints]
    constexprs = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K"), blocks))
    return _frontend.specialize(rk.gemm_bounded.fn, params, constexprs, {})


def _loop(src):
    """The emitted K loop, from its header to the end of the kernel."""
    return src[src.index("for (long"):]


def _loop_body(src):
    """The emitted K loop, from its header to its closing brace."""
    start = src.index("for (long")
    depth = 0
    for i in range(src.index("{", start), len(src)):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[start:i + 1]
    raise AssertionError("unbalanced braces")


def test_nvidia_ring_waits_once_per_iteration():
    src = _metile.compile_cuda(_traced(), arch="sm_90", num_sgs=8)["cuda"]
    loop = _loop_body(src)
    # 128x128x32 f16 stages take 19 KiB: four fit half of the H100's shared memory.
    assert "cp.async.wait_group 2;" in loop
    assert loop.count("__syncthreads()") == 1
    assert loop.count("cp.async.commit_group") == 1
    assert len(re.findall(r"cp\.async\.commit_group", src)) == 4
    assert "cp.async.cg.shared.global" in loop
    assert "153600 bytes" not in src
    # sm_75 has no cp.async, and the switch turns the ring off.
    assert "cp.async" not in _metile.compile_cuda(_traced(), arch="sm_75", num_sgs=8)["cuda"]
    assert "cp.async" not in _metile.compile_cuda(_traced(), arch="sm_90", num_sgs=8, async_copy=False)["cuda"]


def test_sides_that_are_multiples_of_8_copy_16_bytes_at_a_time():
    # N = 3000 is a multiple of 8, not 16: eight f16 elements still make an aligned 16-byte copy.
    loop = _loop(_metile.compile_cuda(_traced(by=8), arch="sm_90", num_sgs=8)["cuda"])
    assert "cp.async.cg.shared.global" in loop
    loop = _loop(_metile.compile_cuda(_traced(divisible=False), arch="sm_90", num_sgs=8)["cuda"])
    assert "cp.async.cg.shared.global" not in loop


def test_rows_too_narrow_to_copy_are_stored_into_the_stage_by_runs():
    # f16 rows of odd length: every element is loaded alone. Into a swizzled wgmma stage the
    # threads store whole 16-byte runs of their tile (each run's swizzled index computed once);
    # into mma.sync's padded rows they keep the narrow layout that reads consecutive elements.
    traced = _traced(blocks=(128, 128, 64), divisible=False)
    wgmma = _loop_body(_metile.compile_cuda(traced, arch="sm_90", num_sgs=8, tma=False)["cuda"])
    assert len(re.findall(r"\*\(\(metile_vec<half, 8>\*\)\(tg0 \+", wgmma)) == 8
    mma = _loop_body(_metile.compile_cuda(traced, arch="sm_90", num_sgs=8, wgmma=False)["cuda"])
    assert "metile_vec<half, 8>*)(tg0" not in mma and re.search(r"\btg0\[[^]]+\] = ", mma)


def test_edge_tiles_stay_on_the_ring_with_zero_filled_copies():
    # A masked row or column past M, N or K copies zero source bytes and fills the stage with zeros:
    # no register path for the edge tiles, and no 2-byte copies.
    loop = _loop(_metile.compile_cuda(_traced(by=8), arch="sm_90", num_sgs=8)["cuda"])
    assert re.search(r"cp\.async\.cg\.shared\.global \[%0\], \[%1\], 16, %2;", loop)
    assert "cp.async.ca" not in loop


@pytest.mark.parametrize("blocks, num_sgs", [
    ((64, 32, 32), 4), ((64, 16, 16), 4), ((128, 128, 128), 8), ((64, 256, 64), 4), ((192, 64, 32), 4),
    ((128, 64, 64), 8), ((128, 256, 32), 8),
])
def test_wgmma_tiles_and_swizzles(device, rng, blocks, num_sgs):
    # On the H100 each tile takes a different wgmma plan: 32- and 64-byte swizzles (b rows of 16 and
    # 32 elements), several 128-byte blocks per row (k = 128, n = 256), three m64 tiles a warpgroup,
    # one warpgroup per 64 columns, and the overlapped loop; M, N, K ragged. Elsewhere the same
    # products run on the target's own atoms.
    if device != "cuda" and blocks[0] * blocks[1] > 64 * 64:
        pytest.skip("large tiles are for the H100's wgmma")
    bm, bn, bk = blocks
    M, N, K = 2 * bm + 8, bn + 8, 3 * bk + 16
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    rk.gemm_bounded[(metile.cdiv(M, bm), metile.cdiv(N, bn))](
        a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_sgs=num_sgs)
    _check(c, a, b)


def test_wgmma_overlaps_the_next_iteration_and_releases_stages_through_memory_barriers():
    # The loop waits for all but its own wgmma group (that one after the loop), then releases the
    # previous iteration's stage on its empty barrier; the refill waits for that release.
    src = _metile.compile_cuda(_traced(blocks=(128, 256, 32)), arch="sm_90", num_sgs=8)["cuda"]
    loop = _loop(src)
    wait = loop.index("wgmma.wait_group.sync.aligned 1;")
    after = loop[wait:]
    assert "wgmma.wait_group.sync.aligned 0;" in after
    assert "wgmma.mma_async" not in after[after.index("wgmma.wait_group.sync.aligned 0;"):]
    assert after.index("metile_mbarrier_arrive(") < after.index("metile_mbarrier_wait(")
    assert loop.index("metile_mbarrier_wait(") < loop.index("wgmma.mma_async")
    # Only tiles the threads copied themselves need the barrier before the wgmmas.
    assert _loop_body(src).count("__syncthreads();") == 1
    assert re.search(r'if \(v\d+\) \{\s*asm volatile\("fence.proxy.async.shared::cta;" ::: "memory"\);\s*'
                     r'__syncthreads\(\);\s*\}', loop)
    # The zeros reach the accumulators through asm moves (ptxas would serialize the wgmmas).
    assert 'asm volatile("mov.b32 %0, %1;" : "=f"(' in src
    # 128x128x64 on 8 warps: three 32 KiB stages, six barriers and three release counts keep two
    # blocks per SM.
    src = _metile.compile_cuda(_traced(blocks=(128, 128, 64)), arch="sm_90", num_sgs=8)["cuda"]
    assert "wgmma.wait_group.sync.aligned 1;" in src
    assert "98368 bytes of shared memory" in src


def test_wgmma_accumulators_narrow_in_pairs():
    # f16 output: two accumulators become one f16x2 (ptxas serializes overlapped wgmmas whose
    # accumulators are later converted one at a time).
    src = _metile.compile_cuda(_traced(blocks=(128, 256, 64)), arch="sm_90", num_sgs=8)["cuda"]
    assert "metile_narrow2<half>(" not in src  # C is f32 here
    params = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f16"),
              *[(n, "scalar", "i32", 16) for n in "MNK"]]
    constexprs = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}
    traced = _frontend.specialize(rk.gemm_bounded.fn, params, constexprs, {})
    src = _metile.compile_cuda(traced, arch="sm_90", num_sgs=8)["cuda"]
    epilogue = _loop(src).split("wgmma.wait_group.sync.aligned 0;")[1]
    assert epilogue.count("metile_narrow2<half>(") >= 64 and "metile_vec<half, 2>(" not in epilogue


@metile.kernel
def scale_rows(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    x = metile.load(X + row * N + cols, mask=cols < N, other=0.0)
    metile.store(Out + row * N + cols, 2.0 * x, mask=cols < N)


def test_sides_divisible_by_8_get_their_own_specialisation():
    for n in (24, 40, 48, 20):  # by 8 (twice), by 16, neither: three specialisations
        x = np.arange(3 * n, dtype=np.float32).reshape(3, n)
        out = np.zeros_like(x)
        scale_rows[(3,)](x, out, n, BLOCK=64)
        np.testing.assert_array_equal(out, 2 * x)
    assert scale_rows.cache_info()["specializations"] == 3


def test_ring_depth_follows_the_shared_memory():
    # 128x128x64 f16 stages take 36 KiB: three fit half of the H100's shared memory.
    src = _metile.compile_cuda(_traced(blocks=(128, 128, 64)), arch="sm_90", num_sgs=8)["cuda"]
    assert "cp.async.wait_group 1;" in _loop(src)
    # On an A10-class GPU (99 KiB) two stages fit half.
    src = _metile.compile_cuda(_traced(blocks=(128, 128, 64)), arch="sm_86", num_sgs=8)["cuda"]
    assert "cp.async.wait_group 0;" in _loop(src)


def test_apple_ring_is_opt_in_and_copies_synchronously():
    traced = _traced(blocks=(64, 64, 32))
    plain = _metile.compile_msl(traced, num_sgs=4)["msl"]
    ring = _metile.compile_msl(traced, num_sgs=4, async_copy=True)["msl"]
    assert plain != ring
    assert _loop_msl(ring).count("threadgroup_barrier") == 1
    assert _loop_msl(plain).count("threadgroup_barrier") == 2


def _loop_msl(src):
    return src[src.index("for (int c"):] if "for (int c" in src else src[src.index("for ("):]
