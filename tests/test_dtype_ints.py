"""The narrow integer dtypes (int8, uint8, int16, uint16) and uint64 on every
backend: loads and stores, wrapping arithmetic, C's division, shifts and
bitwise ops, conversions, reductions (Triton's widening of narrow integers),
scans and sorts, against exact Python integers at ragged sizes; scalar
arguments beyond int32 and parameters that declare their dtype."""

import numpy as np
import pytest

import metile

NEW_INTS = [np.int8, np.uint8, np.int16, np.uint16, np.uint64]
LANGUAGE = {
    np.int8: metile.int8,
    np.uint8: metile.uint8,
    np.int16: metile.int16,
    np.uint16: metile.uint16,
    np.int32: metile.int32,
    np.uint32: metile.uint32,
    np.int64: metile.int64,
    np.uint64: metile.uint64,
}


def _bits(dtype):
    return np.dtype(dtype).itemsize * 8


def _wrap(values, dtype):
    bits = _bits(dtype)
    mask = (1 << bits) - 1
    signed = np.issubdtype(dtype, np.signedinteger)
    out = []
    for v in values:
        v &= mask
        if signed and v >> (bits - 1):
            v -= 1 << bits
        out.append(v)
    return np.array(out, dtype=dtype)


def _c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _round_int(v, significant):
    """`v` rounded to `significant` bits (to nearest, ties to even), exactly, as a float."""
    m = abs(v)
    width = m.bit_length()
    if width <= significant:
        return float(v)
    shift = width - significant
    kept, rest, half = m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1)
    if rest > half or (rest == half and kept & 1):
        kept += 1
    return float(kept << shift) * (-1 if v < 0 else 1)


def _random_ints(rng, n, dtype):
    info = np.iinfo(dtype)
    edges = [info.min, info.max, info.min + 1, info.max - 1, 0, 1, 7]
    if info.min < 0:
        edges.append(-1)
    body = [int(v) for v in rng.integers(0, 1 << 62, max(n - len(edges), 0))]
    return _wrap((edges + body)[:n], dtype)


@metile.kernel
def int_arith(A, B, S, ADD, SUB, MUL, DIV, REM, SHL, SHR, BITS, NEG, ABS, MAX, HI, LT, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    a = metile.load(A + offs, mask=mask, other=1)
    b = metile.load(B + offs, mask=mask, other=1)
    s = metile.load(S + offs, mask=mask, other=0)
    metile.store(ADD + offs, a + b, mask=mask)
    metile.store(SUB + offs, a - b, mask=mask)
    metile.store(MUL + offs, a * b, mask=mask)
    metile.store(DIV + offs, a // b, mask=mask)
    metile.store(REM + offs, a % b, mask=mask)
    metile.store(SHL + offs, a << s, mask=mask)
    metile.store(SHR + offs, a >> s, mask=mask)
    metile.store(BITS + offs, (a & b) ^ (~a | s), mask=mask)
    metile.store(NEG + offs, -a, mask=mask)
    metile.store(ABS + offs, metile.abs(a), mask=mask)
    metile.store(MAX + offs, metile.maximum(a, b) + metile.minimum(a, b), mask=mask)
    metile.store(HI + offs, metile.umulhi(a, b), mask=mask)
    metile.store(LT + offs, a < b, mask=mask)


@pytest.mark.parametrize("dtype", NEW_INTS)
@pytest.mark.parametrize("n", [9, 200])
def test_arithmetic_wraps_like_the_type(device, rng, dtype, n):
    a = _random_ints(rng, n, dtype)
    b = _random_ints(rng, n, dtype)
    b[b == 0] = 3
    s = rng.integers(0, _bits(dtype), n).astype(dtype)
    outs = [np.zeros(n, dtype) for _ in range(12)]
    lt = np.zeros(n, np.bool_)
    int_arith[(metile.cdiv(n, 64),)](a, b, s, *outs, lt, n, BLOCK=64)
    add, sub, mul, div, rem, shl, shr, bits, neg, ab, mx, hi = outs
    ai, bi, si = [int(v) for v in a], [int(v) for v in b], [int(v) for v in s]
    w = _bits(dtype)
    signed = np.issubdtype(dtype, np.signedinteger)
    np.testing.assert_array_equal(add, _wrap([x + y for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(sub, _wrap([x - y for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(mul, _wrap([x * y for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(div, _wrap([_c_div(x, y) for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(rem, _wrap([x - y * _c_div(x, y) for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(shl, _wrap([x << c for x, c in zip(ai, si)], dtype))
    np.testing.assert_array_equal(shr, _wrap([x >> c for x, c in zip(ai, si)], dtype))
    np.testing.assert_array_equal(bits, _wrap([(x & y) ^ (~x | c) for x, y, c in zip(ai, bi, si)], dtype))
    np.testing.assert_array_equal(neg, _wrap([-x for x in ai], dtype))
    np.testing.assert_array_equal(ab, _wrap([abs(x) if signed else x for x in ai], dtype))
    np.testing.assert_array_equal(mx, _wrap([x + y for x, y in zip(ai, bi)], dtype))
    mod = 1 << w
    np.testing.assert_array_equal(hi, _wrap([((x % mod) * (y % mod)) >> w for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(lt, np.array([x < y for x, y in zip(ai, bi)]))


@metile.kernel
def extremes(I8, U64, OUT8, OUT64, BIG, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(I8 + offs)
    metile.store(OUT8 + offs, x + 1)
    metile.store(OUT8 + BLOCK + offs, x // -1)
    metile.store(OUT8 + 2 * BLOCK + offs, metile.abs(x))
    u = metile.load(U64 + offs)
    metile.store(OUT64 + offs, u + BIG)
    metile.store(OUT64 + BLOCK + offs, metile.where(u > BIG, u // 3, u >> 60))
    metile.store(OUT64 + 2 * BLOCK + offs, metile.maximum(u, BIG))


def test_extremes_wrap(device):
    i8 = np.array([127, -128, -1, 0], np.int8)
    u64 = np.array([2**63 + 5, 2**64 - 1, 1, 2**63], np.uint64)
    big = 2**63 + 7  # a Python int beyond int64 is a uint64 argument
    out8 = np.zeros(12, np.int8)
    out64 = np.zeros(12, np.uint64)
    extremes[(1,)](i8, u64, out8, out64, big, BLOCK=4)
    np.testing.assert_array_equal(out8[:4], [-128, -127, 0, 1])
    np.testing.assert_array_equal(out8[4:8], [-127, -128, 1, 0])
    np.testing.assert_array_equal(out8[8:], [127, -128, 1, 0])
    us = [int(v) for v in u64]
    np.testing.assert_array_equal(out64[:4], np.array([(v + big) % 2**64 for v in us], np.uint64))
    np.testing.assert_array_equal(out64[4:8], np.array([v // 3 if v > big else v >> 60 for v in us], np.uint64))
    np.testing.assert_array_equal(out64[8:], np.array([max(v, big) for v in us], np.uint64))


@metile.kernel
def casts(X, OUT, N, BLOCK: metile.constexpr, TO: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(OUT + offs, metile.load(X + offs, mask=mask).to(TO), mask=mask)


CAST_TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("src", CAST_TYPES)
def test_integer_conversions_wrap(device, rng, src):
    n = 70
    x = _random_ints(rng, n, src)
    floats = [np.float32, np.float16]
    try:
        import ml_dtypes

        floats.append(ml_dtypes.bfloat16)
    except ImportError:
        pass
    for dst in [np.int8, np.uint8, np.int16, np.uint16, np.uint64, *floats]:
        out = np.zeros(n, dst)
        casts[(metile.cdiv(n, 64),)](x, out, n, BLOCK=64, TO=LANGUAGE.get(dst, np.dtype(dst).name))
        if np.issubdtype(dst, np.integer):
            want = _wrap([int(v) for v in x], dst)
        else:
            # One rounding from the exact integer.
            sig = {np.dtype(np.float32): 24, np.dtype(np.float16): 11}.get(np.dtype(dst), 8)
            with np.errstate(over="ignore"):  # beyond f16's range is inf
                want = np.array([_round_int(int(v), sig) for v in x], np.float64).astype(dst)
        np.testing.assert_array_equal(out, want, err_msg=f"{np.dtype(src).name} -> {np.dtype(dst).name}")


def test_float_to_narrow_int_truncates_and_saturates(device):
    x = np.array([1e9, -1e9, 200.7, -200.7, np.nan, np.inf, -np.inf, 3.9, -3.9, 65535.5], np.float32)
    n = len(x)
    for dst in [np.int8, np.uint8, np.int16, np.uint16, np.uint64]:
        out = np.zeros(n, dst)
        casts[(1,)](x, out, n, BLOCK=16, TO=LANGUAGE[dst])
        info = np.iinfo(dst)
        t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=float(info.max), neginf=float(info.min)))
        want = np.array([min(max(int(v), int(info.min)), int(info.max)) for v in t], dst)
        np.testing.assert_array_equal(out, want, err_msg=np.dtype(dst).name)


@metile.kernel
def narrow_reductions(X, SUMS, EXT, XOR, CS, CP, SO, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(SUMS, metile.sum(x))
    metile.store(SUMS + 1, metile.sum(x, dtype=x.dtype))
    metile.store(EXT, metile.max(x))
    metile.store(EXT + 1, metile.min(x))
    metile.store(XOR, metile.xor_sum(x))
    metile.store(CS + offs, metile.cumsum(x), mask=mask)
    metile.store(CP + offs, metile.cumprod(x), mask=mask)
    metile.store(SO + offs, metile.sort(x, descending=True), mask=mask)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint64])
@pytest.mark.parametrize("n", [5, 100])
def test_reductions_widen_narrow_integers_as_triton(device, rng, dtype, n):
    x = _random_ints(rng, n, dtype)[::-1].copy()
    narrow = np.iinfo(dtype).bits < 32
    wide = (np.uint32 if np.issubdtype(dtype, np.unsignedinteger) else np.int32) if narrow else dtype
    store_t = np.uint64 if dtype == np.uint64 else np.int64
    sums = np.zeros(2, store_t)
    ext = np.zeros(2, store_t)
    xor = np.zeros(1, dtype)
    cs = np.zeros(n, store_t)
    cp = np.zeros(n, dtype)
    so = np.zeros(n, dtype)
    narrow_reductions[(1,)](x, sums, ext, xor, cs, cp, so, n, BLOCK=128)
    xi = [int(v) for v in x]
    # A sum of narrow integers is in i32/u32 (no wrap at 127); dtype= keeps the type.
    assert sums[0] == _wrap([sum(xi)], wide)[0]
    assert sums[1] == _wrap([sum(xi)], dtype)[0]
    assert [int(v) for v in ext] == [max(xi), min(xi)]
    xor_all = 0
    for v in xi:
        xor_all ^= v
    assert xor[0] == _wrap([xor_all], dtype)[0]
    running = np.cumsum(np.array(xi, dtype=object))
    np.testing.assert_array_equal(cs, _wrap([int(v) for v in running], wide).astype(store_t))
    prods, p = [], 1
    for v in xi:
        p *= v
        prods.append(p)
    np.testing.assert_array_equal(cp, _wrap(prods, dtype))
    np.testing.assert_array_equal(so, np.array(sorted(xi, reverse=True), dtype))


def test_max_of_uint64_compares_unsigned(device):
    x = np.array([2**64 - 1, 5, 2**63, 7], np.uint64)
    ext = np.zeros(2, np.uint64)
    narrow_reductions[(1,)](
        x, np.zeros(2, np.int64), ext, np.zeros(1, np.uint64), np.zeros(4, np.int64),
        np.zeros(4, np.uint64), np.zeros(4, np.uint64), 4, BLOCK=8,
    )
    assert [int(v) for v in ext] == [2**64 - 1, 5]


@metile.kernel
def scalar_types(OUT, A, B, C):
    metile.store(OUT, A.dtype == metile.int64)
    metile.store(OUT + 1, B.dtype == metile.uint64)
    metile.store(OUT + 2, C.dtype == metile.int32)


def test_python_ints_beyond_int32_pass_as_int64_or_uint64():
    out = np.zeros(3, np.bool_)
    scalar_types[(1,)](out, 2**40, 2**63, 5)
    assert out.all()
    with pytest.raises(OverflowError, match=r"argument 'A' = 18446744073709551616 does not fit in 64 bits"):
        scalar_types[(1,)](out, 2**64, 1, 1)


@metile.kernel
def declared_scalars(OUT, A: metile.int8, B: metile.uint16, X: metile.float16):
    metile.store(OUT, A.to(metile.float32))
    metile.store(OUT + 1, B.to(metile.float32))
    metile.store(OUT + 2, X.to(metile.float32))
    metile.store(OUT + 3, (A.dtype == metile.int8) & (B.dtype == metile.uint16) & (X.dtype == metile.float16))


def test_annotated_scalars_take_their_declared_dtype(device):
    out = np.zeros(4, np.float32)
    declared_scalars[(1,)](out, -100, 60000, 0.1)
    np.testing.assert_array_equal(out, [-100.0, 60000.0, np.float32(np.float16(0.1)), 1.0])
    with pytest.raises(OverflowError, match=r"argument 'A' = 200 does not fit its declared dtype metile.int8"):
        declared_scalars[(1,)](out, 200, 1, 1.0)
    with pytest.raises(TypeError, match=r"argument 'B' is declared metile.uint16 but is a float"):
        declared_scalars[(1,)](out, 1, 1.5, 1.0)
    with pytest.raises(TypeError, match=r"argument 'X' is declared metile.float16 but is a buffer of float32"):
        declared_scalars[(1,)](out, 1, 1, np.zeros(2, np.float32))


@metile.kernel
def shuffled(X, Y, BLOCK: metile.constexpr):
    t = metile.thread_id()
    x = metile.load(X + t)
    metile.store(Y + t, metile.simd_shuffle_xor(x, 1))


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.uint64])
def test_shuffles_move_narrow_and_wide_integers(device, dtype):
    threads = 128
    x = _wrap(list(range(-60, threads - 60)), dtype) if np.iinfo(dtype).min < 0 else np.arange(threads).astype(dtype)
    y = np.zeros(threads, dtype)
    shuffled[(1,)](x, y, BLOCK=threads)
    np.testing.assert_array_equal(y, x[np.arange(threads) ^ 1])


@pytest.mark.parametrize(
    ("name", "numpy_dtype"),
    [
        (metile.int8, np.int8),
        (metile.uint8, np.uint8),
        (metile.int16, np.int16),
        (metile.uint16, np.uint16),
        (metile.uint64, np.uint64),
        (metile.float64, np.float64),
        ("uint16", np.uint16),
    ],
)
def test_buffers_of_the_new_dtypes(device, name, numpy_dtype):
    buf = metile.Buffer.zeros((7,), dtype=name)
    assert buf.numpy().dtype == numpy_dtype
    x = np.arange(7).astype(numpy_dtype)
    out = metile.Buffer.zeros((7,), dtype=name)
    launch = lambda: casts[(1,)](x, out, 7, BLOCK=8, TO=name)  # noqa: E731
    if numpy_dtype == np.float64 and device in ("msl-emu", "metal"):
        with pytest.raises(metile.CompilationError, match="float64 is not supported on Apple GPUs"):
            launch()
        return
    launch()
    np.testing.assert_array_equal(out.numpy(), x)


def test_fp8_buffers_need_ml_dtypes():
    try:
        import ml_dtypes
    except ImportError:
        with pytest.raises(TypeError, match=r"float8_e4m3fn buffers need the ml_dtypes package \(numpy has no "
                                            r"float8_e4m3fn\); without it, pass uint8 storage"):
            metile.Buffer.zeros((4,), dtype=metile.float8e4nv)
        return
    assert metile.Buffer.zeros((4,), dtype=metile.float8e5).numpy().dtype == ml_dtypes.float8_e5m2
