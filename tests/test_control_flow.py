"""Control flow at Triton's breadth, on every backend: `while` on run-time
conditions, helper functions with traced loops and branches, Python's `min`,
`max`, `and`, `or`, `not`, `x if c else y` and `assert` on traced values,
`static_range` and `static_assert`; checked against numpy, with every error
path's type and message."""

import inspect
import re

import numpy as np
import pytest

import metile
from metile import _frontend


def line_of(fn, text):
    fn = getattr(fn, "fn", fn)
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def traced_text(kernel, params, **constexprs):
    return _frontend.specialize(kernel.fn, params, constexprs, {}).text


# ------------------------------------------------------------------ while


@metile.kernel
def collatz_steps(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask, other=1)
    steps = metile.zeros((BLOCK,), dtype="i32")
    # A scalar condition over a tile: the loop runs until every lane reached 1.
    while metile.max(x) > 1:
        done = x == 1
        x = metile.where(done, x, metile.where(x % 2 == 0, x // 2, 3 * x + 1))
        steps = metile.where(done, steps, steps + 1)
    metile.store(Out + offs, steps, mask=mask)


def collatz_reference(xs):
    out = []
    for x in xs:
        n = 0
        while x != 1:
            x = x // 2 if x % 2 == 0 else 3 * x + 1
            n += 1
        out.append(n)
    return np.array(out, np.int32)


@pytest.mark.parametrize("n", [1, 5, 16, 37])
def test_while_on_a_run_time_condition(device, rng, n):
    x = rng.integers(1, 200, size=n).astype(np.int32)
    out = np.full(n, -1, np.int32)
    collatz_steps[(metile.cdiv(n, 16),)](x, out, n, BLOCK=16)
    np.testing.assert_array_equal(out, collatz_reference(x))


@metile.kernel
def count_down(Out, Start):
    i = Start
    total = 0
    while i > 0:
        total += i
        i -= 1
    metile.store(Out + metile.program_id(0), total + i)


@pytest.mark.parametrize("start", [-3, 0, 1, 10])
def test_while_that_may_not_run(device, start):
    out = np.zeros(2, np.int32)
    count_down[(2,)](out, start)
    expected = sum(range(1, start + 1)) + min(start, 0)
    np.testing.assert_array_equal(out, [expected, expected])


@metile.kernel
def first_above(X, Out, N, Threshold, BLOCK: metile.constexpr):
    # Loads in the condition; the index starts as a Python int and becomes a
    # run-time value in the body. `and` on traced values evaluates both sides,
    # so the load is masked.
    k = 0
    while k < N and metile.load(X + k, mask=k < N, other=Threshold + 1) <= Threshold:
        k += 1
    metile.store(Out, k)


@pytest.mark.parametrize("threshold, expected", [(5.0, 3), (-1.0, 0), (100.0, 7)])
def test_while_condition_with_loads_and_and(device, threshold, expected):
    x = np.array([1, 2, 5, 9, 3, 10, 4], np.float32)
    out = np.zeros(1, np.int32)
    first_above[(1,)](x, out, 7, threshold, BLOCK=8)
    assert out[0] == expected


@metile.kernel
def unguarded_and(X, Out, N):
    k = 0
    while k < N and metile.load(X + k) <= 100.0:
        k += 1
    metile.store(Out, k)


def test_and_on_traced_values_evaluates_both_sides():
    # The cpu backend checks every element (msl-emu misses reads just past a buffer's end).
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        with pytest.raises(IndexError) as e:
            unguarded_and[(1,)](np.ones(7, np.float32), np.zeros(1, np.int32), 7)
    finally:
        metile.set_device(previous)
    assert f"line {line_of(unguarded_and, 'while k < N and')}" in str(e.value)


@metile.kernel
def nested_while_in_for(Out, N, M):
    total = 0
    for i in range(N):
        j = 0
        while j < i * M:
            j += 1
            total += 1
    metile.store(Out, total)


def test_while_nested_in_a_loop(device):
    out = np.zeros(1, np.int32)
    nested_while_in_for[(1,)](out, 5, 3)
    assert out[0] == sum(i * 3 for i in range(5))


@metile.kernel
def python_condition_while(Out, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,), dtype="f32")
    r = 0
    while r < 3:  # a Python condition: unrolled while tracing
        acc = acc + (r + 1)
        r += 1
    metile.store(Out + metile.arange(0, BLOCK), acc)


def test_a_while_on_python_values_unrolls(device):
    text = traced_text(python_condition_while, [("Out", "ptr", "f32")], BLOCK=8)
    assert " = while " not in text
    out = np.zeros(8, np.float32)
    python_condition_while[(1,)](out, BLOCK=8)
    np.testing.assert_array_equal(out, np.full(8, 6.0))


@metile.kernel
def while_carries_a_tile_and_a_pointer(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    p = X
    acc = metile.zeros((BLOCK,), dtype="f32")
    done = 0
    while done < N:
        acc += metile.load(p + offs, mask=done + offs < N)
        p += BLOCK
        done += BLOCK
    metile.store(Out + offs, acc)


@pytest.mark.parametrize("n", [3, 8, 29])
def test_while_carries_tiles_pointers_and_absent_lanes(device, rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(8, np.float32)
    while_carries_a_tile_and_a_pointer[(1,)](x, out, n, BLOCK=8)
    padded = np.zeros(metile.cdiv(n, 8) * 8, np.float32)
    padded[:n] = x
    np.testing.assert_allclose(out, padded.reshape(-1, 8).sum(0), rtol=1e-5, atol=1e-5)


@metile.kernel
def while_undefined(Out, N):
    i = 0
    while i < N:
        last = i
        i += 1
    metile.store(Out, last)


@metile.kernel
def while_with_break(Out, N):
    i = 0
    while i < N:
        if i == 3:
            break
        i += 1
    metile.store(Out, i)


@metile.kernel
def while_tile_condition(X, Out, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    while x > 0:
        x = x - 1
    metile.store(Out + metile.arange(0, BLOCK), x)


@pytest.mark.parametrize(
    "kernel, args, message, marker",
    [
        (while_undefined, (np.zeros(1, np.int32), 3), "`last` is assigned inside this loop", "while i < N:"),
        (while_with_break, (np.zeros(1, np.int32), 3), "contains `break`, `continue` or `return`", "while i < N:"),
        (
            while_tile_condition,
            (np.zeros(4, np.float32), np.zeros(4, np.float32)),
            "a `while` condition must be a scalar, got a tile",
            "while x > 0:",
        ),
    ],
)
def test_while_errors_name_the_line(kernel, args, message, marker):
    constexprs = {"BLOCK": 4} if "BLOCK" in kernel.params else {}
    with pytest.raises(metile.CompilationError) as e:
        kernel[(1,)](*args, **constexprs)
    assert message in str(e.value)
    assert f"line {line_of(kernel, marker)}" in str(e.value)


# ---------------------------------------------------------------- helpers


def _row_sums(X, n, block):
    acc = metile.zeros((block,), dtype="f32")
    for k in metile.tile_range(0, n, block):
        acc += metile.load(X + k + metile.arange(0, block), mask=k + metile.arange(0, block) < n)
    return acc


def _clamp_low(x, floor=0.0):
    if metile.sum(x) < floor:
        x = x - metile.sum(x) / x.shape[0]
    return x


def _halvings(v):
    steps = 0
    while v > 1:
        v = v // 2
        steps += 1
    return steps


@metile.kernel
def uses_helpers(X, Out, N, Steps, BLOCK: metile.constexpr):
    acc = _clamp_low(_row_sums(X, N, BLOCK))
    metile.store(Out + metile.arange(0, BLOCK), acc)

    def local_helper(v):
        total = 0
        for i in range(v):
            total += i
        return total

    metile.store(Steps, _halvings(N) + local_helper(N))


@pytest.mark.parametrize("n", [5, 16, 45])
def test_helpers_with_traced_loops_ifs_and_whiles(device, rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(8, np.float32)
    steps = np.zeros(1, np.int32)
    uses_helpers[(1,)](x, out, n, steps, BLOCK=8)
    padded = np.zeros(metile.cdiv(n, 8) * 8, np.float32)
    padded[:n] = x
    ref = padded.reshape(-1, 8).sum(0)
    if ref.sum() < 0:
        ref = ref - ref.sum() / 8
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    assert steps[0] == int(np.floor(np.log2(n))) + n * (n - 1) // 2


def test_helper_ops_carry_the_helpers_lines():
    text = traced_text(uses_helpers, [("X", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32"),
                                      ("Steps", "ptr", "i32")], BLOCK=8)
    file = "test_control_flow.py"
    assert f"}}  // {file}:{line_of(_row_sums, 'for k in')}" in text
    assert f"}}  // {file}:{line_of(_clamp_low, 'if metile.sum')}" in text
    assert f"}}  // {file}:{line_of(_halvings, 'while v > 1')}" in text


# ------------------------------------------ Python operators on traced values


@metile.kernel
def python_operators(X, Y, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    s = metile.sum(x)
    lo = min(x, y)
    hi = max(x, y, 0.5)
    both = (x > 0) and (y > 0)
    either = x > 0 or y > 0
    neither = not either
    pick = x if s > 0 else y
    elementwise = x if x > y else -y
    scalar = 1.0 if (s > 0 and N > 3) else 2.0
    metile.store(Out + 0 * BLOCK + offs, lo, mask=mask)
    metile.store(Out + 1 * BLOCK + offs, hi, mask=mask)
    metile.store(Out + 2 * BLOCK + offs, both.to("f32") + 2 * either.to("f32") + 4 * neither.to("f32"), mask=mask)
    metile.store(Out + 3 * BLOCK + offs, pick + scalar, mask=mask)
    metile.store(Out + 4 * BLOCK + offs, elementwise, mask=mask)


@pytest.mark.parametrize("n", [3, 8])
def test_min_max_and_or_not_ifexp_on_traced_values(device, rng, n):
    block = 8
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(5 * block, np.float32)
    python_operators[(1,)](x, y, out, n, BLOCK=block)
    out = out.reshape(5, block)[:, :n]
    s = x.sum()
    np.testing.assert_array_equal(out[0], np.minimum(x, y))
    np.testing.assert_array_equal(out[1], np.maximum(np.maximum(x, y), 0.5))
    both, either = (x > 0) & (y > 0), (x > 0) | (y > 0)
    np.testing.assert_array_equal(out[2], both + 2.0 * either + 4.0 * ~either)
    scalar = 1.0 if (s > 0 and n > 3) else 2.0
    np.testing.assert_allclose(out[3], (x if s > 0 else y) + scalar)
    np.testing.assert_array_equal(out[4], np.where(x > y, x, -y))


def _never_called():
    raise AssertionError("a short-circuited operand was evaluated")


@metile.kernel
def python_values_short_circuit(Out, FLAG: metile.constexpr, BLOCK: metile.constexpr):
    a = FLAG and _never_called()
    b = (not FLAG) or _never_called()
    c = metile.full((BLOCK,), 1.0) if not FLAG else _never_called()
    d = min(3, BLOCK)
    metile.store(Out + metile.arange(0, BLOCK), c + a + b + d)


def test_python_values_keep_python_semantics(device):
    text = traced_text(python_values_short_circuit, [("Out", "ptr", "f32")], FLAG=False, BLOCK=4)
    assert "select" not in text and "min" not in text
    out = np.zeros(4, np.float32)
    python_values_short_circuit[(1,)](out, FLAG=False, BLOCK=4)
    np.testing.assert_array_equal(out, np.full(4, 1.0 + 0 + 1 + 3))


@metile.kernel
def traced_assert_statement(X, N, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK), mask=metile.arange(0, BLOCK) < N)
    assert x >= 0, "x is negative"
    assert BLOCK > 1, "BLOCK must exceed 1"


def test_assert_statements(device):
    traced_assert_statement[(1,)](np.array([1, 2, 3], np.float32), 3, BLOCK=4)
    with pytest.raises(AssertionError, match="BLOCK must exceed 1"):
        traced_assert_statement[(1,)](np.array([1.0], np.float32), 1, BLOCK=1)
    if device == "cuda":
        # A failing device assert ends the CUDA context for the whole process:
        # test_debug_ops checks it on cuda in a process of its own.
        return
    with pytest.raises(AssertionError) as e:
        traced_assert_statement[(1,)](np.array([1, -2, 3], np.float32), 3, BLOCK=4)
    assert "x is negative" in str(e.value)
    assert f"line {line_of(traced_assert_statement, 'assert x >= 0')}" in str(e.value)


@metile.kernel
def print_of_python_values(Out, BLOCK: metile.constexpr):
    print("tracing with BLOCK", BLOCK)
    metile.store(Out + metile.arange(0, BLOCK), metile.zeros((BLOCK,), dtype="f32"))


def test_print_of_python_values_prints_while_tracing(capsys):
    print_of_python_values[(1,)](np.zeros(4, np.float32), BLOCK=4)
    assert capsys.readouterr().out == "tracing with BLOCK 4\n"


# ------------------------------------------------ static_range, static_assert


@metile.kernel
def static_loops(Out, BLOCK: metile.constexpr, REPS: metile.constexpr):
    metile.static_assert(BLOCK % 4 == 0, "BLOCK must be a multiple of 4")
    acc = metile.zeros((BLOCK,), dtype="f32")
    for r in metile.static_range(REPS):
        acc += r
    for r in metile.static_range(1, REPS, 2):
        acc += 10 * r
    metile.store(Out + metile.arange(0, BLOCK), acc)


def test_static_range_unrolls_and_static_assert_checks(device):
    text = traced_text(static_loops, [("Out", "ptr", "f32")], BLOCK=4, REPS=4)
    assert " for " not in text and " = while " not in text
    out = np.zeros(4, np.float32)
    static_loops[(1,)](out, BLOCK=4, REPS=4)
    np.testing.assert_array_equal(out, np.full(4, 0 + 1 + 2 + 3 + 10 * (1 + 3)))
    with pytest.raises(metile.CompilationError) as e:
        static_loops[(1,)](np.zeros(6, np.float32), BLOCK=6, REPS=1)
    assert "static_assert failed: BLOCK must be a multiple of 4" in str(e.value)
    assert f"line {line_of(static_loops, 'metile.static_assert')}" in str(e.value)


@metile.kernel
def static_range_of_run_time_value(Out, N):
    for i in metile.static_range(N):
        metile.store(Out + i, 1.0)


@metile.kernel
def static_assert_of_run_time_value(Out, N):
    metile.static_assert(N > 0)
    metile.store(Out, 1.0)


@metile.kernel
def max_of_one_tile(Out, N):
    metile.store(Out, max(metile.arange(0, 4)))


def test_max_of_one_tile_suggests_a_reduction():
    with pytest.raises(metile.CompilationError) as e:
        max_of_one_tile[(1,)](np.zeros(4, np.int32), 3)
    assert "max() of one tile would iterate over it; reduce it with metile.max(x)" in str(e.value)
    assert f"line {line_of(max_of_one_tile, 'max(metile.arange')}" in str(e.value)


@pytest.mark.parametrize(
    "kernel, message, marker",
    [
        (static_range_of_run_time_value, "static_range's bound must be known when the kernel is compiled",
         "metile.static_range(N)"),
        (static_assert_of_run_time_value, "static_assert needs a condition known when the kernel is compiled",
         "metile.static_assert(N > 0)"),
    ],
)
def test_static_ops_refuse_run_time_values(kernel, message, marker):
    with pytest.raises(metile.CompilationError) as e:
        kernel[(1,)](np.zeros(4, np.float32), 3)
    assert message in str(e.value)
    assert f"line {line_of(kernel, marker)}" in str(e.value)


# ------------------------------------------------------------------ counters in lockstep


@metile.kernel
def lockstep_counters(Out, T, STEP: metile.constexpr):
    # `c` and `d` move with `t` (the clean-ups read them as `t` inside the loop): `c` read
    # before and after its step and inside a nested loop, both read after the loop (where a
    # program that runs no iteration keeps their starts), `e` a step behind by another step.
    pid = metile.program_id(0)
    n = metile.num_programs(0)
    c = pid - STEP
    d = pid
    e = pid - 2 * STEP
    acc = 0
    for t in range(pid, T, STEP):
        before = c
        c += STEP
        inner = 0
        for u in range(0, n):
            inner += c * u + t
        acc += c * 3 + before * 7 + d * 5 + e * 11 + inner
        d += STEP
        e += STEP
    metile.store(Out + pid, acc)
    metile.store(Out + n + pid, c)
    metile.store(Out + 2 * n + pid, d)
    metile.store(Out + 3 * n + pid, e)


def _lockstep_reference(programs, T, step):
    out = np.zeros((4, programs), np.int32)
    for pid in range(programs):
        c, d, e, acc = pid - step, pid, pid - 2 * step, 0
        for t in range(pid, T, step):
            before = c
            c += step
            inner = sum(c * u + t for u in range(programs))
            acc += c * 3 + before * 7 + d * 5 + e * 11 + inner
            d += step
            e += step
        out[:, pid] = acc, c, d, e
    return out


@pytest.mark.parametrize("programs, T, step", [(4, 23, 4), (5, 3, 5), (3, 0, 2)])
def test_counters_in_lockstep_with_a_loop_keep_their_values(device, programs, T, step):
    # Programs past T run no iteration (T = 0: none runs one).
    out = np.full((4, programs), -99, np.int32)
    lockstep_counters[(programs,)](out, T, STEP=step)
    np.testing.assert_array_equal(out, _lockstep_reference(programs, T, step))


def test_a_counter_a_step_before_the_loop_reads_as_its_variable():
    text = traced_text(lockstep_counters, [("Out", "ptr", "i32"), ("T", "scalar", "i32")], STEP=4)
    loop = text[text.index("= for"):]
    # The outer loop's block arguments: the induction variable, then acc, c, d and e.
    iv, acc, c, d, e = re.search(r"\^\((%\d+): i32, (%\d+): i32, (%\d+): i32, (%\d+): i32, (%\d+): i32\)",
                                 loop).groups()
    # `c` after its step and `d` are `t`: the loop yields `t` as the next `c`, and nothing reads
    # `d`'s argument; `c` before its step and `e` stay what they are.
    yields = re.findall(r"yield (.*?)  //", loop)[-1].split(", ")
    assert yields[1] == iv
    assert f"{d}," not in loop.split("{", 1)[1] and f"{d} " not in loop.split("{", 1)[1]
    assert f"mul {c}," in loop and f"mul {e}," in loop
