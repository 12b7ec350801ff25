"""Tensor copies (`tma`): on the H100 the wgmma operand ring is filled by the tensor
memory accelerator where a load reads a block of a row-major matrix the runtime can
describe; elsewhere, and for launches whose arguments it cannot describe (a row pitch
not a multiple of 16 bytes), the threads copy. Results never depend on which."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from test_gemm import gemm_masked_epilogue

import metile
from metile import _frontend, _metile
from metile.testing import reference_kernels as rk

F16_GEMM = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32"), ("M", "scalar", "i32"),
            ("N", "scalar", "i32"), ("K", "scalar", "i32")]
BLOCKS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}


def _cuda(kernel, params=F16_GEMM, constexprs=BLOCKS, **options):
    traced = _frontend.specialize(kernel.fn, params, constexprs, {})
    return _metile.compile_cuda(traced, arch="sm_90", num_sgs=8, **options)["cuda"]


@metile.kernel
def gemm_shifted(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                 BLOCK_K: metile.constexpr):
    """A's rows start one element in: no block of a matrix that starts at the buffer."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A + 1, pid_m * BLOCK_M, k, K + 1, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


def test_block_loads_get_tensor_maps():
    # Bounded tile_load, the unbounded seed tile_load and Triton's masked loads all read blocks.
    for kernel in (rk.gemm_bounded, rk.gemm):
        src = _cuda(kernel)
        assert "const __grid_constant__ metile_tensor_map A_tma0" in src
        assert "const __grid_constant__ metile_tensor_map B_tma1" in src
        assert src.count("metile_tma_load(") >= 3
    params = [*F16_GEMM[:2], ("Bias", "ptr", "f32"), ("C", "ptr", "f16"), *F16_GEMM[3:], ("alpha", "scalar", "f32")]
    src = _cuda(gemm_masked_epilogue, params)
    assert "A_tma0" in src and "B_tma1" in src
    # Without a column bound a tile must stay within its row, checked per tile.
    assert "<= K;" in _cuda(rk.gemm)


def test_other_loads_are_copied_by_the_threads():
    src = _cuda(gemm_shifted)
    assert "A_tma" not in src and "B_tma0" in src
    # Its fills still arrive on the stage's barrier, and the barrier before the wgmmas stays.
    assert "metile_mbarrier_arrive(" in src and "__syncthreads();" in src


def test_the_switch_and_the_targets():
    assert "metile_tma_load(tg" in _cuda(rk.gemm_bounded)
    assert "metile_tma_load(tg" not in _cuda(rk.gemm_bounded, tma=False)
    # The ring keeps its barriers (the threads fill it) and its overlap.
    assert "metile_mbarrier_wait" in _cuda(rk.gemm_bounded, tma=False)
    # mma.sync rings (no wgmma) and GPUs before the H100 copy with cp.async only.
    assert "mbarrier" not in _cuda(rk.gemm_bounded, wgmma=False)
    traced = _frontend.specialize(rk.gemm_bounded.fn, F16_GEMM, BLOCKS, {})
    a100 = _metile.compile_cuda(traced, arch="sm_80", num_sgs=8)["cuda"]
    assert "mbarrier" not in a100 and a100 == _metile.compile_cuda(traced, arch="sm_80", num_sgs=8, tma=True)["cuda"]


def test_tensor_copies_need_two_warpgroups_and_64_deep_tiles():
    # Thread 0 issues the copies on its warpgroup's path between wgmma groups: with one warpgroup,
    # or two k16 steps an iteration, the threads copy instead (measured faster on the H100).
    assert "metile_tma_load(tg" in _cuda(rk.gemm_bounded)
    traced = _frontend.specialize(rk.gemm_bounded.fn, F16_GEMM, BLOCKS, {})
    one_warpgroup = _metile.compile_cuda(traced, arch="sm_90", num_sgs=4)["cuda"]
    assert "metile_tma_load(tg" not in one_warpgroup and "metile_mbarrier_wait(" in one_warpgroup
    shallow = _cuda(rk.gemm_bounded, constexprs={**BLOCKS, "BLOCK_K": 32})
    assert "metile_tma_load(tg" not in shallow


def test_refills_go_to_the_warp_that_releases_the_stage_last():
    src = _cuda(rk.gemm_bounded)
    loop = src[src.index("for (long"):]
    # Each warp counts its release atomically; the one completing the round issues the refill's
    # tensor copies, waiting for no one (the threads' fallback copies still wait on the barrier).
    assert loop.count("metile_atomic_add(") == 1 and "metile_tma_load(tg" in loop
    prologue = src[src.index('extern "C"'):src.index("for (long")]
    assert "metile_tma_load(tg" in prologue and "metile_atomic_add(" not in prologue
    # Without tensor copies the threads copy after every warp's release: nothing to count.
    no_tma = _cuda(rk.gemm_bounded, tma=False)
    assert "metile_atomic_add(" not in no_tma[no_tma.index('extern "C"'):]


def _check(c, a, b):
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=2e-3 * np.sqrt(a.shape[1]))


# K odd: A's rows are not 16-byte multiples (copied into aligned rows at launch, or copied by the
# threads, while TMA copies B); N odd: the other way round; both; and sides that are multiples
# with edge tiles zero-filled by the tensor copies.
@pytest.mark.parametrize("M, N, K", [(200, 136, 77), (200, 131, 96), (130, 67, 99), (257, 136, 200)])
@pytest.mark.parametrize("tma, repack", [(True, True), (True, False), (False, True)])
def test_gemm_where_the_runtime_can_and_cannot_describe_the_matrices(device, rng, M, N, K, tma, repack):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    opts = {"num_sgs": 8, "tma": tma, "repack_operands": repack} if device == "cuda" else {}
    bm, bn, bk = (128, 128, 64) if device == "cuda" else (32, 32, 16)
    rk.gemm_bounded[(metile.cdiv(M, bm), metile.cdiv(N, bn))](
        a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **opts)
    _check(c, a, b)


def test_repacking_is_decided_at_launch():
    # The kernel is the same either way (its flag says whether a map was made); the switch is a
    # launch option and Config key like the passes, checked like them.
    assert _cuda(rk.gemm_bounded, repack_operands=False) == _cuda(rk.gemm_bounded)
    assert dict(metile.Config(BLOCK_M=128, repack_operands=False)) == {"BLOCK_M": 128, "repack_operands": False}
    with pytest.raises(ValueError, match="repack_operands switches a pass on or off and must be True or False"):
        metile.Config(BLOCK_M=128, repack_operands="no")


@pytest.mark.parametrize("dtype, M, N, K", [(np.float16, 300, 261, 99), (np.float32, 260, 131, 67)])
def test_repacked_operands_give_the_same_bits_as_the_threads_copies(device, rng, dtype, M, N, K):
    # Odd row lengths: on the H100 both operands are copied into aligned rows and read with tensor
    # copies, or copied by the kernel's threads; the tiles, and so every bit of C, are the same.
    a = rng.standard_normal((M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    bm, bn, bk = ((128, 128, 64 if dtype == np.float16 else 32) if device == "cuda" else (32, 32, 16))
    opts = {"num_sgs": 8, "tf32": dtype == np.float32} if device == "cuda" else {}
    out = []
    for repack in (True, False):
        c = np.full((M, N), np.nan, np.float32)
        rk.gemm_bounded[(metile.cdiv(M, bm), metile.cdiv(N, bn))](
            a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, repack_operands=repack, **opts)
        out.append(c)
    np.testing.assert_array_equal(out[0], out[1])
    tol = 2e-3 if dtype == np.float16 or device != "cuda" else 5e-3
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out[0], want, rtol=tol, atol=tol * np.sqrt(K))


def test_debug_repack_names_the_operands_copied_into_aligned_rows():
    if not metile.device_available("cuda"):
        pytest.skip("operands are copied into aligned rows by the cuda runtime")
    script = textwrap.dedent("""
        import numpy as np, metile
        from metile.testing import reference_kernels as rk
        M, N, K = 300, 264, 99
        a, b = np.ones((M, K), np.float16), np.ones((K, N), np.float16)
        c = np.zeros((M, N), np.float32)
        for repack in (False, True):
            rk.gemm_bounded[(3, 3)](a, b, c, M, N, K, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_sgs=8,
                                    repack_operands=repack)
            assert (c == K).all()
    """)
    env = dict(os.environ, METILE_DEBUG="repack", METILE_DEVICE="cuda")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    # A's rows (99 f16, 198 bytes apart) are copied once, by the launch that allows it; B's are aligned.
    assert r.stderr.count("copied into rows") == 1, r.stderr
    assert "argument 0 (300 x 99 f16, rows 198 bytes apart) copied into rows 256 bytes apart" in r.stderr


def test_shifted_operand(device, rng):
    # A's block starts inside its buffer: the threads copy it, the tensor memory accelerator B.
    M, N, K = 150, 140, 96
    a = rng.standard_normal((M, K + 1)).astype(np.float16).reshape(-1)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    bm, bn, bk = (128, 128, 64) if device == "cuda" else (32, 32, 16)
    opts = {"num_sgs": 8} if device == "cuda" else {}
    gemm_shifted[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn,
                                                           BLOCK_K=bk, **opts)
    _check(c, np.append(a[1:], 0).reshape(M, K + 1)[:, :K], b)


@metile.kernel
def gemm_persistent(A, B, C, M, N, K, TILES, TILES_N, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                    BLOCK_K: metile.constexpr):
    """Each program walks output tiles: the ring and its memory barriers start over for each."""
    for t in range(metile.program_id(0), TILES, metile.num_programs(0)):
        pid_m = t // TILES_N
        pid_n = t % TILES_N
        acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
        for k in metile.tile_range(0, K, BLOCK_K):
            a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
            b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
            acc = metile.dot(a, b, acc)
        metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


@pytest.mark.parametrize("M, N, K", [(300, 260, 200), (130, 140, 64), (200, 136, 77)])
def test_a_persistent_gemm_restarts_the_ring_per_tile(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    bm, bn, bk = (128, 128, 64) if device == "cuda" else (32, 32, 16)
    opts = {"num_sgs": 8} if device == "cuda" else {}
    tiles_n = metile.cdiv(N, bn)
    tiles = metile.cdiv(M, bm) * tiles_n
    gemm_persistent[(2,)](a, b, c, M, N, K, tiles, tiles_n, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, **opts)
    _check(c, a, b)
    if device == "cuda":
        return
    params = [*F16_GEMM, ("TILES", "scalar", "i32"), ("TILES_N", "scalar", "i32")]
    src = _cuda(gemm_persistent, params)
    # The barriers are initialised inside the tile loop, before each tile's prologue, and only once
    # every warp has left the previous tile's ring (a barrier right before).
    init = src.index("metile_mbarrier_init(tg")
    assert "metile_tma_load(tg" in src and src.index("for (") < init
    assert src.rindex("__syncthreads();", 0, init) > src.rindex("for (", 0, init)
    assert "metile_atomic_add(" in src[init:]
