"""float64 on the cpu backend (and cuda where present), computed in double
precision throughout; Apple GPUs have no double, so msl-emu (and Metal) refuse
f64 kernels with a clear CompilationError."""

import math

import numpy as np
import pytest

import metile


def _f64_or_refused(device, launch):
    """Runs `launch` where f64 exists; on Apple backends checks the refusal."""
    if device in ("msl-emu", "metal"):
        with pytest.raises(metile.CompilationError, match=r"float64 is not supported on Apple GPUs \(Metal has no "
                                                          r"double\); compute in float32"):
            launch()
        return False
    launch()
    return True


@metile.kernel
def f64_sum(X, OUT, N, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,), dtype=metile.float64)
    for start in metile.tile_range(0, N, BLOCK):
        offs = start + metile.arange(0, BLOCK)
        acc += metile.load(X + offs, mask=offs < N)
    metile.store(OUT, metile.sum(acc))
    metile.store(OUT + 1, metile.sum(metile.load(X + metile.arange(0, BLOCK), mask=metile.arange(0, BLOCK) < N)))


def test_a_sum_that_f32_would_lose_is_exact(device):
    # 2^30 + 1000 ones: each one is below half an f32 ulp of 2^30, so an f32 sum stays 2^30.
    n = 1001
    x = np.ones(n, np.float64)
    x[0] = 2.0**30
    out = np.zeros(2, np.float64)
    if _f64_or_refused(device, lambda: f64_sum[(1,)](x, out, n, BLOCK=128)):
        assert out[0] == 2.0**30 + 1000
        assert out[1] == 2.0**30 + 127
        assert np.float32(2.0**30) + np.float32(1) == np.float32(2.0**30)


@metile.kernel
def f64_math(X, Y, OUT, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    results = [
        x + y,
        x * y - y / x,
        x // y,
        x % y,
        metile.exp(x),
        metile.log(metile.abs(x)),
        metile.sqrt(metile.abs(x)),
        metile.sin(x),
        metile.tanh(x),
        metile.erf(x),
        metile.pow(metile.abs(x), y),
        metile.fma(x, y, 1.0),
        metile.maximum(x, y),
    ]
    for k, r in enumerate(results):
        metile.store(OUT + k * N + offs, r, mask=mask)


def test_math_is_double_precision(device, rng):
    n = 150
    x = rng.uniform(-5, 5, n)
    y = rng.uniform(0.5, 3, n)
    out = np.zeros(13 * n, np.float64)
    if not _f64_or_refused(device, lambda: f64_math[(metile.cdiv(n, 64),)](x, y, out, n, BLOCK=64)):
        return
    want = [
        x + y,
        x * y - y / x,
        np.trunc(x / y),
        np.fmod(x, y),
        np.exp(x),
        np.log(np.abs(x)),
        np.sqrt(np.abs(x)),
        np.sin(x),
        np.tanh(x),
        np.array([math.erf(v) for v in x]),
        np.power(np.abs(x), y),
        x * y + 1.0,
        np.maximum(x, y),
    ]
    for k, w in enumerate(want):
        np.testing.assert_allclose(out[k * n : (k + 1) * n], w, rtol=4e-15, atol=1e-300, err_msg=str(k))


@metile.kernel
def f64_convert(X, F32, I64, BACK, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.store(F32 + offs, x.to(metile.float32), mask=mask)
    metile.store(I64 + offs, x.to(metile.int64), mask=mask)
    metile.store(BACK + offs, x.to(metile.float32).to(metile.float64) + metile.load(I64 + offs, mask=mask), mask=mask)


def test_conversions_round_once_and_saturate(device):
    x = np.array([0.1, 1e300, -1e300, np.nan, 2.0**62 + 2.0**10, -7.9, 1 + 2.0**-30], np.float64)
    n = len(x)
    f32 = np.zeros(n, np.float32)
    i64 = np.zeros(n, np.int64)
    back = np.zeros(n, np.float64)
    if not _f64_or_refused(device, lambda: f64_convert[(1,)](x, f32, i64, back, n, BLOCK=8)):
        return
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(f32, x.astype(np.float32))
    np.testing.assert_array_equal(i64, [0, 2**63 - 1, -(2**63), 0, 2**62 + 2**10, -7, 1])


@metile.kernel
def f64_dot(A, B, C):
    r = metile.arange(0, 16)
    a = metile.load(A + r[:, None] * 16 + r[None, :])
    b = metile.load(B + r[:, None] * 16 + r[None, :])
    metile.store(C + r[:, None] * 16 + r[None, :], metile.dot(a, b))


def test_dot_of_f64_is_refused_with_a_hint(device):
    a = np.zeros((16, 16), np.float64)
    with pytest.raises(metile.CompilationError, match=r"dot of float64 tiles is not supported; convert them to "
                                                      r"float32 \(x.to\(metile.float32\)\)"):
        f64_dot[(1,)](a, a, np.zeros((16, 16), np.float32))


@metile.kernel
def f64_scalar(OUT, X: metile.float64, Y):
    metile.store(OUT, X + 0.0)
    metile.store(OUT + 1, Y)


def test_f64_scalars(device):
    out = np.zeros(2, np.float64)
    # A float64 parameter keeps every bit of a Python float; a plain float argument is f32.
    if _f64_or_refused(device, lambda: f64_scalar[(1,)](out, 0.1, 0.1)):
        assert out[0] == 0.1
        assert out[1] == float(np.float32(0.1))
