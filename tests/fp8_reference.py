"""An exact numpy model of the two fp8 formats, written independently of the
compiler's arithmetic encoder: decoding from the formats' definitions, encoding
by searching the sorted table of finite values (nearest, ties to the even code,
saturating to the largest finite value, NaN to 0x7f), as NVIDIA's
`cvt.rn.satfinite` that Triton uses."""

import re

import numpy as np

from metile import _metile

# (exponent bits, mantissa bits, bias, has infinities)
FORMATS = {"e4m3": (4, 3, 7, False), "e5m2": (5, 2, 15, True)}
NAN_CODE = 0x7F


def decode(codes, fmt):
    """The f64 value of each fp8 code."""
    e_bits, m_bits, bias, has_inf = FORMATS[fmt]
    codes = np.asarray(codes, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> m_bits) & ((1 << e_bits) - 1)
    man = codes & ((1 << m_bits) - 1)
    top = (1 << e_bits) - 1
    normal = (1.0 + man / (1 << m_bits)) * np.exp2(exp - bias)
    subnormal = man / (1 << m_bits) * np.exp2(1 - bias)
    value = np.where(exp == 0, subnormal, normal)
    if has_inf:
        value = np.where((exp == top) & (man == 0), np.inf, value)
        value = np.where((exp == top) & (man != 0), np.nan, value)
    else:
        value = np.where((exp == top) & (man == (1 << m_bits) - 1), np.nan, value)
    return sign * value


def _positive_table(fmt):
    """The finite non-negative values and their codes, in increasing order."""
    codes = np.arange(0x80)
    values = decode(codes, fmt)
    finite = np.isfinite(values)
    return values[finite], codes[finite]


def encode(x, fmt):
    """Each f64 value's fp8 code, rounded once."""
    values, codes = _positive_table(fmt)
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float64).ravel()
    out = np.empty(x.shape, dtype=np.uint8)
    for i, v in enumerate(x):
        if np.isnan(v):
            out[i] = NAN_CODE
            continue
        a = abs(v)
        if a >= values[-1]:
            code = codes[-1]
        else:
            hi = int(np.searchsorted(values, a, side="right"))
            lo = hi - 1
            below, above = a - values[lo], values[hi] - a
            if below < above or (below == above and codes[lo] % 2 == 0):
                code = codes[lo]
            else:
                code = codes[hi]
        out[i] = code | (0x80 if np.signbit(v) else 0)
    return out.reshape(shape)


def max_finite(fmt):
    return _positive_table(fmt)[0][-1]


def interesting_values(fmt, rng):
    """f32 inputs that probe every rounding case: the representable values,
    the midpoints between neighbours (exact ties) and the f32 values just either
    side of them, the subnormal range, saturation, and the special values."""
    values, _ = _positive_table(fmt)
    mids = (values[:-1] + values[1:]) / 2
    mids32 = mids.astype(np.float32)
    around = np.concatenate(
        [mids32, np.nextafter(mids32, np.float32(np.inf)), np.nextafter(mids32, np.float32(0))]
    )
    top = values[-1]
    specials = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, top, top * 1.01, top * 1.1, 1e30, -1e30, 1e-30, -1e-30, 1e-45],
        dtype=np.float32,
    )
    spread = (rng.standard_normal(2000) * np.exp2(rng.uniform(-20, 20, 2000))).astype(np.float32)
    positive = np.concatenate([values.astype(np.float32), around, specials, spread])
    return np.concatenate([positive, -positive]).astype(np.float32)


def fp8_tensor_cores(device):
    """Whether `device`'s fp8 `dot`s run on fp8 tensor cores (sm_90 and later), which
    keep about 14 bits while they add one `dot`'s products."""
    sm = re.search(r"\(sm_(\d+)", _metile.device_model()) if device == "cuda" else None
    return sm is not None and int(sm.group(1)) >= 90
