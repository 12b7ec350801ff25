"""The inputs, float64 references and error bounds behind the accuracy
measurements of `metile.testing.accuracy`, in plain numpy (no meTile import), so
the same cases can be measured where meTile is not installed (the CUDA column of
docs/language.md came from `benchmarks/cuda_math_accuracy.py` on an H100).

The ulp of a real number `y` is the spacing of f32 numbers at `y`: `2^(e - 23)`
for `2^e <= |y| < 2^(e+1)`, and `2^-149` below the normal range. Where the
reference is not finite (or overflows f32), the result must be the same
infinity or a NaN; such a mismatch counts as an infinite error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


def _sym_log(rng, n, lo, hi):
    """Magnitudes log-uniform in [10^lo, 10^hi], random signs."""
    return np.where(rng.random(n) < 0.5, -1.0, 1.0) * 10.0 ** rng.uniform(lo, hi, n)


def _pos_log(rng, n, lo, hi):
    return 10.0 ** rng.uniform(lo, hi, n)


def _mix(*parts):
    return np.concatenate(parts)


def _round_half_away(x):
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))


_erf = np.frompyfunc(math.erf, 1, 1)


@dataclass(frozen=True)
class Case:
    """One function: its arity, its float64 reference and its inputs (a list of
    f32 arrays from an rng and a count)."""

    arity: int
    reference: Callable
    inputs: Callable


def _u(lo, hi):
    return lambda r, n: [r.uniform(lo, hi, n)]


CASES: dict[str, Case] = {
    "exp": Case(1, np.exp, _u(-87.0, 88.7)),
    "exp2": Case(1, np.exp2, _u(-125.0, 127.9)),
    "log": Case(1, np.log, lambda r, n: [_pos_log(r, n, -37, 38)]),
    "log2": Case(1, np.log2, lambda r, n: [_pos_log(r, n, -37, 38)]),
    "log1p": Case(1, np.log1p, lambda r, n: [_mix(r.uniform(-0.999, 2.0, n // 2), _sym_log(r, n - n // 2, -30, -1))]),
    "expm1": Case(1, np.expm1, lambda r, n: [_mix(r.uniform(-20.0, 88.7, n // 2), _sym_log(r, n - n // 2, -30, -1))]),
    "sqrt": Case(1, np.sqrt, lambda r, n: [_pos_log(r, n, -37, 38)]),
    "rsqrt": Case(1, lambda x: 1.0 / np.sqrt(x), lambda r, n: [_pos_log(r, n, -37, 38)]),
    "sin": Case(1, np.sin, lambda r, n: [_mix(r.uniform(-3.15, 3.15, n // 2), r.uniform(-1e4, 1e4, n - n // 2))]),
    "cos": Case(1, np.cos, lambda r, n: [_mix(r.uniform(-3.15, 3.15, n // 2), r.uniform(-1e4, 1e4, n - n // 2))]),
    "tan": Case(1, np.tan, lambda r, n: [_mix(r.uniform(-1.58, 1.58, n // 2), r.uniform(-1e4, 1e4, n - n // 2))]),
    "asin": Case(1, np.arcsin, _u(-1.0, 1.0)),
    "acos": Case(1, np.arccos, _u(-1.0, 1.0)),
    "atan": Case(1, np.arctan, lambda r, n: [_sym_log(r, n, -20, 20)]),
    "sinh": Case(1, np.sinh, _u(-89.0, 89.0)),
    "cosh": Case(1, np.cosh, _u(-89.0, 89.0)),
    "tanh": Case(1, np.tanh, _u(-20.0, 20.0)),
    "erf": Case(
        1,
        lambda x: _erf(x).astype(np.float64),
        lambda r, n: [_mix(r.uniform(-5.0, 5.0, n // 2), _sym_log(r, n - n // 2, -30, 0))],
    ),
    "sigmoid": Case(1, lambda x: 1.0 / (1.0 + np.exp(-x)), _u(-30.0, 30.0)),
    "floor": Case(1, np.floor, lambda r, n: [r.integers(-4000, 4000, n) / 4.0]),
    "ceil": Case(1, np.ceil, lambda r, n: [r.integers(-4000, 4000, n) / 4.0]),
    "round": Case(1, _round_half_away, lambda r, n: [r.integers(-4000, 4000, n) / 4.0]),
    "rint": Case(1, np.rint, lambda r, n: [r.integers(-4000, 4000, n) / 4.0]),
    "pow": Case(2, np.power, lambda r, n: [_pos_log(r, n, -3, 3), r.uniform(-12.0, 12.0, n)]),
    "atan2": Case(2, np.arctan2, lambda r, n: [r.uniform(-100.0, 100.0, n), r.uniform(-100.0, 100.0, n)]),
    "fdiv": Case(2, np.divide, lambda r, n: [_sym_log(r, n, -18, 18), _sym_log(r, n, -18, 18)]),
    "fma": Case(
        3,
        lambda a, b, c: a * b + c,
        lambda r, n: [r.uniform(-1e3, 1e3, n), r.uniform(-1e3, 1e3, n), r.uniform(-1e6, 1e6, n)],
    ),
}

# The error each backend's tests allow, in f32 ulp: the worst error measured here
# (see docs/language.md) with room for other libm versions. `None`: not checked.
BOUNDS: dict[str, dict[str, float]] = {
    "cpu": {
        "exp": 2,
        "exp2": 1,
        "log": 1,
        "log2": 1,
        "log1p": 1,
        "expm1": 1,
        "sqrt": 0.5,
        "rsqrt": 0.5,
        "sin": 1,
        "cos": 1,
        "tan": 1,
        "asin": 1,
        "acos": 1,
        "atan": 1,
        "sinh": 2,
        "cosh": 2,
        "tanh": 2,
        "erf": 2,
        "sigmoid": 3,
        "floor": 0,
        "ceil": 0,
        "round": 0,
        "rint": 0,
        "pow": 1,
        "atan2": 1.5,
        "fdiv": 0.5,
        "fma": 0.5,
    },
    "msl-emu": {
        "exp": 1,
        "exp2": 1,
        "log": 1,
        "log2": 1,
        "log1p": 3,
        "expm1": 3,
        "sqrt": 0.5,
        "rsqrt": 0.5,
        "sin": 1,
        "cos": 1,
        "tan": 1,
        "asin": 1,
        "acos": 1,
        "atan": 1,
        "sinh": 2,
        "cosh": 2,
        "tanh": 2,
        "erf": 2,
        "sigmoid": 3,
        "floor": 0,
        "ceil": 0,
        "round": 0,
        "rint": 0,
        "pow": 1,
        "atan2": 1.5,
        "fdiv": 0.5,
        "fma": 0.5,
    },
    # Measured with benchmarks/cuda_math_accuracy.py on an H200 (NVRTC, --fmad=false).
    "cuda": {
        "exp": 2.5,
        "exp2": 2.5,
        "log": 1.5,
        "log2": 1.5,
        "log1p": 1.5,
        "expm1": 2,
        "sqrt": 0.5,
        "rsqrt": 2,
        "sin": 2,
        "cos": 2,
        "tan": 3.5,
        "asin": 2,
        "acos": 2,
        "atan": 1.5,
        "sinh": 2.5,
        "cosh": 2.5,
        "tanh": 2.5,
        "erf": 1.5,
        "sigmoid": 4,
        "floor": 0,
        "ceil": 0,
        "round": 0,
        "rint": 0,
        "pow": 1.5,
        "atan2": 2.5,
        "fdiv": 0.5,
        "fma": 0.5,
    },
}


def ulp_error(got, want) -> np.ndarray:
    """|got - want| in f32 ulp at `want` (float64 arrays); infinite where the
    non-finite cases disagree (see the module docs)."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    overflow = 2.0**128 * (1 - 2.0**-25)
    magnitude = np.abs(want)
    special = ~np.isfinite(want) | (magnitude >= overflow)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.where(magnitude > 0, np.maximum(exponent, -126.0), -126.0) - 23.0
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(got - want) / np.exp2(exponent)
        limit = np.where(np.isnan(want), np.nan, np.sign(want) * np.inf)
    same_special = np.where(np.isnan(limit), np.isnan(got), got == limit)
    err = np.where(special, np.where(same_special, 0.0, np.inf), err)
    return np.where(np.isnan(err), np.inf, err)


def inputs(name: str, n: int, seed: int = 0) -> list[np.ndarray]:
    """The f32 inputs of `name`'s measurement (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    return [np.asarray(a, np.float64).astype(np.float32) for a in CASES[name].inputs(rng, n)]
