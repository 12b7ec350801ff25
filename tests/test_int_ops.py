"""Integer operators on every integer dtype (i32, u32, i64): `//` and `%`
truncating toward zero as in C, shifts (arithmetic on signed types, logical on
unsigned), `& | ^ ~`, and `umulhi`, on every backend against exact Python
integer arithmetic, at ragged sizes."""

import numpy as np
import pytest

import metile

DTYPES = [np.int32, np.uint32, np.int64]


def _bits(dtype):
    return np.dtype(dtype).itemsize * 8


def _wrap(values, dtype):
    """Python ints reduced to `dtype`'s two's-complement range."""
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


def _c_rem(a, b):
    return a - b * _c_div(a, b)


@metile.kernel
def int_ops(A, B, S, Q, R, SHL, SHR, BITS, HI, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    a = metile.load(A + offs, mask=mask, other=1)
    b = metile.load(B + offs, mask=mask, other=1)
    s = metile.load(S + offs, mask=mask, other=0)
    metile.store(Q + offs, a // b, mask=mask)
    metile.store(R + offs, a % b, mask=mask)
    metile.store(SHL + offs, a << s, mask=mask)
    metile.store(SHR + offs, a >> s, mask=mask)
    metile.store(BITS + offs, (a & b) ^ (~a | s), mask=mask)
    metile.store(HI + offs, metile.umulhi(a, b), mask=mask)


def _random_ints(rng, n, dtype):
    info = np.iinfo(dtype)
    edges = [info.min, info.max, info.min + 1, 0, 1, 7, -1 if info.min < 0 else 2]
    wide = np.uint64 if dtype == np.uint32 else np.int64
    body = rng.integers(info.min, int(info.max) + 1, n - len(edges), dtype=wide)
    return np.concatenate([np.array(edges, dtype=wide), body]).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [7, 100, 256])
def test_integer_operators_match_exact_arithmetic(device, rng, dtype, n):
    a = _random_ints(rng, n, dtype)
    b = _random_ints(rng, n, dtype)
    b[b == 0] = 3
    small = rng.integers(1, 100, n).astype(dtype)
    b[: n // 3] = small[: n // 3]
    s = rng.integers(0, _bits(dtype), n).astype(dtype)
    outs = [np.zeros(n, dtype) for _ in range(6)]
    int_ops[(metile.cdiv(n, 64),)](a, b, s, *outs, n, BLOCK=64)
    q, r, shl, shr, bits, hi = outs
    ai, bi, si = [int(v) for v in a], [int(v) for v in b], [int(v) for v in s]
    width = _bits(dtype)
    unsigned = [(v % (1 << width)) for v in ai], [(v % (1 << width)) for v in bi]
    np.testing.assert_array_equal(q, _wrap([_c_div(x, y) for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(r, _wrap([_c_rem(x, y) for x, y in zip(ai, bi)], dtype))
    np.testing.assert_array_equal(shl, _wrap([x << k for x, k in zip(ai, si)], dtype))
    np.testing.assert_array_equal(shr, _wrap([x >> k for x, k in zip(ai, si)], dtype))
    np.testing.assert_array_equal(bits, (a & b) ^ (~a | s))
    np.testing.assert_array_equal(hi, _wrap([(x * y) >> width for x, y in zip(*unsigned)], dtype))


@metile.kernel
def umulhi_literal(A, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(A + offs, mask=offs < N)
    metile.store(Out + offs, metile.umulhi(a, 0x9E3779B9), mask=offs < N)


def test_umulhi_with_a_literal_keeps_the_tile_type(device, rng):
    a = rng.integers(0, 2**32, 33, dtype=np.uint64).astype(np.uint32)
    out = np.zeros_like(a)
    umulhi_literal[(1,)](a, out, 33, BLOCK=64)
    np.testing.assert_array_equal(out, ((a.astype(np.uint64) * 0x9E3779B9) >> 32).astype(np.uint32))


@metile.kernel
def shift_float(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(X + offs, x << 2)


def test_shifting_a_float_is_refused(device):
    with pytest.raises(metile.CompilationError, match="shl needs integer operands, got f32"):
        shift_float[(1,)](np.zeros(4, np.float32), BLOCK=4)


@metile.kernel
def div_rem(A, B, Q, R, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    a = metile.load(A + offs)
    b = metile.load(B + offs)
    metile.store(Q + offs, a // b)
    metile.store(R + offs, a % b)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_signed_division_truncates_and_the_lowest_over_minus_one_wraps(device, dtype):
    low = np.iinfo(dtype).min
    a = np.array([-7, 7, -7, 7, low, low, -1, 5], dtype)
    b = np.array([2, -2, -2, 2, -1, 1, 3, 7], dtype)
    q, r = np.zeros_like(a), np.zeros_like(a)
    div_rem[(1,)](a, b, q, r, BLOCK=8)
    np.testing.assert_array_equal(q, np.array([-3, -3, 3, 3, low, low, 0, 0], dtype))
    np.testing.assert_array_equal(r, np.array([-1, 1, -1, 1, 0, 0, -1, 5], dtype))
