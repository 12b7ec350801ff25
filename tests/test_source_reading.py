"""The frontend reads a kernel's def from its code object's lines (`_frontend/source.py`)
instead of tokenizing the file: the def it finds must be the one `inspect` finds, line and
column numbers included, whatever the def's shape, and where the shortcut cannot be
checked `inspect` must read it."""

import ast
import importlib
import inspect
import textwrap

import numpy as np
import pytest

import metile

source = importlib.import_module("metile._frontend.source")


def _inspect_def(fn):
    """The def as `inspect` reads it, numbered as the file numbers it."""
    lines, start = inspect.getsourcelines(fn)
    module = ast.parse("\n" * (start - 1) + textwrap.dedent("".join(lines)))
    return module.body[0], start


def _dump(node):
    return ast.dump(node, include_attributes=True)


def _identity(fn):
    return fn


@_identity
@_identity
def decorated(x):
    return x


def plain(x, y):
    z = x + y
    return z


def one_line(x): return x  # noqa: E704


def with_docstring(x):
    """A docstring whose lines
start at column 0,
    in the middle."""
    return x


def ends_in_dead_code(x):
    y = x * 2
    if False:
        y = y + 1
        # a comment inside the dead block

    # a comment after it, indented
    return y


def ends_in_a_long_call(x):
    return max(
        x,
        0,
)


def ends_in_a_nested_def(x):
    def inner(y):
        return y + x

    return inner


def _nested_kernel_owner():
    def nested(x):
        if x:
            return 1
        return 2

    return nested


async def coroutine(x):
    return x


SHAPES = [
    decorated,
    plain,
    one_line,
    with_docstring,
    ends_in_dead_code,
    ends_in_a_long_call,
    ends_in_a_nested_def,
    _nested_kernel_owner(),
    coroutine,
]


@pytest.mark.parametrize("fn", SHAPES, ids=lambda f: f.__name__)
def test_the_def_read_from_the_code_object_is_the_one_inspect_reads(fn):
    found = source._block(fn)
    assert found is not None, "the shortcut applies to a plain def in a file"
    expected, start = _inspect_def(fn)
    node, indent, first = source.source_def(fn)
    assert first == start
    assert _dump(node) == _dump(expected)
    assert indent == (4 if fn.__name__ == "nested" else 0)


def test_a_lambda_is_read_by_inspect():
    double = lambda x: x * 2  # noqa: E731
    assert source._block(double) is None
    node, _, start = source.source_def(double)
    assert node is None  # no def: the rewrite refuses it, as before
    assert start == inspect.getsourcelines(double)[1]


def test_a_function_built_by_exec_has_no_source():
    namespace = {}
    exec("def made(x):\n    return x\n", namespace)  # noqa: S102 - a function without a file
    with pytest.raises(OSError, match="could not get source code"):
        source.source_def(namespace["made"])


def test_a_guess_that_does_not_parse_is_read_by_inspect(monkeypatch):
    # Lines that parse to no def of the function's name: the shortcut is not trusted.
    monkeypatch.setattr(source, "_block", lambda fn: (["x = 1\n"], fn.__code__.co_firstlineno))
    node, _, start = source.source_def(plain)
    expected, expected_start = _inspect_def(plain)
    assert start == expected_start
    assert _dump(node) == _dump(expected)


@metile.kernel
def kernel_ending_in_dead_code(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) * 2.0, mask=mask)
    if False:
        metile.store(Out + offs, 0.0, mask=mask)


@metile.kernel
def kernel_refusing_in_dead_code(Out):
    metile.store(Out + metile.arange(0, 4), metile.zeros((4,), dtype="f32"))
    if False:
        try:
            pass
        except ValueError:
            pass


def test_a_kernel_ending_in_dead_code_runs(device, rng):
    n = 37
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    kernel_ending_in_dead_code[(metile.cdiv(n, 16),)](x, out, n, BLOCK=16)
    np.testing.assert_allclose(out, x * 2.0)


def test_a_construct_refused_in_trailing_dead_code_is_still_refused():
    lines, start = inspect.getsourcelines(kernel_refusing_in_dead_code.fn)
    try_line = start + next(i for i, line in enumerate(lines) if "try:" in line)
    with pytest.raises(metile.CompilationError) as e:
        kernel_refusing_in_dead_code[(1,)](np.zeros(4, np.float32))
    message = str(e.value)
    assert "`try` is not supported in a kernel" in message
    assert f'{__file__}", line {try_line}' in message
