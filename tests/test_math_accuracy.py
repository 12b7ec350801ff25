"""The float functions (`exp2`, `sin`, `erf`, `pow`, `fma`, ...) on every
backend, held to the error bounds of `metile.testing.accuracy_cases.BOUNDS`
(docs/language.md lists what was measured), special values included; f16/bf16
versions round the f32 result once; integer operands compute in f32; the
composites (`clamp`, `sigmoid`, `softmax`) and the error paths."""

import math

import numpy as np
import pytest

import metile
from metile.testing import accuracy
from metile.testing.accuracy_cases import BOUNDS, CASES, ulp_error


@pytest.mark.parametrize("name", list(CASES))
def test_worst_error_is_within_the_documented_bound(device, name):
    bound = BOUNDS.get(device, {}).get(name)
    if bound is None:
        pytest.skip(f"no documented bound for {name} on {device}")
    m = accuracy.measure(name, n=20_000, seed=7)
    assert m.worst_ulp <= bound, f"{name} on {device}: {m.worst_ulp:.3f} ulp at {m.worst_input}"


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-40, -1e-40, 3.4e38, -3.4e38, 0.5], np.float32)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.arity == 1])
def test_special_values_follow_the_reference(device, name):
    got = accuracy.run(name, [SPECIALS])
    with np.errstate(all="ignore"):
        want = CASES[name].reference(SPECIALS.astype(np.float64))
    err = ulp_error(got, want)
    # Subnormal inputs may be flushed (Metal allows it), and tiny results near
    # zero are compared in absolute terms: the ulp of 2^-149 is meaningless.
    tolerable = (err <= max(BOUNDS.get(device, {}).get(name, 4), 1)) | (np.abs(SPECIALS) < 1e-37)
    assert tolerable.all(), f"{name}: {list(zip(SPECIALS, got, want, err))}"


def test_erf_is_odd_and_saturates(device):
    x = np.array([4.0, 10.0, -4.0, 3.9, 1e-30, -1e-30], np.float32)
    got = accuracy.run("erf", [x])
    np.testing.assert_array_equal(got[:3], [1.0, 1.0, -1.0])
    assert 0.9999999 < got[3] <= 1.0
    np.testing.assert_allclose(got[4:], [2 / math.sqrt(math.pi) * 1e-30, -2 / math.sqrt(math.pi) * 1e-30], rtol=1e-6)


@metile.kernel
def narrow_math(X, Out, N, OP: metile.constexpr, DT: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N, other=1.0).to(DT)
    metile.store(Out + offs, getattr(metile, OP)(x).to("f32"), mask=offs < N)


def _narrow(x, dt):
    """`x` (f64) rounded to f16 or bf16 (to nearest even), as float64."""
    if dt == "f16":
        return x.astype(np.float16).astype(np.float64)
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("name", ["exp2", "log2", "sin", "cos", "tan", "atan", "erf", "rsqrt", "floor", "rint",
                                  "expm1", "log1p", "sinh"])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_precision_functions_round_the_float_result_once(device, name, dt):
    x = accuracy.inputs(name, 200, seed=3)[0].astype(np.float64)
    x = np.clip(x, -10, 10) if name not in ("log2", "log1p", "rsqrt") else np.clip(np.abs(x), 1e-3, 1e3)
    x = _narrow(x, dt)
    out = np.zeros(200, np.float32)
    narrow_math[(1,)](x.astype(np.float32), out, 200, OP=name, DT=dt, BLOCK=256)
    with np.errstate(all="ignore"):
        want = CASES[name].reference(x)
    # One rounding of an f32 result close to `want`: within one ulp of the type.
    mantissa = 10 if dt == "f16" else 7
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(want), 2.0**-14))) - mantissa)
    diff = np.abs(out.astype(np.float64) - want)
    assert (diff <= ulp).all(), (name, x[np.argmax(diff / ulp)], out[np.argmax(diff / ulp)])


@metile.kernel
def int_operands(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N, other=1)
    y = metile.sin(x) + metile.pow(x, 2) + metile.fma(x, x, 1) + metile.sigmoid(x)
    metile.store(Out + offs, y, mask=offs < N)


def test_integer_operands_compute_in_f32(device, rng):
    x = rng.integers(-5, 5, 30).astype(np.int32)
    out = np.zeros(30, np.float32)
    int_operands[(1,)](x, out, 30, BLOCK=32)
    xf = x.astype(np.float64)
    want = np.sin(xf) + xf**2 + (xf * xf + 1) + 1 / (1 + np.exp(-xf))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@metile.kernel
def composites(X, Clamped, Sig, Soft, Soft2, M, N, BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = rm[:, None] * N + rn[None, :]
    x = metile.load(X + ptrs, mask=mask, other=-float("inf"))
    metile.store(Clamped + ptrs, metile.clamp(x, -0.5, 0.5), mask=mask)
    metile.store(Sig + ptrs, metile.sigmoid(x), mask=mask)
    metile.store(Soft + ptrs, metile.softmax(x, dim=1), mask=mask)
    metile.store(Soft2 + ptrs, metile.softmax(x, keep_dims=True), mask=mask)


def test_clamp_sigmoid_softmax(device, rng):
    M, N = 6, 10
    x = (rng.standard_normal((M, N)) * 3).astype(np.float32)
    outs = [np.zeros_like(x) for _ in range(4)]
    composites[(1,)](x, *outs, M, N, BM=8, BN=16)
    xd = x.astype(np.float64)
    np.testing.assert_array_equal(outs[0], np.clip(x, -0.5, 0.5))
    np.testing.assert_allclose(outs[1], 1 / (1 + np.exp(-xd)), rtol=1e-6)
    for axis, out in ((1, outs[2]), (0, outs[3])):
        e = np.exp(xd - xd.max(axis, keepdims=True))
        np.testing.assert_allclose(out, e / e.sum(axis, keepdims=True), rtol=1e-5, atol=1e-7)


@metile.kernel
def clamp_nan(X, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.clamp(metile.load(X + offs), 1.0, 2.0))


def test_clamp_of_nan_is_the_lower_bound(device):
    x = np.array([np.nan, 0.0, 1.5, 3.0], np.float32)
    out = np.zeros_like(x)
    clamp_nan[(1,)](x, out, BLOCK=4)
    np.testing.assert_array_equal(out, [1.0, 1.0, 1.5, 2.0])


# ------------------------------------------------------------------ errors


@metile.kernel
def sin_of_pointer(X, BLOCK: metile.constexpr):
    metile.store(X, metile.sin(X))


def test_math_on_a_pointer_is_refused(device):
    with pytest.raises(metile.CompilationError, match=r"sin does not accept a pointer \(ptr<f32>\)"):
        sin_of_pointer[(1,)](np.zeros(4, np.float32), BLOCK=4)


@metile.kernel
def umulhi_floats(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(X + offs, metile.umulhi(x, x))


def test_umulhi_of_floats_is_refused(device):
    with pytest.raises(metile.CompilationError, match="umulhi needs integer operands, got f32") as e:
        umulhi_floats[(1,)](np.zeros(4, np.float32), BLOCK=4)
    assert "metile.umulhi(x, x)" in str(e.value)


@metile.kernel
def fma_pointer(X, BLOCK: metile.constexpr):
    metile.store(X, metile.fma(X, 1.0, 2.0))


def test_fma_of_a_pointer_is_refused(device):
    with pytest.raises(metile.CompilationError, match="fma does not accept a pointer operand"):
        fma_pointer[(1,)](np.zeros(4, np.float32), BLOCK=4)


@metile.kernel
def softmax_bad_flag(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(X + offs, metile.softmax(x, ieee_rounding="yes"))


def test_softmax_flags_are_bools(device):
    with pytest.raises(metile.CompilationError, match="softmax's ieee_rounding must be a bool, got 'yes'"):
        softmax_bad_flag[(1,)](np.zeros(4, np.float32), BLOCK=4)
