"""`dot(x, w.T)`: the product of a linear layer, whose weight is stored (N, K), as
users write it with `tile_load`, tensor descriptors or pointer tiles. On the H100 the
operand ring holds `w`'s tiles as they are loaded, which is `wgmma`'s K-major B
(tensor copies where the launch allows, the threads' copies otherwise); elsewhere
the transpose is taken in registers. Results never depend on which."""

import numpy as np
import pytest

import metile
from metile import _frontend, _metile
from metile.testing.reference_kernels import linear as linear_tiles


@metile.kernel
def linear_descriptors(X, W, Y, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                       BLOCK_K: metile.constexpr):
    desc_x = metile.make_tensor_descriptor(X, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    desc_w = metile.make_tensor_descriptor(W, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, K, BLOCK_K):
        x = desc_x.load([pid_m * BLOCK_M, k])
        w = desc_w.load([pid_n * BLOCK_N, k])
        acc = metile.dot(x, w.T, acc)
    offs_m = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    metile.store(Y + offs_m[:, None] * N + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@metile.kernel
def linear_pointers(x_ptr, w_ptr, y_ptr, M, N, K, stride_xm, stride_wn,
                    BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    offs_m = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    offs_k = metile.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        x = metile.load(x_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        w = metile.load(w_ptrs, mask=(offs_n[:, None] < N) & (offs_k[None, :] < k_left), other=0.0)
        acc = metile.dot(x, w.T, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    metile.store(y_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(metile.float16),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _np_dtype(dtype):
    if dtype == "bf16":
        return pytest.importorskip("ml_dtypes", reason="ml_dtypes is needed for bf16 arrays").bfloat16
    return np.float16


def _operands(rng, M, N, K, dtype):
    # Small integers times 1/8: every product and sum is exact in f32.
    x = (rng.integers(-4, 5, (M, K)) / 8).astype(_np_dtype(dtype))
    w = (rng.integers(-4, 5, (N, K)) / 8).astype(_np_dtype(dtype))
    return x, w, x.astype(np.float64) @ w.astype(np.float64).T


SIZES = [(64, 64, 64), (45, 70, 83), (130, 96, 200), (17, 33, 8)]


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("M, N, K", SIZES)
@pytest.mark.parametrize("kernel", [linear_tiles, linear_descriptors], ids=["tile_load", "descriptor"])
def test_linear_layer_product(device, rng, kernel, dtype, M, N, K):
    x, w, ref = _operands(rng, M, N, K, dtype)
    y = np.full((M, N), np.nan, np.float32)
    grid = (metile.cdiv(M, 32), metile.cdiv(N, 32))
    kernel[grid](x, w, y, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("M, N, K", SIZES)
def test_linear_layer_product_by_pointers(device, rng, M, N, K):
    x, w, ref = _operands(rng, M, N, K, "f16")
    y = np.full((M, N), np.nan, np.float16)
    grid = (metile.cdiv(M, 32), metile.cdiv(N, 32))
    linear_pointers[grid](x, w, y, M, N, K, K, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32)
    np.testing.assert_array_equal(y.astype(np.float64), ref.astype(np.float16).astype(np.float64))


@pytest.mark.parametrize("options", [{}, {"tma": False}, {"async_copy": False}])
def test_large_tiles_agree_with_every_copy_path(device, rng, options):
    # The H100's tiles (128x128x64, 8 warps) over several ring laps, ragged at every edge.
    M, N, K = 200, 136, 456
    x, w, ref = _operands(rng, M, N, K, "f16")
    y = np.full((M, N), np.nan, np.float32)
    grid = (metile.cdiv(M, 128), metile.cdiv(N, 128))
    linear_tiles[grid](x, w, y, M, N, K, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_sgs=8, **options)
    np.testing.assert_array_equal(y, ref)


# ------------------------------------------------------------ emitted code (no GPU needed)

LINEAR = [("X", "ptr", "f16"), ("W", "ptr", "f16"), ("Y", "ptr", "f32")] + [
    (n, "scalar", "i32", 16) for n in "MNK"]
BLOCKS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}


def _source(kernel, params=LINEAR, arch="sm_90", **options):
    traced = _frontend.specialize(kernel.fn, params, BLOCKS, {"threads_per_group": 256})
    return _metile.compile_cuda(traced, num_sgs=8, arch=arch, **options)["cuda"]


def test_the_weight_tile_is_copied_by_the_tensor_memory_accelerator():
    for kernel in (linear_tiles, linear_descriptors):
        src = _source(kernel)
        assert "metile_tensor_map W_tma" in src and "metile_tensor_map X_tma" in src
        # W's tile is wgmma's K-major B: no transpose bit on either operand.
        assert "p, 1, 1, 0, 0;" in src and "p, 1, 1, 0, 1;" not in src
        assert "mbarrier" in src


def test_without_tensor_copies_the_threads_copy_the_weight_asynchronously():
    src = _source(linear_tiles, tma=False)
    assert "W_tma" not in src and "cp.async.cg.shared.global" in src


def test_pointer_tiles_of_the_weight_are_copied_asynchronously():
    params = [("x_ptr", "ptr", "f16"), ("w_ptr", "ptr", "f16"), ("y_ptr", "ptr", "f16")] + [
        (n, "scalar", "i32", 16) for n in ("M", "N", "K", "stride_xm", "stride_wn")]
    src = _source(linear_pointers, params)
    assert src.count("cp.async.cg.shared.global") >= 2 and "p, 1, 1, 0, 0;" in src


def test_mma_sync_targets_transpose_in_registers():
    # sm_80 reads B fragments N-major: the ring does not take a transposed B there.
    src = _source(linear_tiles, arch="sm_80")
    assert "mma.sync" in src and "W_tma" not in src
