"""Tensor copies for matrix products written with pointer tiles: on the H100, a load through
`ptr + rows[:, None] * stride + cols[None, :]`, whichever way the offsets are written (advanced
through the K loop, wrapped by `% M`, clamped by `where` or `minimum`, the K edge masked relative
to the step), fills the wgmma ring with tensor copies, behind a uniform test of what the offsets
rely on; where the test fails the threads copy. Results never depend on which."""

import re

import numpy as np
import pytest
from test_pointer_gemm import _tutorial_params, matmul_kernel, shifted_wrap_gemm
from test_tutorials import matmul_kernel_persistent

import metile
from metile import _frontend, _metile

BIG = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}


def _sm90(kernel, params, constexprs, **options):
    traced = _frontend.specialize(kernel.fn, params, constexprs, {"threads_per_group": 256})
    return _metile.compile_cuda(traced, num_sgs=8, arch="sm_90", **options)["cuda"]


def _maps(src):
    return set(re.findall(r"metile_tensor_map (\w+)_tma\d", src))


def _blocks(device):
    """Tiles that get tensor copies on the H100 (two warpgroups, 64-deep f16), small elsewhere."""
    return ((128, 128, 64), {"num_sgs": 8}) if device == "cuda" else ((32, 32, 32), {})


# ------------------------------------------------------------ emitted code (no GPU needed)

def _copy_condition(src, operand):
    """The code that decides whether `operand`'s first tile is a tensor copy."""
    start = src.index(f"{operand}_tma0_ready != 0" if operand == "a_ptr" else f"{operand}_tma1_ready != 0")
    return src[start:src.index("metile_tma_load(", start)]


def test_the_tutorials_operands_get_tensor_maps():
    src = _sm90(matmul_kernel, _tutorial_params("f16"), BIG)
    assert _maps(src) == {"a_ptr", "b_ptr"}
    # `% M` and `% N` are the identity where the tile's rows (columns) lie in 0..M (0..N); past M
    # (N) the rows (columns) of the product are masked off by the store, so the copies test only
    # the lower end, and the last tiles read zeros there where the kernel reads wrapped rows.
    for operand, size in (("a_ptr", "M"), ("b_ptr", "N")):
        condition = _copy_condition(src, operand)
        assert re.search(r"bool v\d+ = v\d+ >= v\d+;", condition) and f"long({size})" not in condition
    assert "cp.async.cg.shared.global" in src
    assert _maps(_sm90(matmul_kernel, _tutorial_params("f16"), BIG, tma=False)) == set()


@metile.kernel
def wrapped_rows_stored_gemm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                             BLOCK_K: metile.constexpr):
    """Rows wrapped by `% M` and stored unmasked: C's rows past M hold A's first rows' products."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    offs_m = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    offs_k = metile.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m[:, None] % M) * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_K)):
        a = metile.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = metile.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    metile.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=offs_n[None, :] < N)


WRAPPED_PARAMS = ([(n, "ptr", "f16") for n in ("a_ptr", "b_ptr")] + [("c_ptr", "ptr", "f32")]
                  + [(n, "scalar", "i32", 16) for n in ("M", "N", "K")])


def test_a_wrap_whose_far_side_is_stored_keeps_its_test():
    src = _sm90(wrapped_rows_stored_gemm, WRAPPED_PARAMS, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64})
    assert _maps(src) == {"a_ptr", "b_ptr"}
    assert "long(M)" in _copy_condition(src, "a_ptr")


def test_a_wrapped_column_of_rows_whose_far_side_is_masked_needs_no_test():
    # `(offs_m[:, None] % M)`, wrapped after expand_dims, with C's store masked to rows below M:
    # the copy of A tests nothing about M, and its tensor map (and a repack) ends at row M.
    params = ([(n, "ptr", "f16") for n in ("a_ptr", "b_ptr")] + [("c_ptr", "ptr", "f32")]
              + [(n, "scalar", "i32", 16) for n in ("M", "N", "K")] + [("shift", "scalar", "i32", 16),
                                                                       ("stride_bk", "scalar", "i32", 16)])
    traced = _frontend.specialize(shifted_wrap_gemm.fn, params, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
                                  {"threads_per_group": 256})
    out = _metile.compile_cuda(traced, num_sgs=8, arch="sm_90")
    assert _maps(out["cuda"]) == {"a_ptr", "b_ptr"}
    assert "long(M)" not in _copy_condition(out["cuda"], "a_ptr")
    assert (out["repack"][0]["buffer"], out["repack"][0]["rows"]) == (0, ("arg", 3))


def test_the_persistent_tutorials_clamped_operands_get_tensor_maps():
    src = _sm90(matmul_kernel_persistent, _tutorial_params("f16"), {**BIG, "NUM_SMS": 132})
    assert _maps(src) == {"a_ptr", "b_ptr"}
    # The epilogue's tile comes from `tile_id_c`, a counter in lockstep with the loop's `tile_id`
    # (`lockstep.rs`): its store is masked at the loads' rows and columns, so the clamps' far
    # sides are never observed and the copies test neither M nor N.
    assert "long(M)" not in _copy_condition(src, "a_ptr") and "long(N)" not in _copy_condition(src, "b_ptr")


@pytest.mark.parametrize("persistent", [False, True])
def test_wrapped_and_clamped_axes_give_the_repack_step_their_extent(persistent):
    # `% M` and `where(offs_bn < N, ..)` keep the copied tiles' rows below M and columns below N,
    # so the tensor maps may end there: A is (M, K), B (K, N), and a launch whose rows are not
    # 16-byte aligned can copy them into aligned rows (K odd: A).
    kernel, constexprs = (matmul_kernel_persistent, {**BIG, "NUM_SMS": 132}) if persistent else (matmul_kernel, BIG)
    traced = _frontend.specialize(kernel.fn, _tutorial_params("f16"), constexprs, {"threads_per_group": 256})
    repack = _metile.compile_cuda(traced, num_sgs=8, arch="sm_90")["repack"]
    M, N, K = ("arg", 3), ("arg", 4), ("arg", 5)
    assert [(r["buffer"], r["rows"], r["cols"]) for r in repack] == [(0, M, K), (1, K, N)]


@metile.kernel
def spelled_gemm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, SPELLING: metile.constexpr,
                 BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    """C = A @ B with the operands' offsets spelled several ways users write them."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    offs_m = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    offs_k = metile.arange(0, BLOCK_K)
    if SPELLING == "minimum":
        rows = metile.minimum(offs_m, M - 1)
        cols = metile.minimum(offs_n, N - 1)
    elif SPELLING == "where":
        rows = metile.where(offs_m < M, offs_m, 0)
        cols = metile.where(offs_n < N, offs_n, 0)
    elif SPELLING == "int64":
        rows = (offs_m % M).to(metile.int64)
        cols = (offs_n % N).to(metile.int64)
    else:
        rows = offs_m
        cols = offs_n
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + offs_k
        if SPELLING == "masked":
            a = metile.load(a_ptr + stride_am * rows[:, None] + kk[None, :],
                            mask=(rows[:, None] < M) & (kk[None, :] < K), other=0.0)
            b = metile.load(b_ptr + cols[None, :] + kk[:, None] * stride_bk,
                            mask=(kk[:, None] < K) & (cols[None, :] < N), other=0.0)
        elif SPELLING == "off by one":
            a = metile.load(a_ptr + rows[:, None] * stride_am + kk[None, :], mask=kk[None, :] < K - 1, other=0.0)
            b = metile.load(b_ptr + kk[:, None] * stride_bk + cols[None, :], mask=kk[:, None] < K, other=1.0)
        else:
            a = metile.load(a_ptr + rows[:, None] * stride_am + kk[None, :], mask=kk[None, :] < K, other=0.0)
            b = metile.load(b_ptr + kk[:, None] * stride_bk + cols[None, :], mask=kk[:, None] < K, other=0.0)
        acc = metile.dot(a, b, acc)
    metile.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


SPELLED_PARAMS = ([(n, "ptr", "f16") for n in ("a_ptr", "b_ptr")] + [("c_ptr", "ptr", "f32")]
                  + [(n, "scalar", "i32", 16) for n in ("M", "N", "K", "stride_am", "stride_bk")])
SPELLED_BLOCKS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}


@pytest.mark.parametrize("spelling", ["minimum", "where", "masked", "plain", "int64"])
def test_spellings_of_a_block_get_tensor_maps(spelling):
    assert _maps(_sm90(spelled_gemm, SPELLED_PARAMS, {**SPELLED_BLOCKS, "SPELLING": spelling})) == {"a_ptr", "b_ptr"}


def test_loads_that_read_no_block_are_copied_by_the_threads():
    # A's mask bounds its columns one short of the pointer's; B's masked-off value is 1.
    src = _sm90(spelled_gemm, SPELLED_PARAMS, {**SPELLED_BLOCKS, "SPELLING": "off by one"})
    assert _maps(src) == set() and "cp.async" in src
    # B stored transposed: its column index steps by a stride, not by one.
    params = _tutorial_params("f16")
    params = [("stride_bn", "scalar", "i32", 16) if p[0] == "stride_bn" else
              ("stride_bk", "one", "i32") if p[0] == "stride_bk" else p for p in params]
    assert _maps(_sm90(matmul_kernel, params, BIG)) == {"a_ptr"}


def test_a_column_origin_not_on_16_bytes_is_tested():
    # The tensor memory accelerator faults on a first column off 16 bytes (f16: 8 elements):
    # B's columns start `shift` off a tile, tested unless `shift` is specialised as a multiple of 16.
    params = ([(n, "ptr", "f16") for n in ("a_ptr", "b_ptr")] + [("c_ptr", "ptr", "f32")]
              + [(n, "scalar", "i32", 16) for n in ("M", "N", "K")] + [("shift", "scalar", "i32"),
                                                                       ("stride_bk", "scalar", "i32", 16)])
    aligned = re.compile(r"int (v\d+) = v\d+ & 7;\n\s*bool v\d+ = \1 == 0;")
    blocks = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64}
    assert aligned.search(_sm90(shifted_wrap_gemm, params, blocks))
    params[6] = ("shift", "scalar", "i32", 16)
    assert not aligned.search(_sm90(shifted_wrap_gemm, params, blocks))
    assert not aligned.search(_sm90(matmul_kernel, _tutorial_params("f16"), BIG))


@metile.kernel
def shifted_k_gemm(a_ptr, b_ptr, c_ptr, M, N, K, KS, S: metile.constexpr, BLOCK_M: metile.constexpr,
                   BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    """C[m] = A_flat[(m + 1) * K - S : (m + 2) * K] @ B, KS = K + S: A's columns start S before
    its row (the last S of the row above) and are bounded only above; B's rows on both sides."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    offs_m = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    offs_k = metile.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m[:, None] + 1) * K + (offs_k[None, :] - S)
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(KS, BLOCK_K)):
        a = metile.load(a_ptrs, mask=offs_k[None, :] - S < K - k * BLOCK_K, other=0.0)
        b = metile.load(b_ptrs, mask=(offs_k[:, None] < KS - k * BLOCK_K) & (offs_k[:, None] >= -k * BLOCK_K)
                        & (offs_n[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * N
    metile.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def test_a_column_origin_below_zero_without_a_lower_bound_is_tested():
    params = ([(n, "ptr", "f16") for n in ("a_ptr", "b_ptr")] + [("c_ptr", "ptr", "f32")]
              + [(n, "scalar", "i32", 16) for n in ("M", "N", "K", "KS")])
    src = _sm90(shifted_k_gemm, params, {**SPELLED_BLOCKS, "S": 3})
    assert _maps(src) == {"a_ptr", "b_ptr"}
    # The load reads the row above left of column 0, where a tensor copy would read zeros:
    # A's copies test that the column origin is at least zero.
    body = src[src.index("a_ptr_tma0_ready != 0"):]
    assert re.search(r"bool v\d+ = v\d+ >= 0;", body[:body.index("metile_tma_load(")])


# ------------------------------------------------------------ results, on every device

def _check(c, ref, K):
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * np.sqrt(K))


# Multiples of the tile (every tile copied by the tensor memory accelerator), ragged sides
# (the wrapped last tiles copied by the threads), and K odd (A's rows not 16-byte aligned).
@pytest.mark.parametrize("M, N, K", [(256, 256, 192), (300, 200, 136), (130, 260, 77), (64, 48, 40)])
def test_the_tutorial_with_tensor_copies(device, rng, M, N, K):
    (bm, bn, bk), opts = _blocks(device)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    matmul_kernel[(metile.cdiv(M, bm) * metile.cdiv(N, bn),)](
        a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=4, **opts)
    _check(c, a.astype(np.float64) @ b.astype(np.float64), K)


@pytest.mark.parametrize("M, N, K", [(256, 256, 192), (300, 200, 136)])
def test_the_persistent_tutorial_with_tensor_copies(device, rng, M, N, K):
    (bm, bn, bk), opts = _blocks(device)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float16)
    programs = min(3, metile.cdiv(M, bm) * metile.cdiv(N, bn))
    matmul_kernel_persistent[(programs,)](a, b, c, M, N, K, K, 1, N, 1, N, 1, BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn,
                                          BLOCK_SIZE_K=bk, GROUP_SIZE_M=4, NUM_SMS=programs, **opts)
    _check(c, a.astype(np.float64) @ b.astype(np.float64), K)


@pytest.mark.parametrize("spelling", ["minimum", "where", "masked", "int64"])
@pytest.mark.parametrize("M, N, K", [(256, 128, 128), (200, 136, 100)])
def test_spellings_with_tensor_copies(device, rng, spelling, M, N, K):
    (bm, bn, bk), opts = _blocks(device)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    spelled_gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, K, N, SPELLING=spelling, BLOCK_M=bm,
                                                           BLOCK_N=bn, BLOCK_K=bk, **opts)
    # Clamped rows and columns repeat the last (or first) one; the store masks them off.
    _check(c, a.astype(np.float64) @ b.astype(np.float64), K)


@pytest.mark.parametrize("shift", [0, 5, 8, 130])
def test_a_shifted_wrap_with_tensor_copies(device, rng, shift):
    (bm, bn, bk), opts = _blocks(device)
    M, N, K = 200, 256, 128
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, 2 * N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    shifted_wrap_gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, shift, 2 * N, BLOCK_M=bm,
                                                                 BLOCK_N=bn, BLOCK_K=bk, **opts)
    cols = np.arange(metile.cdiv(N, bn) * bn) - shift
    picked = b[:, N + np.fmod(cols, N)][:, :N]
    _check(c, a.astype(np.float64) @ picked.astype(np.float64), K)


@pytest.mark.parametrize("M, N, K, S", [(130, 136, 128, 3), (128, 128, 120, 8), (64, 40, 64, 64)])
def test_a_column_origin_below_zero_reads_the_row_above(device, rng, M, N, K, S):
    (bm, bn, bk), opts = _blocks(device)
    rows = metile.cdiv(M, bm) * bm + 1  # A's rows are read unmasked, whole tiles of them
    a = rng.standard_normal((rows, K)).astype(np.float16)
    b = rng.standard_normal((K + S, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    shifted_k_gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, K + S, S=S, BLOCK_M=bm, BLOCK_N=bn,
                                                             BLOCK_K=bk, **opts)
    flat = a.reshape(-1).astype(np.float64)
    window = np.stack([flat[(m + 1) * K - S:(m + 2) * K] for m in range(M)])
    _check(c, window @ b.astype(np.float64), K + S)


@pytest.mark.parametrize("M, N, K", [(200, 136, 128), (130, 64, 64)])
def test_wrapped_rows_that_are_stored_read_the_first_rows(device, rng, M, N, K):
    (bm, bn, bk), opts = _blocks(device)
    rows = metile.cdiv(M, bm) * bm
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((rows, N), np.nan, np.float32)
    wrapped_rows_stored_gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn,
                                                                       BLOCK_K=bk, **opts)
    _check(c, a[np.arange(rows) % M].astype(np.float64) @ b.astype(np.float64), K)


@metile.kernel
def doubled_offsets_gemm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                         BLOCK_K: metile.constexpr, DOUBLINGS: metile.constexpr):
    """A's row offsets and mask rebuilt `x = (x + x) - x` and `m = m & m` many times over: the same
    values, each read several times at every level."""
    offs_m = metile.program_id(0) * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = metile.program_id(1) * BLOCK_N + metile.arange(0, BLOCK_N)
    offs_k = metile.arange(0, BLOCK_K)
    rows = offs_m
    for _ in metile.static_range(DOUBLINGS):
        rows = (rows + rows) - rows
    mask = (rows[:, None] > -1) & (rows[:, None] < M)
    for _ in metile.static_range(DOUBLINGS):
        mask = mask & mask
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_K)):
        kk = k * BLOCK_K + offs_k
        a = metile.load(a_ptr + rows[:, None] * K + kk[None, :], mask=mask & (kk[None, :] < K), other=0.0)
        b = metile.load(b_ptr + kk[:, None] * N + offs_n[None, :], mask=(kk[:, None] < K) & (offs_n[None, :] < N),
                        other=0.0)
        acc = metile.dot(a, b, acc)
    metile.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def test_offsets_read_many_times_over_compile_in_bounded_time():
    # 40 levels: a walk that followed every read would visit 3^40 values (the uniform mask test
    # once did, from 12 levels on: 35 s, and out of memory at 16). The offsets' form gives up
    # past its budget, so A is copied by the threads.
    src = _sm90(doubled_offsets_gemm, WRAPPED_PARAMS, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64,
                                                       "DOUBLINGS": 40})
    assert _maps(src) == {"b_ptr"}


@pytest.mark.parametrize("M, N, K", [(70, 40, 50)])
def test_offsets_read_many_times_over(device, rng, M, N, K):
    (bm, bn, bk), opts = _blocks(device)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    doubled_offsets_gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn,
                                                                   BLOCK_K=bk, DOUBLINGS=40, **opts)
    _check(c, a.astype(np.float64) @ b.astype(np.float64), K)


# ------------------------------------------------------------ stacked matrices (third dimension)

@metile.kernel
def batched_gemm(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                 BLOCK_K: metile.constexpr):
    """C[z] = A[z] @ B[z] for (Z, M, K) and (Z, K, N) arrays, each matrix read through a
    tensor descriptor at its own base, as `bmm` and attention's per-head K and V are."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    z = metile.program_id(2)
    desc_a = metile.make_tensor_descriptor(a_ptr + z * M * K, shape=[M, K], strides=[K, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
    desc_b = metile.make_tensor_descriptor(b_ptr + z * K * N, shape=[K, N], strides=[N, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_K)):
        a = desc_a.load([pid_m * BLOCK_M, k * BLOCK_K])
        b = desc_b.load([k * BLOCK_K, pid_n * BLOCK_N])
        acc = metile.dot(a, b, acc)
    offs_m = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    metile.store(c_ptr + z * M * N + offs_m[:, None] * N + offs_n[None, :], acc,
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def test_matrices_one_after_another_get_stacked_maps_when_asked():
    # Each batch's A starts z * M * K elements in, a whole number of (M, K) matrices: with
    # `stacked_tma` the map has a third dimension, the batch, and each matrix ends at its own
    # M rows; no repack step copies such a map. Off (the default), the threads copy.
    params = ([(n, "ptr", "f16") for n in ("a_ptr", "b_ptr")] + [("c_ptr", "ptr", "f32")]
              + [(n, "scalar", "i32", 16) for n in ("M", "N", "K")])
    traced = _frontend.specialize(batched_gemm.fn, params, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64},
                                  {"threads_per_group": 256})
    stacked = _metile.compile_cuda(traced, num_sgs=8, arch="sm_90", stacked_tma=True)
    assert _maps(stacked["cuda"]) == {"a_ptr", "b_ptr"}
    assert "metile_tma_load_stacked(" in stacked["cuda"] and stacked["repack"] == []
    plain = _metile.compile_cuda(traced, num_sgs=8, arch="sm_90")["cuda"]
    assert _maps(plain) == set() and "metile_tma_load_stacked" not in plain


def test_the_reference_attentions_per_head_keys_and_values_get_stacked_maps_when_asked():
    from metile.testing import reference_attention as ra

    params = ([(n, "ptr", "f16") for n in ("Q", "K", "V", "Out")] + [("M", "ptr", "f32"), ("sm_scale", "scalar", "f32"),
                                                                    ("N_CTX", "scalar", "i32", 16)])
    blocks = {"HEAD_DIM": 128, "BLOCK_M": 128, "BLOCK_N": 128, "CAUSAL": False}
    traced = _frontend.specialize(ra.attention_fwd.fn, params, blocks, {"threads_per_group": 256})
    assert _maps(_metile.compile_cuda(traced, num_sgs=8, arch="sm_90", stacked_tma=True)["cuda"]) == {"K", "V"}


@pytest.mark.parametrize("Z, M, N, K", [(3, 100, 72, 88), (2, 256, 128, 128), (1, 40, 24, 16)])
def test_stacked_matrices_with_tensor_copies(device, rng, Z, M, N, K):
    (bm, bn, bk), opts = _blocks(device)
    a = rng.standard_normal((Z, M, K)).astype(np.float16)
    b = rng.standard_normal((Z, K, N)).astype(np.float16)
    c = np.full((Z, M, N), np.nan, np.float32)
    batched_gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn), Z)](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                             stacked_tma=True, **opts)
    _check(c, a.astype(np.float64) @ b.astype(np.float64), K)
