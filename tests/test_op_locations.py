"""Every traced op carries the kernel line it comes from. The tracer remembers the line of
each instruction of the code that calls into it (Python finds it by reading the code's line
table from its start), so the lines must be the same at every trace, under a tracer
(a debugger or coverage, which sets the frame's line itself), and in code it has not seen."""

import inspect
import re
import sys

import metile
from metile import _frontend


def _ptr(name):
    return (name, "ptr", "f32")


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _scaled(x):
    return x * 2.0


def located(X, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    for _ in metile.static_range(2):
        x = _scaled(x)
    metile.store(X + offs, x + 1.0, mask=offs < N)


def _ops_by_line(fn):
    text = _frontend.specialize(fn, [_ptr("X"), ("N", "scalar", "i32")], {"BLOCK": 16}, {}).text
    found = {}
    for m in re.finditer(r"^\s*(?:%[\d, %]+ = )?(\w+).*// test_op_locations\.py:(\d+)$", text, re.MULTILINE):
        found.setdefault(int(m.group(2)), []).append(m.group(1))
    return found


def _expected():
    return {
        _line_of(located, "x = metile.load"): "load",
        _line_of(_scaled, "return x * 2.0"): "mul",
        _line_of(located, "metile.store"): "store",
    }


def test_lines_are_the_same_at_every_trace():
    first = _ops_by_line(located)
    for line, op in _expected().items():
        assert op in first[line]
    for _ in range(3):
        assert _ops_by_line(located) == first


def test_lines_under_a_tracer_are_the_ones_without():
    plain = _ops_by_line(located)

    def tracer(frame, event, arg):
        return tracer

    sys.settrace(tracer)
    try:
        traced = _ops_by_line(located)
    finally:
        sys.settrace(None)
    assert traced == plain
    for line, op in _expected().items():
        assert op in traced[line]
