"""fp8 (e4m3fn and e5m2) as storage on every backend: conversions to and from
fp8 against an exact numpy model (round to nearest even, saturating, NaN to
0x7f), uint8 arrays as fp8 storage through an annotated parameter, arithmetic
computed in f32 and rounded once, reductions, scans, sorts and dot."""

import numpy as np
import pytest
from fp8_reference import decode, encode, interesting_values, max_finite

import metile

FP8 = {"e4m3": metile.float8e4nv, "e5m2": metile.float8e5}


@metile.kernel
def to_e4m3(X, Y: metile.float8e4nv, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Y + offs, metile.load(X + offs, mask=mask).to(metile.float8e4nv), mask=mask)


@metile.kernel
def to_e5m2(X, Y: metile.float8e5, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Y + offs, metile.load(X + offs, mask=mask).to(metile.float8e5), mask=mask)


@metile.kernel
def from_e4m3(X: metile.float8e4nv, F32, F16, I32, U8, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(F32 + offs, x.to(metile.float32), mask=mask)
    metile.store(F16 + offs, x.to(metile.float16), mask=mask)
    metile.store(I32 + offs, x.to(metile.int32), mask=mask)
    metile.store(U8 + offs, x.to(metile.uint8), mask=mask)


@metile.kernel
def from_e5m2(X: metile.float8e5, F32, F16, I32, U8, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(F32 + offs, x.to(metile.float32), mask=mask)
    metile.store(F16 + offs, x.to(metile.float16), mask=mask)
    metile.store(I32 + offs, x.to(metile.int32), mask=mask)
    metile.store(U8 + offs, x.to(metile.uint8), mask=mask)


TO = {"e4m3": to_e4m3, "e5m2": to_e5m2}
FROM = {"e4m3": from_e4m3, "e5m2": from_e5m2}


def _c_float_to_int(x, dtype):
    """C's float-to-int conversion as the language defines it: truncate, saturate, NaN to 0."""
    info = np.iinfo(dtype)
    t = np.trunc(np.nan_to_num(x, nan=0.0, posinf=info.max, neginf=info.min))
    return np.clip(t, info.min, info.max).astype(dtype)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_f32_to_fp8_rounds_to_nearest_even_and_saturates(device, rng, fmt):
    x = interesting_values(fmt, rng)
    n = len(x)
    y = np.zeros(n, np.uint8)
    TO[fmt][(metile.cdiv(n, 256),)](x, y, n, BLOCK=256)
    want = encode(x.astype(np.float64), fmt)
    bad = np.flatnonzero(y != want)
    assert bad.size == 0, [(float(x[i]), hex(y[i]), hex(want[i])) for i in bad[:8]]


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_fp8_code_decodes_exactly(device, fmt):
    codes = np.arange(256, dtype=np.uint8)
    n = 256 - 5  # a ragged launch: the last block is partial
    outs = [np.zeros(n, t) for t in (np.float32, np.float16, np.int32, np.uint8)]
    FROM[fmt][(metile.cdiv(n, 64),)](codes[:n], *outs, n, BLOCK=64)
    value = decode(codes[:n], fmt)
    np.testing.assert_array_equal(outs[0], value.astype(np.float32))
    np.testing.assert_array_equal(outs[1], value.astype(np.float16))
    np.testing.assert_array_equal(outs[2], _c_float_to_int(value, np.int32))
    np.testing.assert_array_equal(outs[3], _c_float_to_int(value, np.uint8))


@metile.kernel
def narrow_to_fp8(H, B, Ints, Y4: metile.float8e4nv, Y5: metile.float8e5, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    h = metile.load(H + offs, mask=mask)
    i = metile.load(Ints + offs, mask=mask)
    metile.store(Y4 + offs, h.to(metile.float8e4nv), mask=mask)
    metile.store(Y5 + offs, i.to(metile.float8e5), mask=mask)
    metile.store(Y4 + N + offs, metile.load(B + offs, mask=mask).to(metile.float8e4nv), mask=mask)


def test_f16_bf16_and_int_sources_round_once(device, rng):
    n = 300
    h = (rng.standard_normal(n) * 60).astype(np.float16)
    h[:4] = [np.inf, -np.inf, 65504, np.nan]
    i = rng.integers(-70000, 70000, n).astype(np.int32)
    i[:3] = [57344, 61439, 61440]
    b_values = (rng.standard_normal(n) * 300).astype(np.float32)
    b = _bfloat16_or_skip(b_values)
    y4 = np.zeros(2 * n, np.uint8)
    y5 = np.zeros(n, np.uint8)
    narrow_to_fp8[(metile.cdiv(n, 128),)](h, b, i, y4, y5, n, BLOCK=128)
    np.testing.assert_array_equal(y4[:n], encode(h.astype(np.float64), "e4m3"))
    np.testing.assert_array_equal(y5, encode(i.astype(np.float64), "e5m2"))
    np.testing.assert_array_equal(y4[n:], encode(b.astype(np.float32).astype(np.float64), "e4m3"))


def _bfloat16_or_skip(values):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    return values.astype(ml_dtypes.bfloat16)


@metile.kernel
def fp8_arith(X: metile.float8e4nv, Y: metile.float8e4nv, S: metile.float8e4nv, D, C, F, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(S + offs, x + y, mask=mask)
    metile.store(S + N + offs, x * y, mask=mask)
    metile.store(S + 2 * N + offs, metile.maximum(-x, metile.abs(y)), mask=mask)
    metile.store(S + 3 * N + offs, x - 1.5, mask=mask)
    metile.store(D + offs, (x + y).dtype == metile.float8e4nv, mask=mask)
    metile.store(C + offs, x < y, mask=mask)
    # A float literal is weak: `x * 0.1` stays fp8 (0.1 rounded to fp8 first);
    # with an f32 tile the result is f32.
    metile.store(F + offs, x * 0.1 + metile.load(F + offs, mask=mask), mask=mask)


def test_arithmetic_computes_in_f32_and_rounds_once(device, rng):
    n = 200
    x = rng.integers(0, 256, n).astype(np.uint8)
    y = rng.integers(0, 256, n).astype(np.uint8)
    x[x & 0x7F == 0x7F] = 0x10  # no NaNs: compare them separately
    y[y & 0x7F == 0x7F] = 0x11
    s = np.zeros(4 * n, np.uint8)
    d = np.zeros(n, np.bool_)
    c = np.zeros(n, np.bool_)
    f = rng.standard_normal(n).astype(np.float32)
    f_in = f.copy()
    fp8_arith[(metile.cdiv(n, 64),)](x, y, s, d, c, f, n, BLOCK=64)
    xv = decode(x, "e4m3").astype(np.float32)
    yv = decode(y, "e4m3").astype(np.float32)
    np.testing.assert_array_equal(s[:n], encode(xv + yv, "e4m3"))
    np.testing.assert_array_equal(s[n : 2 * n], encode(xv * yv, "e4m3"))
    np.testing.assert_array_equal(s[2 * n : 3 * n], encode(np.maximum(-xv, np.abs(yv)), "e4m3"))
    np.testing.assert_array_equal(s[3 * n :], encode(xv - np.float32(1.5), "e4m3"))
    assert d.all()
    np.testing.assert_array_equal(c, xv < yv)
    tenth = decode(encode([0.1], "e4m3"), "e4m3").astype(np.float32)
    scaled = decode(encode(xv * tenth, "e4m3"), "e4m3").astype(np.float32)
    np.testing.assert_array_equal(f, scaled + f_in)


@metile.kernel
def fp8_reductions(
    X: metile.float8e5, S: metile.float8e5, M, CS: metile.float8e5, SO: metile.float8e5, N, BLOCK: metile.constexpr
):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(S, metile.sum(x))
    metile.store(S + 1, metile.max(x))
    metile.store(S + 2, metile.min(x))
    metile.store(M, metile.argmax(x, axis=0))
    metile.store(CS + offs, metile.cumsum(x), mask=mask)
    metile.store(SO + offs, metile.sort(x), mask=mask)


@pytest.mark.parametrize("n", [5, 64])
def test_reductions_scans_and_sort_compute_in_f32(device, rng, n):
    # Values in [1/8, 16] with 2 mantissa bits: every f32 partial sum is exact,
    # so the order a backend adds in does not matter.
    values = rng.choice([0.125, 0.25, 0.375, 1.5, 3.0, 7.0, 12.0, 16.0, -0.5, -2.0], n)
    x = encode(values, "e5m2")
    s = np.zeros(3, np.uint8)
    m = np.zeros(1, np.int32)
    cs = np.zeros(n, np.uint8)
    so = np.zeros(n, np.uint8)
    fp8_reductions[(1,)](x, s, m, cs, so, n, BLOCK=64)
    v = decode(x, "e5m2")
    np.testing.assert_array_equal(s, encode([v.sum(), v.max(), v.min()], "e5m2"))
    assert m[0] == np.argmax(v)
    np.testing.assert_array_equal(cs, encode(np.cumsum(v), "e5m2"))
    np.testing.assert_array_equal(so, encode(np.sort(v), "e5m2"))


@metile.kernel
def fp8_dot(A: metile.float8e4nv, B: metile.float8e4nv, C, M: metile.constexpr, K: metile.constexpr):
    rows = metile.arange(0, M)
    cols = metile.arange(0, K)
    a = metile.load(A + rows[:, None] * K + cols[None, :])
    b = metile.load(B + cols[:, None] * M + rows[None, :])
    metile.store(C + rows[:, None] * M + rows[None, :], metile.dot(a, b))


def test_dot_multiplies_fp8_values_exactly(device, rng):
    m, k = 16, 16
    a = encode(rng.choice([0.5, 1.0, -1.5, 2.0, 0.25, -3.0], (m, k)), "e4m3")
    b = encode(rng.choice([1.0, -0.75, 4.0, 0.125], (k, m)), "e4m3")
    c = np.zeros((m, m), np.float32)
    fp8_dot[(1,)](a, b, c, M=m, K=k)
    want = decode(a, "e4m3") @ decode(b, "e4m3")
    np.testing.assert_array_equal(c, want.astype(np.float32))


@metile.kernel
def copy_fp8(X: metile.float8e4nv, Y: metile.float8e4nv, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Y + offs, metile.load(X + offs, mask=mask, other=2.5), mask=mask | (offs < N + 3))


def test_fp8_values_move_as_bytes(device):
    n = 253
    x = np.arange(n, dtype=np.uint8)  # every code, NaN payloads included
    y = np.zeros(n + 3, np.uint8)
    copy_fp8[(metile.cdiv(n, 64),)](x, y, n, BLOCK=64)
    np.testing.assert_array_equal(y[:n], x)
    np.testing.assert_array_equal(y[n:], encode([2.5] * 3, "e4m3"))


def test_int8_storage_is_accepted_too(device):
    x = np.array([0x38, 0xB8, 0x7E], np.uint8).view(np.int8)
    y = np.zeros(6, np.uint8)
    copy_fp8[(1,)](x, y, 3, BLOCK=16)
    np.testing.assert_array_equal(y[:3], x.view(np.uint8))


def test_ml_dtypes_fp8_arrays_are_fp8_buffers(device, rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")

    @metile.kernel
    def to_f32(X, Y, N, BLOCK: metile.constexpr):
        offs = metile.arange(0, BLOCK)
        mask = offs < N
        metile.store(Y + offs, metile.load(X + offs, mask=mask), mask=mask)

    for dtype, fmt in [(ml_dtypes.float8_e4m3fn, "e4m3"), (ml_dtypes.float8_e5m2, "e5m2")]:
        codes = rng.integers(0, 256, 50).astype(np.uint8)
        y = np.zeros(50, np.float32)
        to_f32[(1,)](codes.view(dtype), y, 50, BLOCK=64)
        np.testing.assert_array_equal(y, decode(codes, fmt).astype(np.float32))


def test_a_declared_fp8_parameter_refuses_other_buffers():
    with pytest.raises(TypeError, match=r"argument 'X' is declared metile.float8e4nv but is a buffer of float32; "
                                        r"pass uint8 storage or an array of that fp8 dtype"):
        copy_fp8[(1,)](np.zeros(4, np.float32), np.zeros(4, np.uint8), 4, BLOCK=16)
    with pytest.raises(TypeError, match=r"argument 'X' is declared metile.float8e4nv but is a uint8 scalar"):
        copy_fp8[(1,)](np.uint8(3), np.zeros(4, np.uint8), 4, BLOCK=16)


@metile.kernel
def fp8_bitwise(X: metile.float8e4nv, Y, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    metile.store(Y + offs, x & 1, mask=offs < N)


def test_bitwise_ops_on_fp8_are_refused(device):
    with pytest.raises(metile.CompilationError, match="bitwise and needs integer or bool operands, got f8e4m3"):
        fp8_bitwise[(1,)](np.zeros(4, np.uint8), np.zeros(4, np.int32), 4, BLOCK=16)


def test_saturation_bounds():
    assert max_finite("e4m3") == 448.0
    assert max_finite("e5m2") == 57344.0
    assert list(encode([448.0, 464.0, 1e9, -np.inf], "e4m3")) == [0x7E, 0x7E, 0x7E, 0xFE]
    assert list(encode([np.inf, 61440.0], "e5m2")) == [0x7B, 0x7B]


@metile.kernel
def bit_cast(X, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.load(X + offs).to(metile.float8e4nv, bitcast=True))


@metile.kernel
def round_toward_zero(X, Y, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Y + offs, metile.load(X + offs).to(metile.float8e4nv, fp_downcast_rounding="rtz"))


def test_unsupported_conversion_options_are_refused(device):
    x = np.zeros(16, np.float32)
    with pytest.raises(metile.CompilationError, match=r"to\(\.\.\., bitcast=True\) is not supported; a parameter "
                                                      r"annotated with its dtype"):
        bit_cast[(1,)](x, np.zeros(16, np.float32), BLOCK=16)
    with pytest.raises(metile.CompilationError, match=r"fp_downcast_rounding='rtz' is not supported; conversions "
                                                      r"round to nearest even"):
        round_toward_zero[(1,)](x, np.zeros(16, np.float32), BLOCK=16)
