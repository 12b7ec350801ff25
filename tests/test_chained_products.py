"""Two matrix products chained in one loop, as attention computes them: `s = dot(q, k.T)` with
`q` loaded before the loop, then `acc = dot(s.to(f16), v, acc)`. On the H100 the loads of
`k` and `v` run ahead in a ring that holds only those tiles (tensor copies where the launch
allows, the threads' copies otherwise), `k` read as wgmma's K-major B and `s` as its register
A; elsewhere the products stage their operands. Results never depend on which. Inputs are
small multiples of 1/4, so every product is exact and results are compared exactly."""

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


@metile.kernel
def chained_tiles(Q, K, V, Out, N, D: metile.constexpr, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    """Out = (Q K^T) V for one matrix each: tile loads from the buffers themselves."""
    start_m = metile.program_id(0) * BLOCK_M
    q = metile.tile_load(Q, start_m, 0, D, (BLOCK_M, D), bounds=(N, D))
    acc = metile.zeros((BLOCK_M, D), dtype=metile.float32)
    for start_n in metile.range(0, N, BLOCK_N):
        k = metile.tile_load(K, start_n, 0, D, (BLOCK_N, D), bounds=(N, D))
        s = metile.dot(q, k.T)
        v = metile.tile_load(V, start_n, 0, D, (BLOCK_N, D), bounds=(N, D))
        acc = metile.dot(s.to(metile.float16), v, acc)
    metile.tile_store(Out, start_m, 0, D, acc, (BLOCK_M, D), bounds=(N, D))


@metile.kernel
def chained_heads(Q, K, V, Out, N, D: metile.constexpr, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    """The same per head (`program_id(1)`), through tensor descriptors of each head's rows."""
    start_m = metile.program_id(0) * BLOCK_M
    head = metile.program_id(1).to(metile.int64) * N * D
    desc_q = metile.make_tensor_descriptor(Q + head, shape=[N, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    desc_k = metile.make_tensor_descriptor(K + head, shape=[N, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    desc_v = metile.make_tensor_descriptor(V + head, shape=[N, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    q = desc_q.load([start_m, 0])
    acc = metile.zeros((BLOCK_M, D), dtype=metile.float32)
    for start_n in range(0, N, BLOCK_N):
        s = metile.dot(q, desc_k.load([start_n, 0]).T)
        acc = metile.dot(s.to(metile.float16), desc_v.load([start_n, 0]), acc)
    rows = start_m + metile.arange(0, BLOCK_M)
    cols = metile.arange(0, D)
    metile.store(Out + head + rows[:, None] * D + cols[None, :], acc, mask=rows[:, None] < N)


def _inputs(rng, heads, N, D):
    q, k, v = ((rng.integers(-2, 3, (heads, N, D)) / 4).astype(np.float16) for _ in range(3))
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1)
    return q, k, v, s @ v.astype(np.float64)


@pytest.mark.parametrize("N", [128, 200, 64, 37])
def test_chained_products_of_whole_matrices(device, rng, N):
    q, k, v, ref = _inputs(rng, 1, N, 64)
    out = np.full((N, 64), np.nan, np.float32)
    chained_tiles[(metile.cdiv(N, 64),)](q[0], k[0], v[0], out, N, D=64, BLOCK_M=64, BLOCK_N=32)
    np.testing.assert_array_equal(out, ref[0])


@pytest.mark.parametrize("N", [128, 200, 37])
def test_chained_products_per_head(device, rng, N):
    heads = 3
    q, k, v, ref = _inputs(rng, heads, N, 64)
    out = np.full((heads, N, 64), np.nan, np.float32)
    chained_heads[(metile.cdiv(N, 64), heads)](q, k, v, out, N, D=64, BLOCK_M=64, BLOCK_N=32)
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("options", [{}, {"tma": False}, {"wgmma_register_a": False}, {"async_copy": False}])
def test_hopper_blocks_agree_with_every_path(device, rng, options):
    # The H100's blocks (128 x 128, 8 warps) over several ring laps, ragged in N.
    N = 600
    q, k, v, ref = _inputs(rng, 1, N, 128)
    out = np.full((N, 128), np.nan, np.float32)
    chained_tiles[(metile.cdiv(N, 128),)](q[0], k[0], v[0], out, N, D=128, BLOCK_M=128, BLOCK_N=128, num_sgs=8,
                                          **options)
    np.testing.assert_array_equal(out, ref[0])


# ------------------------------------------------------------ emitted code (no GPU needed)

PARAMS = [("Q", "ptr", "f16"), ("K", "ptr", "f16"), ("V", "ptr", "f16"), ("Out", "ptr", "f32"),
          ("N", "scalar", "i32", 16)]


def _source(kernel, arch="sm_90", **options):
    traced = _frontend.specialize(kernel.fn, PARAMS, {"D": 128, "BLOCK_M": 128, "BLOCK_N": 128},
                                  {"threads_per_group": 256})
    return _metile.compile_cuda(traced, num_sgs=8, arch=arch, **options)["cuda"]


def test_k_and_v_tiles_are_copied_ahead_by_the_tensor_memory_accelerator():
    src = _source(chained_tiles)
    assert "metile_tensor_map K_tma" in src and "metile_tensor_map V_tma" in src
    assert src.count("metile_tma_load(") >= 4  # K and V, in the prologue and in the loop
    # Q is loaded once, before the loop: no tensor map; the second product reads s from registers.
    assert "Q_tma" not in src and "metile_pack2(" in src
    # Q's staging reaches the tensor cores through a proxy fence and a barrier before the loop:
    # the stages of tensor copies publish nothing the threads wrote.
    before_loop = src.split("for (long", 1)[0]
    q_staged = before_loop.rfind("*((metile_vec<half, 8>*)(tg")
    assert q_staged != -1 and "fence.proxy.async" in before_loop[q_staged:]


def test_heads_of_one_buffer_are_copied_ahead_by_the_threads():
    # `K + head` starts mid-buffer: no tensor map describes one head's rows, so the threads copy.
    src = _source(chained_heads)
    assert "K_tma" not in src and "cp.async.cg.shared.global" in src and "mbarrier" in src


def test_without_the_ring_the_products_stage_their_operands():
    src = _source(chained_tiles, async_copy=False)
    assert "mbarrier" not in src and "cp.async" not in src and "wgmma.mma_async" in src


def test_mma_sync_targets_keep_the_loads_in_the_loop():
    src = _source(chained_tiles, arch="sm_80")
    assert "mma.sync" in src and "mbarrier" not in src
