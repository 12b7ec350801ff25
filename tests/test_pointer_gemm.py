"""Matrix products written as Triton users write them: pointer tiles built from
`arange` broadcasts, advanced through the K loop (`a_ptrs += BLOCK_K * stride_ak`),
masked K edges, any strides (row- and column-major B, `b.T` by pointer
arithmetic). The prefetch pass rewrites the advanced pointers as functions of
the loop counter so that they can be loaded ahead into the asynchronous operand
ring; results must be the same with the ring on and off, at ragged sizes."""

import re

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


@metile.kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr, BLOCK_SIZE_K: metile.constexpr,
                  GROUP_SIZE_M: metile.constexpr):
    pid = metile.program_id(axis=0)
    num_pid_m = metile.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)) % N
    offs_k = metile.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_SIZE_K)):
        a = metile.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = metile.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = metile.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator

    offs_cm = pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    metile.store(c_ptrs, c, mask=c_mask)


def _np_dtype(dtype):
    if dtype == "bf16":
        ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is needed for bf16 arrays")
        return ml_dtypes.bfloat16
    return {"f16": np.float16, "f32": np.float32}[dtype]


TOLERANCE = {"f16": 2e-2, "bf16": 1e-1, "f32": 2e-2}


def _matmul(a, b_storage, b_layout, M, N, K, blocks=(32, 32, 32), **options):
    """C = A @ B where `b_storage` holds B row-major (K, N) or as B^T (N, K)."""
    c = np.full((M, N), np.nan, dtype=np.float32)
    stride_bk, stride_bn = (N, 1) if b_layout == "row" else (1, K)
    bm, bn, bk = blocks
    grid = (metile.cdiv(M, bm) * metile.cdiv(N, bn),)
    matmul_kernel[grid](a, b_storage, c, M, N, K, K, 1, stride_bk, stride_bn, N, 1,
                        BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=4, **options)
    return c


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("b_layout", ["row", "col"])
@pytest.mark.parametrize("M, N, K", [(64, 64, 96), (45, 70, 83), (33, 129, 17), (96, 32, 7)])
def test_pointer_gemm_at_ragged_sizes(device, rng, dtype, b_layout, M, N, K):
    np_dtype = _np_dtype(dtype)
    a = rng.standard_normal((M, K)).astype(np_dtype)
    b = rng.standard_normal((K, N)).astype(np_dtype)
    storage = b if b_layout == "row" else np.ascontiguousarray(b.T)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    tol = TOLERANCE[dtype]
    c = _matmul(a, storage, b_layout, M, N, K)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=tol, atol=tol * np.sqrt(K))


@pytest.mark.parametrize("async_copy", [False, True])
@pytest.mark.parametrize("M, N, K", [(64, 96, 256), (50, 40, 200)])
def test_ring_on_and_off_agree(device, rng, async_copy, M, N, K):
    # Long loops wrap the ring many times; the edge tile of K copies zero-filled.
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = _matmul(a, b, "row", M, N, K, blocks=(32, 32, 16), async_copy=async_copy)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.sqrt(K))


@metile.kernel
def carried_offsets_gemm(A, B, C, Kout, M, N, K, BM: metile.constexpr, BN: metile.constexpr,
                         BK: metile.constexpr):
    # Integer offsets (not pointers) advanced through the loop, and one of them
    # read after it: the rewrite must keep that carried value.
    rows = metile.program_id(0) * BM + metile.arange(0, BM)
    cols = metile.program_id(1) * BN + metile.arange(0, BN)
    ks = metile.arange(0, BK)
    a_offs = rows[:, None] * K + ks[None, :]
    b_offs = ks[:, None] * N + cols[None, :]
    k_seen = 0
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in range(0, K, BK):
        a = metile.load(A + a_offs, mask=(rows[:, None] < M) & (ks[None, :] + k < K), other=0.0)
        b = metile.load(B + b_offs, mask=(ks[:, None] + k < K) & (cols[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
        a_offs += BK
        b_offs = BK * N + b_offs
        k_seen += BK
    metile.store(C + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))
    metile.store(Kout + metile.program_id(0) * metile.num_programs(1) + metile.program_id(1), k_seen)


@pytest.mark.parametrize("M, N, K", [(40, 48, 70), (32, 32, 16)])
def test_carried_integer_offsets_and_a_value_read_after_the_loop(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    grid = (metile.cdiv(M, 32), metile.cdiv(N, 32))
    k_out = np.full(grid[0] * grid[1], -1, np.int32)
    carried_offsets_gemm[grid](a, b, c, k_out, M, N, K, BM=32, BN=32, BK=16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=2e-2, atol=2e-2 * np.sqrt(K))
    assert (k_out == metile.cdiv(K, 16) * 16).all()


# ------------------------------------------------------------ emitted code (no GPU needed)

def _tutorial_params(dtype):
    sizes = [(n, "scalar", "i32", 16) for n in ("M", "N", "K", "stride_am")]
    return ([(n, "ptr", dtype) for n in ("a_ptr", "b_ptr", "c_ptr")] + sizes[:4] + [("stride_ak", "one", "i32")]
            + [("stride_bk", "scalar", "i32", 16), ("stride_bn", "one", "i32"), ("stride_cm", "scalar", "i32", 16),
               ("stride_cn", "one", "i32")])


def _traced(dtype="f16"):
    constexprs = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}
    return _frontend.specialize(matmul_kernel.fn, _tutorial_params(dtype), constexprs, {"threads_per_group": 128})


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_tutorial_cuda_copies_operands_asynchronously(arch, dtype):
    src = _metile.compile_cuda(_traced(dtype), num_sgs=4, arch=arch)["cuda"]
    assert "cp.async.cg.shared.global" in src or "cp.async.ca.shared.global" in src
    assert "cp.async.wait_group" in src
    if arch == "sm_90":
        assert "wgmma.mma_async" in src and "mbarrier" in src


def test_unit_strides_are_specialised_as_constants():
    text = _traced().text
    # The parameters stay (the launch passes them), but nothing reads them.
    assert "stride_ak" in text and "stride_bn" in text
    assert text.count("/*stride_ak*/") == 1


def test_a_one_parameter_must_be_an_integer():
    params = _tutorial_params("f16")
    params = [("stride_ak", "one", "f32") if p[0] == "stride_ak" else p for p in params]
    with pytest.raises(ValueError, match="parameter 'stride_ak' of kind \"one\" must be an integer, got f32"):
        _frontend.specialize(matmul_kernel.fn, params, {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32,
                                                        "GROUP_SIZE_M": 4}, {})


def test_launches_with_a_unit_stride_and_without_share_no_specialisation(device, rng):
    # stride_ak == 1 specialises; a kernel launched with 2 gets its own trace.
    M, N, K = 16, 16, 16
    a = rng.standard_normal((M, 2 * K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float32)
    before = matmul_kernel.cache_info()["traces"]
    matmul_kernel[(1,)](a, b, c, M, N, K, 2 * K, 2, N, 1, N, 1, BLOCK_SIZE_M=16, BLOCK_SIZE_N=16,
                        BLOCK_SIZE_K=16, GROUP_SIZE_M=1)
    ref = a[:, ::2].astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.sqrt(K))
    assert matmul_kernel.cache_info()["traces"] == before + 1


@metile.kernel
def row_major_pids_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                        stride_cn, BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr,
                        BLOCK_SIZE_K: metile.constexpr, GROUP_SIZE_M: metile.constexpr):
    # The tutorial without the grouped order: `pid_n` is a remainder of the
    # program id, so it is provably non-negative and `offs_bn % N` keeps runs of
    # up to what divides N (the grouped `pid_n` is a quotient by a difference,
    # whose sign the analysis does not know).
    pid = metile.program_id(axis=0)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_am = (pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)) % N
    offs_k = metile.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_SIZE_K)):
        a = metile.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = metile.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = metile.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    offs_cm = pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    metile.store(c_ptrs, accumulator, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


# N = 48 wraps inside the second column tile at a multiple of 16; 40 at a multiple of 8; 45 nowhere aligned.
@pytest.mark.parametrize("M, N, K", [(50, 48, 70), (33, 40, 64), (20, 45, 19)])
def test_wrapped_column_offsets_at_ragged_sizes(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    grid = (metile.cdiv(M, 32) * metile.cdiv(N, 32),)
    row_major_pids_gemm[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32,
                              BLOCK_SIZE_K=16, GROUP_SIZE_M=1)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=2e-2, atol=2e-2 * np.sqrt(K))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_wrapped_column_offsets_of_grouped_program_ids_copy_b_behind_a_sign_test(arch):
    # The grouped order's `pid_n` divides by a difference of launch sizes, so its
    # sign is unknown: B's runs are copied once a uniform test finds it >= 0.
    constexprs = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}
    sources = {}
    for name, kernel in (("grouped", matmul_kernel), ("row-major", row_major_pids_gemm)):
        traced = _frontend.specialize(kernel.fn, _tutorial_params("f16"), constexprs, {"threads_per_group": 128})
        sources[name] = _metile.compile_cuda(traced, num_sgs=4, arch=arch)["cuda"]
    copies = {name: src.count("cp.async.cg.shared.global") for name, src in sources.items()}
    assert copies["grouped"] == copies["row-major"] > 0
    assert re.search(r"bool v\d+ = v\d+ >= 0;", sources["grouped"])
    assert not re.search(r"bool v\d+ = v\d+ >= 0;", sources["row-major"])


@metile.kernel
def shifted_wrap_gemm(a_ptr, b_ptr, c_ptr, M, N, K, shift, stride_bk, BLOCK_M: metile.constexpr,
                      BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    # B's columns are `N + (pid_n * BLOCK_N - shift + j) % N` of a (K, 2N) buffer:
    # with `shift > 0` the first column tile's dividend is negative and C's
    # remainder is negative there too, so its runs break where it crosses zero.
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    start = pid_n * BLOCK_N - shift
    offs_m = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_bn = N + (start + metile.arange(0, BLOCK_N)) % N
    offs_k = metile.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m[:, None] % M) * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :]
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_K)):
        a = metile.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = metile.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = metile.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    offs_n = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    metile.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@pytest.mark.parametrize("shift", [0, 5, 16, 40])
@pytest.mark.parametrize("M, N, K", [(40, 48, 70), (70, 96, 128)])
def test_wrapped_offsets_whose_sign_test_fails_take_the_register_path(device, rng, shift, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, 2 * N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    bm, bn, bk = 32, 32, 32
    shifted_wrap_gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, shift, 2 * N, BLOCK_M=bm,
                                                                 BLOCK_N=bn, BLOCK_K=bk)
    cols = np.arange(metile.cdiv(N, bn) * bn) - shift
    picked = b[:, N + np.fmod(cols, N)][:, :N]
    ref = a.astype(np.float64) @ picked.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=2e-2, atol=2e-2 * np.sqrt(K))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_shifted_wrap_copies_b_behind_the_test_of_its_start(arch):
    params = ([(n, "ptr", "f16") for n in ("a_ptr", "b_ptr")] + [("c_ptr", "ptr", "f32")]
              + [(n, "scalar", "i32", 16) for n in ("M", "N", "K")] + [("shift", "scalar", "i32", 16),
                                                                       ("stride_bk", "scalar", "i32", 16)])
    traced = _frontend.specialize(shifted_wrap_gemm.fn, params, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32},
                                  {"threads_per_group": 128})
    src = _metile.compile_cuda(traced, num_sgs=4, arch=arch)["cuda"]
    assert re.search(r"bool v\d+ = v\d+ >= 0;", src)
    assert src.count("cp.async.cg.shared.global") > 0


@metile.kernel
def assumed_tutorial_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                          stride_cn, BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr,
                          BLOCK_SIZE_K: metile.constexpr, GROUP_SIZE_M: metile.constexpr):
    # Triton's current tutorial: `matmul_kernel` with the `tl.assume`s of the
    # ids' and strides' signs, which let `offs_bn % N` keep its runs.
    pid = metile.program_id(axis=0)
    num_pid_m = metile.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    metile.assume(pid_m >= 0)
    metile.assume(pid_n >= 0)
    metile.assume(stride_am > 0)
    metile.assume(stride_ak > 0)
    metile.assume(stride_bn > 0)
    metile.assume(stride_bk > 0)
    metile.assume(stride_cm > 0)
    metile.assume(stride_cn > 0)

    offs_am = (pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)) % N
    offs_k = metile.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_SIZE_K)):
        a = metile.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = metile.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = metile.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator

    offs_cm = pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    metile.store(c_ptrs, c, mask=c_mask)


@pytest.mark.parametrize("b_layout", ["row", "col"])
@pytest.mark.parametrize("M, N, K", [(50, 48, 70), (45, 70, 83), (33, 129, 17), (96, 40, 64)])
def test_the_tutorial_with_assumptions_at_ragged_sizes(device, rng, b_layout, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    storage = b if b_layout == "row" else np.ascontiguousarray(b.T)
    stride_bk, stride_bn = (N, 1) if b_layout == "row" else (1, K)
    c = np.full((M, N), np.nan, np.float32)
    grid = (metile.cdiv(M, 32) * metile.cdiv(N, 32),)
    assumed_tutorial_gemm[grid](a, storage, c, M, N, K, K, 1, stride_bk, stride_bn, N, 1, BLOCK_SIZE_M=32,
                                BLOCK_SIZE_N=32, BLOCK_SIZE_K=16, GROUP_SIZE_M=4)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=2e-2, atol=2e-2 * np.sqrt(K))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_tutorials_assumptions_put_b_on_the_asynchronous_ring(arch):
    constexprs = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}
    copies = {}
    for name, kernel in (("grouped", matmul_kernel), ("assumed", assumed_tutorial_gemm),
                         ("row-major", row_major_pids_gemm)):
        traced = _frontend.specialize(kernel.fn, _tutorial_params("f16"), constexprs, {"threads_per_group": 128})
        copies[name] = _metile.compile_cuda(traced, num_sgs=4, arch=arch)["cuda"].count("cp.async.cg.shared.global")
    assert copies["grouped"] == copies["assumed"] == copies["row-major"] > 0
