"""Hostile inputs to the frontend and the kernel object: exact specialisation keys
(constexprs and autotune keys), captured globals and closure variables, empty
launches, and Python constructs a kernel cannot use."""

import hashlib
import inspect
import struct
import sys
import textwrap
import types

import numpy as np
import pytest
from isolated import assert_ok, run_isolated

import metile
from metile import _frontend
from metile._metile import Kernel


def _line(kernel, text):
    """The file line of the first line of `kernel`'s source containing `text`."""
    fn = kernel.fn if hasattr(kernel, "fn") else kernel
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


# ------------------------------------------------------------------ exact keys


def _exact_text(value):
    """The type and exact value of a constexpr, as text (floats by their bits)."""
    if type(value) is tuple:
        return "(" + ",".join(_exact_text(v) for v in value) + ")"
    if isinstance(value, np.generic):
        return f"numpy:{value.dtype.str}:{value.tobytes().hex()}"
    if type(value) is float:
        return f"float:{struct.pack('<d', value).hex()}"
    return f"{type(value).__qualname__}:{value!r}"


def _code(value):
    """A 31-bit digest of a constexpr's type and value; the kernel below stores it
    (computed while tracing), so a launch that runs another value's code is seen."""
    digest = hashlib.sha256(_exact_text(value).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@metile.kernel
def store_code(Out, C: metile.constexpr):
    metile.store(Out + metile.arange(0, 1), metile.full((1,), _code(C), dtype="i32"))


@metile.kernel
def add_to_big_int(Out, C: metile.constexpr):
    # 16777217 is not an f32: an int C keeps it, a float C rounds it, a bool C adds 1.
    total = metile.full((4,), 16777217, dtype="i32") + C
    metile.store(Out + metile.arange(0, 4), metile.cast(total, "i32"))


def _add_to_big_int_expected(c):
    if isinstance(c, (bool, np.bool_)):
        return 16777217 + int(c)
    if isinstance(c, (float, np.floating)):
        return int(np.float32(16777217) + np.float32(c))
    return 16777217 + int(c)


COLLISIONS = {
    "python ints whose hashes are equal": [-1, -2],
    "numpy ints whose hashes are equal": [np.int64(-1), np.int64(-2)],
    "numpy floats whose hashes are equal": [np.float64(-1.0), np.float64(-2.0), np.float32(-1.0), np.float32(-2.0)],
    "ints beyond 64 bits, equal modulo 2^61 - 1": [
        2**64 + 1, 2**64 + 1 + (2**61 - 1), -(2**70), -(2**70) - (2**61 - 1)
    ],
    "equal numbers of different types": [4, 4.0, True, np.int32(4), np.int64(4), np.float32(4.0), np.bool_(True)],
    "signed zeros": [0.0, -0.0, np.float32(0.0), np.float32(-0.0)],
    "strings, tuples and None": ["f16", "f32", (4,), (4.0,), (True,), ((1, 2), 3), (1, (2, 3)), None, (None,)],
}


@pytest.mark.parametrize("values", list(COLLISIONS.values()), ids=list(COLLISIONS))
def test_values_that_python_hashes_or_compares_equal_get_their_own_kernels(device, values):
    out = np.zeros(1, np.int32)
    for _ in range(2):  # again from the cache
        for value in values:
            store_code[(1,)](out, C=value)
            assert out[0] == _code(value), value


def test_int_float_bool_and_numpy_constexprs_trace_as_their_types(device):
    values = [4, 4.0, True, np.int32(4), np.float32(4.0), 4, np.int64(4), 4.0, False, 0]
    before = add_to_big_int.cache_info()["specializations"]
    for value in values:
        out = np.zeros(4, np.int32)
        add_to_big_int[(1,)](out, C=value)
        assert (out == _add_to_big_int_expected(value)).all(), (value, out)
    assert add_to_big_int.cache_info()["specializations"] - before == 8  # one per distinct type and value


@metile.kernel
def round_through(Out, DT: metile.constexpr, FILL: metile.constexpr = None):
    x = metile.full((4,), 1.1, dtype="f32")
    if FILL is not None:
        x = metile.full((4,), FILL, dtype="f32")
    metile.store(Out + metile.arange(0, 4), metile.cast(metile.cast(x, DT), "f32"))


def test_dtype_and_none_constexprs(device):
    cases = [
        (metile.float16, None, np.float32(np.float16(1.1))),
        (metile.bfloat16, None, np.float32(1.1015625)),
        (metile.float32, None, np.float32(1.1)),
        (np.dtype("float16"), None, np.float32(np.float16(1.1))),
        (np.float16, None, np.float32(np.float16(1.1))),
        (metile.float32, 2.5, np.float32(2.5)),
        (metile.float32, None, np.float32(1.1)),
    ]
    for dtype, fill, expected in cases:
        out = np.zeros(4, np.float32)
        round_through[(1,)](out, DT=dtype, FILL=fill)
        assert (out == expected).all(), (dtype, fill, out)


@metile.kernel
def ignores_its_constexpr(Out, C: metile.constexpr):
    metile.store(Out + metile.arange(0, 1), metile.full((1,), 1, dtype="i32"))


def test_strings_with_lone_surrogates_are_keyed_apart():
    out = np.zeros(1, np.int32)
    before = ignores_its_constexpr.cache_info()["specializations"]
    for value in ["\ud800", "\ud801", "\ud800", ("\udfff",), "\ufffd"]:
        ignores_its_constexpr[(1,)](out, C=value)
    assert ignores_its_constexpr.cache_info()["specializations"] - before == 4


class _Opaque:
    pass


@pytest.mark.parametrize(
    "value, type_name",
    [([1, 2], "list"), ({"a": 1}, "dict"), (np.zeros(3), "numpy.ndarray"), (_Opaque(), "test_hostile_frontend._Opaque"),
     ({1}, "set"), ((1, [2]), "list"), (metile.Buffer(data=np.zeros(2, np.float32)), "metile._metile.Buffer")],
)
def test_a_constexpr_without_an_exact_key_is_refused(value, type_name):
    out = np.zeros(1, np.int32)
    with pytest.raises(TypeError, match=rf"the constexpr 'C' of kernel store_code is a {type_name}, which cannot "
                                        r"be a compile-time constant; a constexpr must be None, bool, int, float"):
        store_code[(1,)](out, C=value)


def _random_values(rng, count):
    """Constexpr values of many types; equal-hash and equal-comparing ones included."""
    makers = [
        lambda: int(rng.integers(-(2**62), 2**62)),
        lambda: int(rng.integers(-40, 40)),
        lambda: int(rng.integers(1, 2**40)) * 2**64 * int(rng.choice([-1, 1])) + int(rng.integers(0, 2**61)),
        lambda: struct.unpack("<d", rng.bytes(8))[0],
        lambda: float(rng.integers(-8, 8)),
        lambda: bool(rng.integers(0, 2)),
        lambda: np.dtype(rng.choice(["i1", "i2", "i4", "i8", "u1", "u8", "f2", "f4", "f8"])).type(
            rng.integers(-100, 100)
        ),
        lambda: np.bool_(rng.integers(0, 2)),
        lambda: "".join(rng.choice(list("abc"), int(rng.integers(0, 4)))),
        lambda: (int(rng.integers(-3, 3)), float(rng.integers(-3, 3))),
        lambda: None,
    ]
    values = [makers[int(rng.integers(0, len(makers)))]() for _ in range(count)]
    for collided in COLLISIONS.values():
        values.extend(collided)
    rng.shuffle(values)
    return values


def test_distinct_constexprs_never_share_a_compiled_kernel(device):
    rng = np.random.default_rng(20240611)
    values = _random_values(rng, 300 if device == "cpu" else 12)
    out = np.zeros(1, np.int32)
    for value in values + values[::3]:
        store_code[(1,)](out, C=value)
        assert out[0] == _code(value), value


@metile.autotune(configs=[metile.Config(BLOCK=4), metile.Config(BLOCK=8)], key=["C"], warmup=0, rep=1,
                 verbose=False)
@metile.kernel
def tuned_fill(Out, N, C: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.full((BLOCK,), _code(C), dtype="i32"), mask=offs < N)


def test_autotune_keys_hold_type_and_exact_value(device, monkeypatch):
    monkeypatch.setenv("METILE_AUTOTUNE", "0")
    tuned_fill._winners.clear()
    tuned_fill._launchers.clear()
    values = [4, 4.0, True, np.int32(4), np.int64(-1), np.int64(-2), 2**64 + 1, 2**64 + 1 + (2**61 - 1), -0.0, 0.0]
    out = np.zeros(10, np.int32)
    for value in values + values:
        tuned_fill[lambda meta: (metile.cdiv(10, meta["BLOCK"]),)](out, 10, C=value)
        assert (out == _code(value)).all(), value
    assert len(tuned_fill._winners) == len(values)


def test_an_autotune_key_without_an_exact_key_is_refused():
    out = np.zeros(10, np.int32)
    with pytest.raises(TypeError, match=r"autotune key argument 'C' is a builtins.list; a key argument must be None"):
        tuned_fill[(3,)](out, 10, C=[4])


# ------------------------------------------------------------- captured values

SCALE = 2.0


@metile.kernel
def scaled(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) * SCALE, mask=mask)


def _set_global(name, value):
    previous = globals().get(name)
    globals()[name] = value
    return previous


def test_a_changed_global_recompiles(device):
    x = np.arange(13, dtype=np.float32) - 6
    out = np.zeros(13, np.float32)
    previous = SCALE
    try:
        for value in [2.0, 3.0, 3, -0.5, np.float32(1.5), True, 2.0]:
            _set_global("SCALE", value)
            scaled[(1,)](x, out, 13, BLOCK=16)
            np.testing.assert_array_equal(out, x * np.float32(value))
    finally:
        _set_global("SCALE", previous)


def test_unchanged_captured_values_do_not_trace_again():
    x = np.ones(4, np.float32)
    out = np.zeros(4, np.float32)
    scaled[(1,)](x, out, 4, BLOCK=4)
    before = scaled.cache_info()["traces"]
    for _ in range(20):
        scaled[(1,)](x, out, 4, BLOCK=4)
    assert scaled.cache_info()["traces"] == before


def test_captured_names_are_found_once_not_per_launch():
    calls = []

    def counting(fn):
        calls.append(fn)
        return _frontend.captures(fn)

    names, is_constexpr = _frontend.analyze_signature(scaled.fn)
    k = Kernel(scaled.fn, "scaled", names, is_constexpr, _frontend.specialize, {}, counting)
    x = np.ones(4, np.float32)
    out = np.zeros(4, np.float32)
    for _ in range(50):
        k[(1,)](x, out, 4, BLOCK=4)
    assert len(calls) == 2  # the first launch, and after its trace
    previous = _set_global("SCALE", 5.0)
    try:
        k[(1,)](x, out, 4, BLOCK=4)
    finally:
        _set_global("SCALE", previous)
    assert len(calls) == 3 and (out == 5.0).all()


def _closure_kernel():
    factor = 2

    @metile.kernel
    def times_factor(Out):
        metile.store(Out + metile.arange(0, 4), metile.arange(0, 4) * factor)

    def set_factor(value):
        nonlocal factor
        factor = value

    return times_factor, set_factor


def test_a_changed_closure_variable_recompiles(device):
    kernel, set_factor = _closure_kernel()
    out = np.zeros(4, np.int32)
    for value in [2, 3, -7, 2]:
        set_factor(value)
        kernel[(1,)](out)
        np.testing.assert_array_equal(out, np.arange(4) * value)


OFFSET = 1
OTHER = 10


def _add_offset(x):
    return x + OFFSET


def _add_other(x):
    return x + OTHER


HELPER = _add_offset
cfg = types.ModuleType("hostile_cfg")
cfg.BASE = 100


class Cfg:
    BASE = 1000


@metile.kernel
def through_helpers(Out):
    x = metile.full((4,), cfg.BASE + Cfg.BASE, dtype="i32")
    metile.store(Out + metile.arange(0, 4), HELPER(x))


def test_values_read_by_helpers_modules_and_classes_recompile(device):
    out = np.zeros(4, np.int32)
    saved = (OFFSET, OTHER, HELPER, cfg.BASE, Cfg.BASE)

    def check(expected):
        through_helpers[(1,)](out)
        assert (out == expected).all(), (expected, out)

    try:
        check(1101)
        _set_global("OFFSET", 2)
        check(1102)
        _set_global("HELPER", _add_other)  # a helper that reads another global
        check(1110)
        _set_global("OTHER", 20)
        check(1120)
        cfg.BASE = 200
        check(1220)
        Cfg.BASE = 2000
        check(2220)
    finally:
        _set_global("OFFSET", saved[0])
        _set_global("OTHER", saved[1])
        _set_global("HELPER", saved[2])
        cfg.BASE, Cfg.BASE = saved[3], saved[4]


CAST_TO = metile.float16


@metile.kernel
def cast_to_global_dtype(Out):
    x = metile.full((4,), 1.1, dtype="f32")
    metile.store(Out + metile.arange(0, 4), metile.cast(metile.cast(x, CAST_TO), "f32"))


def test_a_changed_dtype_global_recompiles(device):
    out = np.zeros(4, np.float32)
    previous = CAST_TO
    try:
        for dtype, expected in [(metile.float16, np.float16(1.1)), (metile.float32, np.float32(1.1)),
                                (metile.bfloat16, np.float32(1.1015625))]:
            _set_global("CAST_TO", dtype)
            cast_to_global_dtype[(1,)](out)
            assert (out == np.float32(expected)).all(), (dtype, out)
    finally:
        _set_global("CAST_TO", previous)


TABLE = np.arange(4, dtype=np.float32)
SIZES = [1, 2, 3]
OPAQUE = _Opaque()


@metile.kernel
def reads_array(Out):
    metile.store(Out + metile.arange(0, 4), metile.full((4,), TABLE[0], dtype="f32"))


@metile.kernel
def reads_list(Out):
    metile.store(Out + metile.arange(0, 4), metile.full((4,), SIZES[0], dtype="f32"))


def _reads_opaque(x):
    return x + OPAQUE.value


@metile.kernel
def helper_reads_object(Out):
    metile.store(Out + metile.arange(0, 4), _reads_opaque(metile.full((4,), 1.0, dtype="f32")))


def _closure_over_array():
    weights = np.ones(4, np.float32)

    @metile.kernel
    def reads_closure_array(Out):
        metile.store(Out + metile.arange(0, 4), metile.full((4,), weights[0], dtype="f32"))

    return reads_closure_array


@pytest.mark.parametrize(
    "kernel, what, where",
    [
        (reads_array, "the global TABLE (a numpy.ndarray)", (reads_array, "TABLE[0]")),
        (reads_list, "the global SIZES (a list)", (reads_list, "SIZES[0]")),
        (helper_reads_object, "the global OPAQUE (a test_hostile_frontend._Opaque)", (_reads_opaque, "OPAQUE")),
        (_closure_over_array(), "the closure variable weights (a numpy.ndarray)", None),
    ],
)
def test_a_captured_value_that_is_no_constant_is_refused(kernel, what, where):
    out = np.zeros(4, np.float32)
    with pytest.raises(metile.CompilationError) as e:
        kernel[(1,)](out)
    message = str(e.value)
    assert f"kernel {kernel.__name__} reads {what}, which cannot be a compile-time constant" in message
    assert "pass arrays as arguments and other values as constexpr arguments" in message
    line = _line(*where) if where else _line(kernel, "weights[0]")
    assert f'{__file__}", line {line}' in message


def test_modules_functions_and_metile_are_not_values():
    captured = {c[0] for c in _frontend.captures(through_helpers.fn)}
    assert {"cfg", "cfg.BASE", "Cfg", "Cfg.BASE", "HELPER", "OFFSET"} <= captured
    assert not any(label.split(".")[0] == "metile" for label in captured)


# ------------------------------------------------------------- empty launches


@metile.kernel
def fill_unmasked(Out, N, V: metile.constexpr):
    # No mask: launched over any program, this writes past a short buffer.
    metile.store(Out + metile.program_id(0) * 4 + metile.arange(0, 4), metile.full((4,), V, dtype="f32"))


@pytest.mark.parametrize("grid", [(0,), (3, 0), (0, 2, 2), (1, 1, 0), [0]])
def test_a_launch_with_a_zero_grid_extent_does_nothing(device, grid):
    out = np.full(2, -1.0, np.float32)
    fill_unmasked[grid](out, 2, V=7.0)
    assert (out == -1.0).all()
    fill_unmasked[grid](np.zeros(0, np.float32), 0, V=7.0)  # an empty batch
    fill_unmasked[(1,)](np.zeros(4, np.float32), 4, V=7.0)  # the kernel itself runs


@pytest.mark.parametrize("grid", [(0, -1), (-1, 0), (0.0,), (0, 1.5), (False,)])
def test_negative_and_non_integer_grid_entries_stay_errors(grid):
    with pytest.raises(ValueError, match="the grid must be a tuple of 1 to 3 ints, each 0 or more"):
        fill_unmasked[grid]


def test_an_empty_launch_still_checks_the_other_extents(device):
    with pytest.raises(ValueError, match=r"grid \[0, 2147483648, 1\]: extent 2147483648 along axis 1 is out of "
                                         r"range; .* between 1 and \[.*\] \(per axis\), or 0 for an empty launch"):
        fill_unmasked[(0, 2**31)](np.zeros(4, np.float32), 4, V=1.0)


def test_an_empty_launch_still_checks_its_arguments(device):
    with pytest.raises(TypeError, match="missing the constexpr 'V'"):
        fill_unmasked[(0,)](np.zeros(4, np.float32), 4)
    with pytest.raises(TypeError, match="missing the argument 'N'"):
        fill_unmasked[(0,)](np.zeros(4, np.float32), V=1.0)


# ------------------------------------------------------- unsupported constructs


@metile.kernel
def uses_try(Out):
    try:
        metile.store(Out + metile.arange(0, 4), metile.zeros((4,), dtype="f32"))
    except Exception:
        pass


@metile.kernel
def uses_with(Out):
    with _Context():
        metile.store(Out + metile.arange(0, 4), metile.zeros((4,), dtype="f32"))


class _Context:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@metile.kernel
def uses_yield(Out):
    yield metile.arange(0, 4)


@metile.kernel
def uses_yield_from(Out):
    yield from range(3)


@metile.kernel
def uses_global(Out):
    global SCALE
    SCALE = 1.0


@metile.kernel
def uses_nonlocal(Out):
    count = 0

    def bump():
        nonlocal count
        count += 1

    bump()


@metile.kernel
async def uses_async_def(Out):
    metile.store(Out + metile.arange(0, 4), metile.zeros((4,), dtype="f32"))


@metile.kernel
def uses_nested_async(Out):
    async def later():
        await later()


@pytest.mark.parametrize(
    "kernel, construct, marker, reason",
    [
        (uses_try, "try", "try:", "an exception handler would catch the tracer's compile errors"),
        (uses_yield, "yield", "yield metile", "generators and coroutines cannot be compiled"),
        (uses_yield_from, "yield from", "yield from range", "generators and coroutines cannot be compiled"),
        (uses_global, "global", "global SCALE", "a kernel cannot assign variables outside itself"),
        (uses_nonlocal, "nonlocal", "nonlocal count", "a kernel cannot assign variables outside itself"),
        (uses_async_def, "async def", "async def", "generators and coroutines cannot be compiled"),
        (uses_nested_async, "async def", "async def later", "generators and coroutines cannot be compiled"),
    ],
)
def test_unsupported_statements_are_refused_with_the_kernel_line(kernel, construct, marker, reason):
    out = np.zeros(4, np.float32)
    with pytest.raises(metile.CompilationError) as e:
        kernel[(1,)](out)
    message = str(e.value)
    assert f"kernel {kernel.__name__}: `{construct}` is not supported in a kernel: " in message
    assert reason in message
    assert f'{__file__}", line {_line(kernel, marker)}' in message


def test_a_with_on_anything_but_simdgroup_role_is_refused(device):
    out = np.zeros(4, np.float32)
    with pytest.raises(metile.CompilationError) as e:
        uses_with[(1,)](out)
    message = str(e.value)
    assert "`with` on a value of type _Context is not supported in a kernel" in message
    assert "the one context manager of a kernel is metile.simdgroup_role(...)" in message
    assert f'{__file__}", line {_line(uses_with, "with _Context()")}' in message


NOT_A_FUNCTION = 3


@metile.kernel
def calls_an_int(Out):
    metile.store(Out + metile.arange(0, 4), metile.zeros((4,), dtype="f32") + NOT_A_FUNCTION(1))


@metile.kernel
def calls_a_numpy_scalar(Out):
    value = np.float32(2)
    metile.store(Out + metile.arange(0, 4), metile.zeros((4,), dtype="f32") + value())


@metile.kernel
def calls_a_tile(Out):
    x = metile.arange(0, 4)
    metile.store(Out + x, x(0))


@metile.kernel
def matmul_operator(Out):
    x = metile.arange(0, 4)
    metile.store(Out + x, x @ x)


@pytest.mark.parametrize(
    "kernel, expression, error",
    [
        (calls_an_int, "NOT_A_FUNCTION(1)", "'int' object is not callable"),
        (calls_a_numpy_scalar, "value()", "'numpy.float32' object is not callable"),
        (calls_a_tile, "x(0)", "'metile._metile.Tile' object is not callable"),
        (matmul_operator, "x @ x", "unsupported operand type(s) for @"),
    ],
)
def test_a_type_error_while_tracing_is_a_compilation_error_at_the_line(kernel, expression, error):
    out = np.zeros(4, np.float32)
    with pytest.raises(metile.CompilationError) as e:
        kernel[(1,)](out)
    message = str(e.value)
    head = f"kernel {kernel.__name__}: " + (f"`{expression}`" if sys.version_info >= (3, 11) else "this line")
    assert f"{head} is not supported while the kernel is traced: TypeError: {error}" in message
    assert f'{__file__}", line {_line(kernel, expression)}' in message


@metile.kernel
def raises_its_own_type_error(Out, BLOCK: metile.constexpr):
    if BLOCK % 32:
        raise TypeError(f"BLOCK must be a multiple of 32, got {BLOCK}")
    metile.store(Out + metile.arange(0, BLOCK), metile.zeros((BLOCK,), dtype="f32"))


def test_a_type_error_the_kernel_raises_itself_keeps_its_type():
    with pytest.raises(TypeError, match="BLOCK must be a multiple of 32, got 48"):
        raises_its_own_type_error[(1,)](np.zeros(48, np.float32), BLOCK=48)


def _bounded(x, depth):
    return x if depth == 0 else _bounded(x, depth - 1) + 1.0


@metile.kernel
def python_that_traces(Out):
    offs = metile.arange(*(0, 4))
    x = metile.zeros((4,), dtype="f32")
    plus_one = lambda v: v + 1.0  # noqa: E731
    total = sum(x + i for i in range(3))
    options = {"mask": offs < 3}
    metile.store(Out + offs, plus_one(_bounded(total, 5)) + metile.maximum(*(x, x)), **options)


def test_lambdas_generators_star_args_and_bounded_recursion_trace(device):
    out = np.full(4, -1.0, np.float32)
    python_that_traces[(1,)](out)
    np.testing.assert_array_equal(out, [9.0, 9.0, 9.0, -1.0])  # 0+1+2, +5, +1


RECURSIVE_KERNELS = '''
import metile


@metile.kernel
def calls_itself(Out):
    calls_itself(Out)


@metile.kernel
def launches_itself(Out):
    launches_itself[(1,)](Out)


def endless(x):
    return endless(x + 1.0)


@metile.kernel
def helper_recurses(Out):
    metile.store(Out + metile.arange(0, 4), endless(metile.zeros((4,), dtype="f32")))
'''


@pytest.mark.parametrize("device_name", ["cpu", "msl-emu"])
def test_recursion_is_refused_with_the_kernel_line(tmp_path, device_name):
    if not metile.device_available(device_name):
        pytest.skip(f"no {device_name} device here")
    (tmp_path / "recursive_kernels.py").write_text(textwrap.dedent(RECURSIVE_KERNELS))
    file = tmp_path / "recursive_kernels.py"
    code = f"""
        import sys
        import numpy as np
        import metile
        sys.path.insert(0, {str(tmp_path)!r})
        import recursive_kernels as m
        for name in ("calls_itself", "launches_itself", "helper_recurses"):
            try:
                getattr(m, name)[(1,)](np.zeros(4, np.float32))
                print(name, "ran")
            except Exception as e:
                print(name, type(e).__name__, repr(str(e)))
    """
    printed = assert_ok(run_isolated(code, device=device_name)).splitlines()
    lines = {line.split()[0]: line for line in printed}
    refused = "kernels cannot call or launch kernels (nor themselves); call a plain Python function as a helper"
    assert lines["calls_itself"].startswith("calls_itself CompilationError 'a kernel calls the kernel calls_itself: ")
    assert refused in lines["calls_itself"] and f'{file}", line 7' in lines["calls_itself"]
    assert lines["launches_itself"].startswith(
        "launches_itself CompilationError 'a kernel launches the kernel launches_itself: "
    )
    assert refused in lines["launches_itself"] and f'{file}", line 12' in lines["launches_itself"]
    assert lines["helper_recurses"].startswith(
        "helper_recurses CompilationError 'kernel helper_recurses: `endless` calls itself without end while the "
        "kernel is traced (recursion)"
    )
    assert f'{file}", line 16' in lines["helper_recurses"]
