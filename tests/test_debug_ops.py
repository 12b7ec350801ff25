"""`device_print` and `device_assert` on every backend: the printed lines
(`pid (x, y, z) idx (i, j) prefix values`, the cpu in program order, GPUs in
any order within a launch), failing asserts as AssertionError naming the
kernel line, and every error path's type and message."""

import inspect
import sys
import textwrap

import numpy as np
import pytest
from isolated import assert_ok, run_isolated

import metile


def line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def printed(capfd, device):
    """The lines the launches printed: in order on cpu, sorted elsewhere."""
    metile.synchronize()
    lines = capfd.readouterr().out.splitlines()
    return lines if device == "cpu" else sorted(lines)


def expect(lines, device):
    return lines if device == "cpu" else sorted(lines)


@metile.kernel
def print_tile(X, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N, other=-1.0)
    metile.device_print("x:", x)


@pytest.mark.parametrize("n", [3, 6])
def test_print_a_tile(device, capfd, n):
    x = (np.arange(n, dtype=np.float32) + 0.5) * 1.5
    print_tile[(2,)](x, n, BLOCK=4)
    values = np.full(8, -1.0, np.float32)
    values[:n] = x
    lines = [f"pid ({p}, 0, 0) idx ({i}) x: {values[4 * p + i]:g}" for p in range(2) for i in range(4)]
    assert printed(capfd, device) == expect(lines, device)


@metile.kernel
def print_mixed(X, Y, Scale, BLOCK: metile.constexpr):
    rows = metile.arange(0, BLOCK)[:, None]
    cols = metile.arange(0, 2)[None, :]
    x = metile.load(X + rows * 2 + cols)
    metile.device_print("v", x, Scale, x > 2)
    metile.device_print("y", metile.load(Y), hex=True)


def test_print_several_values_and_hex(device, capfd):
    x = np.arange(6, dtype=np.int32)
    print_mixed[(1,)](x, np.array([-2], np.int32), 7, BLOCK=3)
    lines = [f"pid (0, 0, 0) idx ({r}, {c}) v {2 * r + c}, 7, {int(2 * r + c > 2)}" for r in range(3) for c in range(2)]
    lines.append("pid (0, 0, 0) y 0xfffffffe")
    assert printed(capfd, device) == expect(lines, device)


@metile.kernel
def print_scalars(X, N):
    s = metile.sum(metile.load(X + metile.arange(0, 4)))
    print("sum", s, N)


def test_builtin_print_of_traced_values_is_device_print(device, capfd):
    print_scalars[(3,)](np.array([1, 2, 3, 4.5], np.float32), 9)
    lines = [f"pid ({p}, 0, 0) sum 10.5, 9" for p in range(3)]
    assert printed(capfd, device) == expect(lines, device)


@metile.kernel
def print_dtypes(X, BLOCK: metile.constexpr):
    i = metile.arange(0, BLOCK)
    x = metile.load(X + i)
    metile.device_print("", x.to("f16"), i.to("i64"), x * 1e-6, x * 1e7)


def test_print_formats_every_dtype_like_c(device, capfd):
    print_dtypes[(1,)](np.array([1.5, -2.0], np.float32), BLOCK=2)
    lines = ["pid (0, 0, 0) idx (0) 1.5, 0, 1.5e-06, 1.5e+07", "pid (0, 0, 0) idx (1) -2, 1, -2e-06, -2e+07"]
    assert printed(capfd, device) == expect(lines, device)


@metile.kernel
def print_in_loops(Out, N):
    i = 0
    while i < N:
        if i % 2 == 0:
            metile.device_print("even", i)
        i += 1
    metile.store(Out, i)


def test_print_in_loops_and_branches(device, capfd):
    print_in_loops[(1,)](np.zeros(1, np.int32), 5)
    lines = [f"pid (0, 0, 0) even {i}" for i in (0, 2, 4)]
    assert printed(capfd, device) == expect(lines, device)


# ------------------------------------------------------------------ asserts


@metile.kernel
def checked_sqrt(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    metile.device_assert(x >= 0, "sqrt of a negative number")
    metile.store(Out + offs, metile.sqrt(x), mask=offs < N)


@metile.kernel
def checked_scalar(N):
    metile.device_assert(N < 10)


def test_passing_asserts_do_nothing(device):
    # Masked-off lanes are absent: they pass whatever they would read.
    x = np.array([4.0, 9.0, 0.0, 1.0, 16.0], np.float32)
    out = np.zeros(5, np.float32)
    checked_sqrt[(2,)](x, out, 5, BLOCK=4)
    np.testing.assert_array_equal(out, np.sqrt(x))
    checked_scalar[(2,)](3)


@pytest.mark.parametrize("device_name", ["cpu", "msl-emu"])
def test_a_failing_assert_raises_assertion_error_at_the_line(device_name):
    if not metile.device_available(device_name):
        pytest.skip(f"no {device_name} device here")
    previous = metile.get_device()
    metile.set_device(device_name)
    try:
        with pytest.raises(AssertionError) as e:
            checked_sqrt[(2,)](np.array([4.0, 9.0, 1.0, 1.0, -16.0], np.float32), np.zeros(5, np.float32), 5, BLOCK=4)
        with pytest.raises(AssertionError) as scalar:
            checked_scalar[(1,)](12)
    finally:
        metile.set_device(previous)
    message = str(e.value)
    assert "device_assert failed" in message and "sqrt of a negative number" in message
    assert f"line {line_of(checked_sqrt, 'metile.device_assert')}" in message
    assert f"line {line_of(checked_scalar, 'metile.device_assert')}" in str(scalar.value)
    if device_name == "cpu":
        assert "(program (1, 0, 0), element (0))" in message


CUDA_ASSERT = """
    import sys
    import numpy as np
    import metile
    sys.path.insert(0, {tests!r})
    import test_debug_ops as t
    try:
        t.checked_sqrt[(2,)](np.array([4.0, -9.0], np.float32), np.zeros(2, np.float32), 2, BLOCK=4)
        print("no error")
    except AssertionError as e:
        print("AssertionError", str(e).splitlines()[0])
"""


def test_a_failing_assert_on_cuda_raises_assertion_error():
    if not metile.device_available("cuda"):
        pytest.skip("no cuda device here")
    # A device-side assert leaves the CUDA context unusable: in a process of its own.
    outcome = run_isolated(CUDA_ASSERT.format(tests=sys.path[0]), device="cuda")
    out = assert_ok(outcome)
    assert "AssertionError device_assert failed" in out
    # The GPU's own message (the driver prints it on the process's stderr).
    assert "sqrt of a negative number" in outcome.stdout + outcome.stderr


# ------------------------------------------------------------ error paths


@metile.kernel
def print_bad_prefix(X):
    metile.device_print(3, metile.load(X))


@metile.kernel
def print_non_ascii(X):
    metile.device_print("é", metile.load(X))


@metile.kernel
def print_pointer(X):
    metile.device_print("p", X)


@metile.kernel
def print_shapes(X):
    metile.device_print("s", metile.arange(0, 4), metile.arange(0, 8))


@metile.kernel
def print_hex_float(X):
    metile.device_print("h", metile.load(X), hex=True)


@metile.kernel
def assert_message_not_text(X):
    metile.device_assert(metile.load(X) > 0, 42)


@metile.kernel
def assert_pointer(X):
    metile.device_assert(X)


@pytest.mark.parametrize(
    "kernel, message, marker",
    [
        (print_bad_prefix, "device_print's prefix must be a str known when the kernel is compiled", "device_print"),
        (print_non_ascii, "device_print's prefix must be printable ASCII text", "device_print"),
        (print_pointer, "device_print prints numbers, not pointers", "device_print"),
        (print_shapes, "device_print prints tiles of one shape (one line per element), got [4] and [8]",
         "device_print"),
        (print_hex_float, "device_print(hex=True) prints integers", "device_print"),
        (assert_message_not_text, "device_assert's message must be a str", "device_assert"),
        (assert_pointer, "device_assert needs a condition, got a pointer (ptr<f32>)", "device_assert"),
    ],
)
def test_debug_op_errors_name_the_line(kernel, message, marker):
    with pytest.raises(metile.CompilationError) as e:
        kernel[(1,)](np.zeros(4, np.float32))
    assert message in str(e.value)
    assert f"line {line_of(kernel, marker)}" in str(e.value)


def test_msl_logs_through_os_log_where_metal_has_it():
    from metile import _frontend, _metile

    traced = _frontend.specialize(checked_sqrt.fn, [("X", "ptr", "f32"), ("Out", "ptr", "f32"),
                                                    ("N", "scalar", "i32")], {"BLOCK": 4}, {})
    msl = _metile.compile_msl(traced)["msl"]
    assert textwrap.dedent("""\
        #if __METAL_VERSION__ >= 320
        #include <metal_logging>""") in msl
    assert "metile_device_assert_failed(\"test_debug_ops.py:" in msl
    cuda = _metile.compile_cuda(traced, arch="sm_80")["cuda"]
    assert "__assertfail(\"sqrt of a negative number\"" in cuda
