"""`metile.assume(cond)`, Triton's `tl.assume`: a promise about a bool scalar
that the axis analysis reads (`x >= 0` makes `x` non-negative, so `x % n` keeps
its runs), that GPU code never checks, and that the cpu backend checks: a broken
promise is an error naming the kernel line, never a silent difference."""

import inspect

import numpy as np
import pytest

import metile
from metile import _frontend


def line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@metile.kernel
def shifted_copy(X, Out, Shift, N, BLOCK: metile.constexpr):
    shift = metile.load(Shift)
    metile.assume((shift >= 0) & (N > 0))
    metile.assume(True)
    offs = metile.arange(0, BLOCK)
    src = (offs + shift) % N
    metile.store(Out + offs, metile.load(X + src), mask=offs < N)


@pytest.mark.parametrize("shift, n", [(0, 13), (5, 13), (20, 7)])
def test_a_kept_promise_changes_no_result(device, shift, n):
    x = np.arange(n, dtype=np.float32) * 3
    out = np.full(16, -1, np.float32)
    shifted_copy[(1,)](x, out, np.array([shift], np.int32), n, BLOCK=16)
    np.testing.assert_array_equal(out[:n], x[(np.arange(n) + shift) % n])
    assert (out[n:] == -1).all()


def test_the_cpu_backend_checks_the_promise():
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        with pytest.raises(RuntimeError) as e:
            shifted_copy[(1,)](np.zeros(8, np.float32), np.zeros(16, np.float32), np.array([-3], np.int32), 8,
                               BLOCK=16)
    finally:
        metile.set_device(previous)
    assert "the kernel assumed a condition (metile.assume) that is false in program (0, 0, 0)" in str(e.value)
    assert f"test_assume.py:{line_of(shifted_copy, 'metile.assume((shift')}" in str(e.value)


@metile.kernel
def bad_assume(X, N, WHAT: metile.constexpr):
    offs = metile.arange(0, 8)
    if WHAT == "false":
        metile.assume(False)
    elif WHAT == "int":
        metile.assume(N)
    elif WHAT == "python int":
        metile.assume(1)
    elif WHAT == "tile":
        metile.assume(offs >= 0)
    metile.store(X + offs, offs)


@pytest.mark.parametrize(
    "what, message",
    [
        ("false", "metile.assume's condition is False"),
        ("int", "metile.assume needs a bool scalar condition, got a i32 value"),
        ("python int", "metile.assume needs a bool condition (a comparison of the kernel's values, or True/False), "
                       "got"),
        ("tile", "metile.assume needs a bool scalar condition, got a bool[8] value"),
    ],
)
def test_conditions_it_refuses(what, message):
    with pytest.raises(metile.CompilationError) as e:
        bad_assume[(1,)](np.zeros(8, np.int32), 8, WHAT=what)
    assert message in str(e.value)
    marker = {"false": "False", "int": "N", "python int": "1", "tile": "offs"}[what]
    assert f'test_assume.py", line {line_of(bad_assume, f"metile.assume({marker}")}' in str(e.value)


def test_the_promise_is_one_tile_ir_statement():
    traced = _frontend.specialize(shifted_copy.fn, [("X", "ptr", "f32"), ("Out", "ptr", "f32"),
                                                    ("Shift", "ptr", "i32"), ("N", "scalar", "i32")],
                                  {"BLOCK": 16}, {})
    assert traced.text.count("assume_true") == 1
