"""fp8 `dot` (e4m3, e5m2 and the two mixed) accumulating in f32: exact results
against numpy on every backend, in a K loop with masked ragged edges, with `b`
given K x N or as `x.T`; an fp8 GEMM with per-tensor and per-column scales in
the epilogue (torch's `_scaled_mm`); and the sm_90 source, which multiplies
fp8 tiles on `wgmma`'s `k32` instruction (ptxas is not run here).

The fp8 tensor cores (sm_90 and later) keep about 14 bits while they add a
`dot`'s products; the compiler adds each `dot`'s sum into f32 accumulators
apart. So on them, sums of a few products with long fractions are exact only on
the f16 atom (`fp8_wgmma=False`), and integer sums past 14 bits stay exact."""

import numpy as np
import pytest
from fp8_reference import decode, fp8_tensor_cores

import metile
from metile import _frontend, _metile


def _gemm_tile(A, B, C, M, N, K, SA, SB, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
               BLOCK_K: metile.constexpr, B_T: metile.constexpr, SCALED: metile.constexpr):
    rows = metile.program_id(0) * BLOCK_M + metile.arange(0, BLOCK_M)
    cols = metile.program_id(1) * BLOCK_N + metile.arange(0, BLOCK_N)
    acc = metile.zeros([BLOCK_M, BLOCK_N], dtype=metile.float32)
    for k0 in metile.range(0, K, BLOCK_K):
        ks = k0 + metile.arange(0, BLOCK_K)
        a = metile.load(A + rows[:, None] * K + ks[None, :],
                        mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        if B_T:
            # B is N x K (a weight matrix): the product takes its transpose.
            x = metile.load(B + cols[:, None] * K + ks[None, :],
                            mask=(cols[:, None] < N) & (ks[None, :] < K), other=0.0)
            acc = metile.dot(a, x.T, acc)
        else:
            b = metile.load(B + ks[:, None] * N + cols[None, :],
                            mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
            acc = metile.dot(a, b, acc)
    if SCALED:
        sb = metile.load(SB + cols, mask=cols < N, other=0.0)
        acc = (acc * metile.load(SA) * sb[None, :]).to(metile.bfloat16).to(metile.float32)
    metile.store(C + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@metile.kernel
def gemm_e4m3(A: metile.float8e4nv, B: metile.float8e4nv, C, M, N, K, SA, SB, BLOCK_M: metile.constexpr,
              BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr, B_T: metile.constexpr,
              SCALED: metile.constexpr):
    _gemm_tile(A, B, C, M, N, K, SA, SB, BLOCK_M, BLOCK_N, BLOCK_K, B_T, SCALED)


@metile.kernel
def gemm_e5m2(A: metile.float8e5, B: metile.float8e5, C, M, N, K, SA, SB, BLOCK_M: metile.constexpr,
              BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr, B_T: metile.constexpr,
              SCALED: metile.constexpr):
    _gemm_tile(A, B, C, M, N, K, SA, SB, BLOCK_M, BLOCK_N, BLOCK_K, B_T, SCALED)


@metile.kernel
def gemm_e4m3_e5m2(A: metile.float8e4nv, B: metile.float8e5, C, M, N, K, SA, SB, BLOCK_M: metile.constexpr,
                   BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr, B_T: metile.constexpr,
                   SCALED: metile.constexpr):
    _gemm_tile(A, B, C, M, N, K, SA, SB, BLOCK_M, BLOCK_N, BLOCK_K, B_T, SCALED)


KERNELS = {("e4m3", "e4m3"): gemm_e4m3, ("e5m2", "e5m2"): gemm_e5m2, ("e4m3", "e5m2"): gemm_e4m3_e5m2}


def _small_codes(fmt, rng, shape):
    """Random codes of values that are multiples of 1/16 up to 8 in magnitude:
    every product is a multiple of 1/256 below 64, so f32 sums of a few
    hundred of them are exact in any order."""
    codes = np.arange(256, dtype=np.uint8)
    values = decode(codes, fmt)
    ok = np.isfinite(values) & (np.abs(values) <= 8) & (values * 16 == np.round(values * 16))
    return rng.choice(codes[ok], shape)


def _positive_integer_codes(fmt, rng, shape):
    """Random codes of the integers 1 to 8: a few thousand products sum past
    14 bits, exactly in f32."""
    codes = np.arange(256, dtype=np.uint8)
    values = decode(codes, fmt)
    return rng.choice(codes[np.isin(values, np.arange(1, 9))], shape)


def _bf16(x):
    """Rounds float32 values to bfloat16 (to nearest even), returned as float32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def _run(fmts, m, n, k, blocks, b_t, rng, scaled=False, codes=_small_codes, **options):
    a = codes(fmts[0], rng, (m, k))
    b = codes(fmts[1], rng, (n, k) if b_t else (k, n))
    c = np.full((m, n), np.nan, np.float32)
    sa = np.array([0.5], np.float32)
    sb = np.exp2(rng.integers(-3, 3, n)).astype(np.float32)
    bm, bn, bk = blocks
    grid = (metile.cdiv(m, bm), metile.cdiv(n, bn))
    KERNELS[fmts][grid](a, b, c, m, n, k, sa, sb, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, B_T=b_t, SCALED=scaled,
                        **options)
    b_kn = decode(b, fmts[1]).T if b_t else decode(b, fmts[1])
    want = (decode(a, fmts[0]) @ b_kn).astype(np.float32)
    if scaled:
        want = _bf16(want * sa[0] * sb[None, :])
    np.testing.assert_array_equal(c, want)


def _exact_atom(device):
    """Launch options under which fp8 sums of fine fractions are exact."""
    return {"fp8_wgmma": False} if fp8_tensor_cores(device) else {}


@pytest.mark.parametrize("fmts", list(KERNELS))
@pytest.mark.parametrize("b_t", [False, True])
def test_fp8_dot_in_a_ragged_k_loop_is_exact(device, rng, fmts, b_t):
    _run(fmts, 100, 72, 136, (64, 64, 32), b_t, rng, **_exact_atom(device))


@pytest.mark.parametrize("blocks", [(64, 32, 64), (32, 64, 32)])
def test_fp8_dot_tile_shapes(device, rng, blocks):
    _run(("e4m3", "e4m3"), 70, 90, 75, blocks, True, rng, **_exact_atom(device))


def test_scaled_fp8_gemm_rounds_once_to_bf16(device, rng):
    _run(("e4m3", "e4m3"), 67, 80, 96, (64, 64, 32), True, rng, scaled=True, **_exact_atom(device))


@pytest.mark.parametrize("fmts", list(KERNELS))
@pytest.mark.parametrize("blocks, b_t, k", [((64, 64, 64), False, 1100), ((64, 64, 64), True, 1100),
                                            ((128, 128, 128), True, 1100), ((128, 128, 128), True, 1024)])
def test_fp8_integer_sums_past_14_bits_are_exact(device, rng, fmts, blocks, b_t, k):
    # Sums near 2**15 with every unit significant: the tensor cores' fp8
    # accumulation alone would drop the low bits; each `dot`'s sum added in
    # f32 keeps them. K = 1024 gives rows a tensor copy can read (the ring's
    # tensor-copy fill, zero past the ragged M and N), K = 1100 rows it cannot.
    _run(fmts, 70, 90, k, blocks, b_t, rng, codes=_positive_integer_codes)


@pytest.mark.parametrize("blocks", [(64, 64, 32), (128, 128, 128)])
def test_fp8_gemm_is_close_to_the_float64_product(device, rng, blocks):
    m, n, k = 130, 100, 520
    codes = np.arange(256, dtype=np.uint8)
    finite = codes[np.isfinite(decode(codes, "e4m3")) & (np.abs(decode(codes, "e4m3")) <= 4)]
    a, b = rng.choice(finite, (m, k)), rng.choice(finite, (n, k))
    c = np.full((m, n), np.nan, np.float32)
    one = np.ones(1, np.float32)
    bm, bn, bk = blocks
    grid = (metile.cdiv(m, bm), metile.cdiv(n, bn))
    gemm_e4m3[grid](a, b, c, m, n, k, one, one, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, B_T=True, SCALED=False)
    da, db = decode(a, "e4m3").astype(np.float64), decode(b, "e4m3").astype(np.float64)
    # Within 2**-12 of the sum of the products' magnitudes: what about 14 bits
    # kept per `dot` gives, and far below an error of one operand's rounding.
    bound = np.abs(da) @ np.abs(db).T * 2.0**-12
    assert np.all(np.abs(c - da @ db.T) <= bound), np.max(np.abs(c - da @ db.T) / bound)


def _sm90_source(fmts, blocks, b_t, threads=256, **options):
    dtypes = {"e4m3": "f8e4m3", "e5m2": "f8e5m2"}
    params = [("A", "ptr", dtypes[fmts[0]]), ("B", "ptr", dtypes[fmts[1]]), ("C", "ptr", "f32")]
    params += [(n, "scalar", "i32") for n in "MNK"] + [("SA", "ptr", "f32"), ("SB", "ptr", "f32")]
    bm, bn, bk = blocks
    constexprs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "B_T": b_t, "SCALED": True}
    traced = _frontend.specialize(KERNELS[fmts].fn, params, constexprs, {"threads_per_group": threads})
    return _metile.compile_cuda(traced, num_sgs=threads // 32, arch="sm_90", **options)["cuda"]


@pytest.mark.parametrize(
    "fmts, blocks, b_t, n",
    [
        (("e4m3", "e4m3"), (128, 128, 128), True, 128),
        (("e4m3", "e4m3"), (128, 128, 128), False, 128),
        (("e5m2", "e5m2"), (64, 64, 32), True, 32),
        # A warpgroup's 64 x 256 is summed apart in two m64n128 slices.
        (("e4m3", "e5m2"), (128, 256, 64), True, 128),
    ],
)
def test_sm90_multiplies_fp8_on_wgmma_k32(fmts, blocks, b_t, n):
    src = _sm90_source(fmts, blocks, b_t, fp8_wgmma=True)
    bm, bn, bk = blocks
    instruction = f"wgmma.mma_async.sync.aligned.m64n{n}k32.f32.{fmts[0]}.{fmts[1]} "
    # One instruction per k32 step and owned 64 x n tile of each warpgroup.
    per_warpgroup = (bk // 32) * (bm // 64) * (bn // n) // 2
    assert src.count(instruction) == max(per_warpgroup, bk // 32), src.count("wgmma.mma_async")
    assert "k16" not in src.split("wgmma.mma_async", 1)[1].split(";")[0]
    # fp8 operands are read K-major: no transpose immediates after the scales.
    line = next(s for s in src.splitlines() if instruction in s)
    assert "p, 1, 1; }" in line


def test_sm90_fast_accumulation_takes_whole_tiles_in_place():
    src = _sm90_source(("e4m3", "e4m3"), (128, 256, 64), True, fp8_fast_accum=True)
    assert src.count("wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 ") == 2
    assert '"r"(0) : "memory");' not in src


def test_sm80_and_apple_keep_fp8_dots_off_wgmma():
    params = [("A", "ptr", "f8e4m3"), ("B", "ptr", "f8e4m3"), ("C", "ptr", "f32")]
    params += [(n, "scalar", "i32") for n in "MNK"] + [("SA", "ptr", "f32"), ("SB", "ptr", "f32")]
    constexprs = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "B_T": True, "SCALED": False}
    traced = _frontend.specialize(gemm_e4m3.fn, params, constexprs, {"threads_per_group": 128})
    assert "wgmma" not in _metile.compile_cuda(traced, arch="sm_80")["cuda"]
    assert "simdgroup_multiply_accumulate" in _metile.compile_msl(traced)["msl"]
    no_wgmma = _metile.compile_cuda(traced, arch="sm_90", wgmma=False)["cuda"]
    assert "wgmma" not in no_wgmma


def test_sm90_takes_the_f16_atom_for_fp8_when_asked():
    src = _sm90_source(("e4m3", "e4m3"), (128, 128, 128), True, fp8_wgmma=False)
    assert "e4m3.e4m3" not in src and "k16.f32.f16.f16" in src
    assert "e4m3.e4m3" in _sm90_source(("e4m3", "e4m3"), (128, 128, 128), True)


@pytest.mark.parametrize("blocks", [(128, 128, 128), (64, 64, 32)])
def test_sm90_sums_each_fp8_dot_apart_and_adds_it_in_f32(blocks):
    src = _sm90_source(("e4m3", "e4m3"), blocks, True)
    wgmmas = [s for s in src.splitlines() if "wgmma.mma_async" in s]
    # The first k32 step of each owned tile overwrites (scale-d 0), the rest add.
    owned = max(blocks[0] // 64 // 2, 1)
    assert sum(s.endswith('"r"(0) : "memory");') for s in wgmmas) == owned
    assert sum(s.endswith('"r"(1) : "memory");') for s in wgmmas) == owned * (blocks[2] // 32 - 1)


def test_sm90_fp8_linear_layer_reads_its_operands_through_a_tensor_copy_ring():
    # `dot(x, w.T)` with `w` stored N x K: both tiles K-major as loaded, so
    # the ring holds them as fp8 and the tensor memory accelerator fills it.
    src = _sm90_source(("e4m3", "e4m3"), (128, 128, 128), True)
    assert "cp.async.bulk.tensor.2d" in src and "metile_mbarrier_wait" in src
    # `b` given K x N is transposed by the threads: no ring holds it.
    assert "cp.async.bulk.tensor" not in _sm90_source(("e4m3", "e4m3"), (128, 128, 128), False)
