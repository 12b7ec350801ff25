"""Tracing alone: Python kernels to Tile IR text, and every trace-time error,
through `metile._frontend.specialize` (no device involved)."""

import re

import future_annotations_kernels as fak
import pytest

import metile
from metile import _frontend
from metile.testing import reference_kernels


def ptr(name, dtype="f32"):
    return (name, "ptr", dtype)


def scalar(name, dtype="i32"):
    return (name, "scalar", dtype)


def trace(fn, params, optimize=True, threads=128, **constexprs):
    return _frontend.specialize(fn, params, constexprs, {"threads_per_group": threads, "optimize": optimize})


def line_of(fn, text):
    """The file line number of the first line of `fn` containing `text`."""
    import inspect

    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return first + i
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def ops_on_line(ir, line, file="test_tracing.py"):
    return [
        m.group(1)
        for m in re.finditer(rf"^\s*(?:%[\d, %]+ = )?(\w+).*// {re.escape(file)}:{line}$", ir, re.MULTILINE)
    ]


def ops_at(ir, fn, text):
    """The ops traced from the first line of `fn` containing `text`."""
    import inspect
    import os

    return ops_on_line(ir, line_of(fn, text), os.path.basename(inspect.getsourcefile(fn)))


# ---------------------------------------------------------------- the seed samples


add = reference_kernels.add.fn
softmax = reference_kernels.softmax.fn
gemm = reference_kernels.gemm.fn
ADD_PARAMS = [ptr("X"), ptr("Y"), ptr("Out"), scalar("N")]


def test_add_traces_to_the_expected_ops_and_lines():
    ir = trace(add, ADD_PARAMS, BLOCK=256).text
    assert ir.startswith(
        "tile.func @add(%0: ptr<f32> /*X*/, %1: ptr<f32> /*Y*/, %2: ptr<f32> /*Out*/, %3: i32 /*N*/)"
    )
    assert "constexprs {BLOCK=256}" in ir
    assert "threads" not in ir.splitlines()[0]  # no thread-level ops: no threadgroup size
    assert "program_id" in ops_at(ir, add, "pid = ")
    assert "arange" in ops_at(ir, add, "offs = ")
    assert "cmp_lt" in ops_at(ir, add, "mask = ")
    assert "load" in ops_at(ir, add, "x = metile.load")
    assert ops_at(ir, add, "metile.store")[-1] == "store"
    assert re.search(r"load masked .* : f32\[256\]", ir)


def test_softmax_carries_a_python_scalar_into_a_tile():
    f = trace(softmax, [ptr("X"), ptr("Out"), scalar("N")], BLOCK=128)
    ir = f.text
    assert f.name == "softmax"
    assert str(f) == ir
    loops = re.findall(r"^  (\S.*= )?for .*$", ir, re.MULTILINE)
    assert len(loops) == 3
    # m = -1e38 and s = 0.0 become f32[128] tiles carried around the first two loops.
    assert len(re.findall(r"= for %\d+, %\d+, %\d+, %\d+ : f32\[128\]", ir)) == 2
    assert "constant -1e38 : f32" in ir
    assert "reduce_max" in ops_at(ir, softmax, "m = metile.max(m)")
    assert "reduce_sum" in ops_at(ir, softmax, "s = metile.sum(s)")
    assert "max" in ops_at(ir, softmax, "m = metile.maximum(m, x)")
    # The loop op carries the line of its `for` statement.
    first_for = line_of(softmax, "for i in")
    assert re.search(rf"^  }}  // reference_kernels\.py:{first_for}$", ir, re.MULTILINE)


def test_gemm_carries_the_accumulator():
    params = [ptr("A"), ptr("B"), ptr("C"), scalar("M"), scalar("N"), scalar("K")]
    ir = trace(gemm, params, BLOCK_M=64, BLOCK_N=32, BLOCK_K=16).text
    assert re.search(r"= for .* : f32\[64,32\] \{ \^\(%\d+: i32, %\d+: f32\[64,32\]\)", ir)
    assert "tile_load [64,16]" in ir and "tile_load [16,32]" in ir
    assert "dot" in ops_at(ir, gemm, "acc = metile.dot")
    assert "tile_store [64,32]" in ir


def test_future_annotations_module():
    assert _frontend.analyze_signature(fak.scale) == (
        ["X", "N", "BLOCK", "FACTOR"],
        [False, False, True, True],
    )
    assert _frontend.analyze_signature(fak.aliased) == (["X", "BLOCK"], [False, True])
    ir = trace(fak.scale, [ptr("X"), scalar("N")], BLOCK=64, FACTOR=3).text
    assert "future_annotations_kernels.py" in ir
    assert "constexprs {BLOCK=64, FACTOR=3}" in ir


# ---------------------------------------------------------------- control flow


def unrolled(X, BLOCK: metile.constexpr, REPS: metile.constexpr):
    acc = metile.zeros((BLOCK,))
    for r in range(REPS):
        acc = acc + metile.load(X + r * BLOCK + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), acc)


def test_range_over_python_ints_unrolls():
    ir = trace(unrolled, [ptr("X")], BLOCK=8, REPS=3).text
    assert " for " not in ir
    assert len(re.findall(r"= load ", ir)) == 3


def traced_range(X, N, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,))
    for r in range(N):
        acc = acc + metile.load(X + r * BLOCK + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), acc)


def test_range_over_a_runtime_bound_becomes_a_loop():
    ir = trace(traced_range, [ptr("X"), scalar("N")], BLOCK=8).text
    assert len(re.findall(r"= for ", ir)) == 1


def constant_bounds(X, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,))
    for k in metile.tile_range(0, 4 * BLOCK, BLOCK):
        acc = acc + metile.load(X + k + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), acc)


def test_tile_range_with_python_int_bounds_stays_a_loop():
    ir = trace(constant_bounds, [ptr("X")], BLOCK=8).text
    assert len(re.findall(r"= for ", ir)) == 1


def constexpr_branches(X, BLOCK: metile.constexpr, ACT: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    if ACT == "relu":
        x = metile.maximum(x, 0.0)
    elif ACT == "tanh":
        x = metile.tanh(x)
    else:
        x = -x
    metile.store(X + metile.arange(0, BLOCK), x)


def test_constexpr_if_picks_a_branch_while_tracing():
    relu = trace(constexpr_branches, [ptr("X")], BLOCK=8, ACT="relu").text
    tanh = trace(constexpr_branches, [ptr("X")], BLOCK=8, ACT="tanh").text
    other = trace(constexpr_branches, [ptr("X")], BLOCK=8, ACT="neg").text
    assert " if " not in relu + tanh + other
    assert "= max " in relu and "tanh" not in relu
    assert "= tanh " in tanh
    assert "= neg " in other
    assert "ACT='relu'" in relu


def traced_if(X, Out, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    total = metile.sum(x)
    scale = 1.0
    if total > 0:
        scale = 2.0
        y = x * scale
    else:
        y = x - 1
    metile.store(Out + metile.arange(0, BLOCK), y * scale)


def test_traced_if_yields_the_variables_assigned_in_its_branches():
    ir = trace(traced_if, [ptr("X"), ptr("Out")], optimize=False, BLOCK=8).text
    m = re.search(r"= if %\d+ : (.*) \{", ir)
    assert m, ir
    assert sorted(m.group(1).split(", ")) == ["f32", "f32[8]"]
    assert ir.count("yield") == 2
    assert re.search(r"^  } else {$", ir, re.MULTILINE)
    assert "cmp_gt" in ops_on_line(ir, line_of(traced_if, "if total > 0"))


def if_in_loop(X, N, BLOCK: metile.constexpr):
    best = metile.zeros((BLOCK,))
    for k in metile.tile_range(0, N, BLOCK):
        x = metile.load(X + k + metile.arange(0, BLOCK))
        if metile.max(x) > metile.max(best):
            best = x
    metile.store(X + metile.arange(0, BLOCK), best)


def test_traced_if_inside_a_loop():
    ir = trace(if_in_loop, [ptr("X"), scalar("N")], BLOCK=8).text
    assert re.search(r"= for .* : f32\[8\]", ir)
    assert re.search(r"    %\d+ = if %\d+ : f32\[8\]", ir)


def nested(A, N, BLOCK: metile.constexpr):
    total = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        row = metile.zeros((BLOCK,))
        for j in metile.tile_range(0, N, BLOCK):
            row = row + metile.load(A + i * N + j + metile.arange(0, BLOCK))
        total = total + metile.sum(row)
    metile.store(A, total)


def test_nested_loops_carry_their_own_variables():
    ir = trace(nested, [ptr("A"), scalar("N")], BLOCK=16).text
    assert re.search(r"^  %\d+ = for .* : f32 \{", ir, re.MULTILINE)
    assert re.search(r"^    %\d+ = for .* : f32\[16\] \{", ir, re.MULTILINE)


def invariant_python_value(X, N, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,))
    width = BLOCK
    for k in metile.tile_range(0, N, BLOCK):
        width = BLOCK  # the same Python value every iteration
        acc = acc + metile.load(X + k + metile.arange(0, width))
    metile.store(X + metile.arange(0, width), acc)


def test_carried_python_values_that_never_change_stay_python():
    ir = trace(invariant_python_value, [ptr("X"), scalar("N")], BLOCK=16).text
    assert re.search(r"= for %\d+, %\d+, %\d+, %\d+ : f32\[16\] \{", ir)


def counter(X, N, BLOCK: metile.constexpr):
    count = 0
    for _k in metile.tile_range(0, N, BLOCK):
        count = count + 1
    metile.store(X, count)


def test_a_python_int_changed_by_the_loop_becomes_a_carried_i32():
    ir = trace(counter, [ptr("X", "i32"), scalar("N")], BLOCK=16, optimize=False).text
    assert re.search(r"= for %\d+, %\d+, %\d+, %\d+ : i32 \{", ir)


def _double(x):
    return x * 2.0


def _load_row(ptr_, n, block):
    cols = metile.arange(0, block)
    return metile.load(ptr_ + cols, mask=cols < n)


def helpers(X, N, BLOCK: metile.constexpr):
    x = _load_row(X, N, BLOCK)
    metile.store(X + metile.arange(0, BLOCK), _double(x))


def test_helper_functions_run_on_proxies_with_their_own_lines():
    ir = trace(helpers, [ptr("X"), scalar("N")], BLOCK=32).text
    assert "mul" in ops_on_line(ir, line_of(_double, "return x * 2.0"))
    assert "load" in ops_on_line(ir, line_of(_load_row, "return metile.load"))


def test_closures_see_the_enclosing_function_variables():
    scale = 3.0
    block = 64

    def shift(x):
        return x + scale

    def closure_kernel(X, N):
        offs = metile.arange(0, block)
        acc = 0.0
        for k in metile.tile_range(0, N, block):
            acc = acc + shift(metile.load(X + k + offs))
        metile.store(X + offs, acc)

    ir = trace(closure_kernel, [ptr("X"), scalar("N")]).text
    assert "constant 3.0 : f32" in ir
    assert re.search(r"= for .* : f32\[64\]", ir)
    assert "arange 0, 64" in ir


def test_decorators_are_stripped_from_the_rewritten_function():
    def record(fn):
        return fn

    @record
    def decorated(X, BLOCK: metile.constexpr):
        acc = 0.0
        for k in metile.tile_range(0, 4, 1):
            acc = acc + metile.load(X + k + metile.arange(0, BLOCK))
        metile.store(X + metile.arange(0, BLOCK), acc)

    assert " for " in trace(decorated, [ptr("X")], BLOCK=8).text


def roles(X, BLOCK: metile.constexpr):
    tid = metile.thread_id()
    buf = metile.shared(BLOCK)
    with metile.simdgroup_role(role=0, num_roles=2):
        offs = metile.arange(0, BLOCK)
        metile.store(buf + offs, metile.load(X + offs))
    metile.barrier()
    with metile.simdgroup_role(role=1, num_roles=2):
        offs = metile.arange(0, BLOCK)
        metile.store(X + offs, metile.load(buf + offs) * 2.0)
    lane = metile.simd_lane_id()
    v = metile.simd_shuffle_xor(metile.load(X + tid), 1)
    metile.store(X + tid, metile.simd_broadcast(v + lane, 0))


def test_thread_level_ops_and_simdgroup_roles():
    ir = trace(roles, [ptr("X")], threads=64, BLOCK=64).text
    assert " threads 64 {" in ir.splitlines()[0]
    assert "thread_id : i32[64]" in ir
    assert "shared size=64 : shared_ptr<f32>" in ir
    assert ir.count("simdgroup_role role=") == 2
    assert "simdgroup_role role=1/2" in ir
    assert "simd_shuffle_xor" in ir and "simd_broadcast" in ir and "barrier" in ir


def role_body(X, BLOCK: metile.constexpr):
    def producer():
        metile.store(X + metile.arange(0, BLOCK), 1.0)

    metile.simdgroup_role(0, 2, producer)


def test_simdgroup_role_with_a_body_function():
    ir = trace(role_body, [ptr("X")], threads=32, BLOCK=32).text
    assert re.search(r"simdgroup_role role=0/2 \{\n.*store", ir, re.DOTALL)


def python_iterables(X, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK,))
    for i, w in enumerate((0.5, 0.25)):
        acc = acc + w * metile.load(X + i * BLOCK + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), acc)


def test_loops_over_python_iterables_unroll():
    ir = trace(python_iterables, [ptr("X")], BLOCK=8).text
    assert " for " not in ir and len(re.findall(r"= load ", ir)) == 2


def assorted_statements(X, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    acc = metile.zeros((BLOCK,))
    for k in metile.tile_range(0, N, BLOCK):
        acc += metile.load(X + k + offs)
    for _i, (shift, weight) in enumerate([(0, 1.0), (1, 2.0)]):
        acc = acc * weight + shift
    for r in range(3):
        last = r
    total = 0.0
    for _k in metile.tile_range(0, N, BLOCK):
        if (y := metile.sum(acc)) > 0:
            total = total + y
        else:
            total -= 1
    metile.store(X + offs, acc + last + total)


def test_augmented_assignment_tuple_targets_and_walrus():
    ir = trace(assorted_statements, [ptr("X"), scalar("N")], BLOCK=16).text
    assert re.search(r"= for .* : f32\[16\] \{", ir)
    assert re.search(r"= for .* : f32 \{", ir)
    assert re.search(r"    %\d+ = if %\d+ : f32 \{", ir)


# ---------------------------------------------------------------- proxies


def proxies(X, Y, BLOCK: metile.constexpr):
    rows = metile.arange(0, BLOCK)
    grid = rows[:, None] * BLOCK + rows[None, :]
    assert grid.shape == (BLOCK, BLOCK)
    assert grid.dtype == "i32"
    assert X.dtype == "ptr<f32>"
    x = metile.load(X + grid)
    h = x.to("f16")
    assert h.dtype == "f16"
    assert metile.cast(h, metile.float32).dtype == "f32"
    y = (-x) ** 3 // 2 % 5 - abs(x) / 4
    bits = (grid << 1) >> 1 ^ (grid & 3) | ~grid
    c = (x <= 1) & (x >= 0) | (x == 2) ^ (x != 3)
    z = metile.where(c, y, bits.to("f32"))
    z = metile.minimum(metile.sqrt(metile.abs(z)), metile.log(1.0 + metile.exp(z)))
    assert metile.sum(z, axis=0).shape == (BLOCK,)
    assert metile.min(z).shape == ()
    assert metile.cdiv(grid, 4).dtype == "i32"
    assert metile.cdiv(BLOCK, 3) == (BLOCK + 2) // 3
    s = metile.full((BLOCK,), 2)
    assert s.dtype == "i32"
    metile.store(Y + grid, z + s[None, :] + 1 - 2 * x)


def more_axes(X, BLOCK: metile.constexpr):
    r = metile.arange(0, BLOCK)
    assert r[None].shape == (1, BLOCK)
    assert r[:, None][:, :, None].shape == (BLOCK, 1, 1)
    assert r[None, :, None].shape == (1, BLOCK, 1)
    s = metile.sum(r)
    assert s[None].shape == (1,)
    metile.store(X + r, r)


def test_axis_insertion_spellings():
    trace(more_axes, [ptr("X", "i32")], BLOCK=4)


def test_proxy_operators_indexing_and_attributes():
    ir = trace(proxies, [ptr("X"), ptr("Y")], BLOCK=4, optimize=False).text
    for op in (
        "expand_dims",
        "neg",
        "floordiv",
        "rem",
        "abs",
        "div",
        "shl",
        "shr",
        "xor",
        "and",
        "or",
        "not",
    ):
        assert f"= {op} " in ir, op
    for op in ("cmp_le", "cmp_ge", "cmp_eq", "cmp_ne", "select", "sqrt", "log", "exp", "min", "reduce_sum"):
        assert f"= {op} " in ir, op
    assert "reduce_min" in ir and "cast" in ir


def test_pointer_parameters_and_scalar_dtypes():
    ir = trace(add, [ptr("X", "f16"), ptr("Y", "f16"), ptr("Out", "f16"), scalar("N", "u32")], BLOCK=8).text
    assert "%0: ptr<f16> /*X*/" in ir and "%3: u32 /*N*/" in ir
    assert "load masked" in ir and ": f16[8]" in ir


# ---------------------------------------------------------------- host helpers


def test_cdiv_and_next_power_of_2_on_the_host():
    assert metile.cdiv(1024, 256) == 4
    assert metile.cdiv(1025, 256) == 5
    assert metile.cdiv(-7, 2) == -3
    assert metile.next_power_of_2(1) == 1
    assert metile.next_power_of_2(0) == 1
    assert metile.next_power_of_2(5) == 8
    assert metile.next_power_of_2(64) == 64
    with pytest.raises(ZeroDivisionError):
        metile.cdiv(3, 0)
    with pytest.raises(TypeError, match="two ints"):
        metile.cdiv(3.5, 2)


def test_signature_analysis():
    assert _frontend.analyze_signature(add) == (["X", "Y", "Out", "N", "BLOCK"], [False] * 4 + [True])

    def with_default(X, BLOCK: metile.constexpr = 128):
        pass

    assert _frontend.analyze_signature(with_default) == (["X", "BLOCK"], [False, True])

    def star(X, *rest):
        pass

    def kw(X, *, BLOCK: metile.constexpr):
        pass

    def runtime_default(X, N=3):
        pass

    with pytest.raises(TypeError, match=r"\*args or \*\*kwargs"):
        _frontend.analyze_signature(star)
    with pytest.raises(TypeError, match="keyword-only"):
        _frontend.analyze_signature(kw)
    with pytest.raises(TypeError, match="only metile.constexpr parameters may have defaults"):
        _frontend.analyze_signature(runtime_default)


def test_constexpr_defaults_fill_in_missing_values():
    def k(X, BLOCK: metile.constexpr = 16):
        metile.store(X + metile.arange(0, BLOCK), 1.0)

    assert "arange 0, 16" in _frontend.specialize(k, [ptr("X")], {}, {}).text


def test_metile_debug_prints_the_tile_ir(monkeypatch, capsys):
    monkeypatch.setenv("METILE_DEBUG", "msl,tile_ir")
    f = trace(add, ADD_PARAMS, BLOCK=32)
    assert f.text in capsys.readouterr().err
    monkeypatch.setenv("METILE_DEBUG", "msl")
    trace(add, ADD_PARAMS, BLOCK=32)
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------- errors


def compile_error(fn, params, **constexprs):
    with pytest.raises(metile.CompilationError) as info:
        trace(fn, params, **constexprs)
    return str(info.value)


def mismatched(X, BLOCK: metile.constexpr):
    a = metile.arange(0, BLOCK)
    b = metile.arange(0, 2 * BLOCK)
    metile.store(X + a, a + b)


def test_shape_mismatch_names_the_source_line():
    msg = compile_error(mismatched, [ptr("X", "i32")], BLOCK=64)
    assert "add: tiles of shapes [64] and [128] cannot be broadcast together" in msg
    assert f'test_tracing.py", line {line_of(mismatched, "a + b")}' in msg
    assert msg.rstrip().endswith("metile.store(X + a, a + b)")


def test_edsl_calls_outside_a_kernel_raise_runtime_error():
    with pytest.raises(RuntimeError, match=r"metile\.load\(\) can only be called inside a @metile\.kernel"):
        metile.load(None)
    with pytest.raises(RuntimeError, match=r"metile\.arange\(\) can only be called inside a @metile\.kernel"):
        metile.arange(0, 16)
    with pytest.raises(RuntimeError, match="can only be called inside"):
        metile.tile_range(0, 4)


def bool_of_tile(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    y = 0 < x < 1
    metile.store(X + metile.arange(0, BLOCK), y)


def test_bool_of_a_tile_suggests_bitwise_operators():
    msg = compile_error(bool_of_tile, [ptr("X")], BLOCK=8)
    assert "no truth value" in msg and "(a < x) & (x < b)" in msg and "metile.where" in msg
    assert "y = 0 < x < 1" in msg


def while_traced(X, N):
    i = 0
    while i < N:
        i = i + 1
    metile.store(X, i)


def while_traced_with_break(X, N):
    i = 0
    while i < N:
        if i == 3:
            break
        i = i + 1
    metile.store(X, i)


def test_while_on_a_traced_value_becomes_a_loop():
    ir = trace(while_traced, [ptr("X", "i32"), scalar("N")]).text
    assert re.search(r"= while %\d+ : i32 \{ \^\(%\d+: i32\)", ir)
    assert re.search(r"\} do \{ \^\(%\d+: i32\)", ir)
    assert re.search(rf"^  }}  // test_tracing\.py:{line_of(while_traced, 'while i < N:')}$", ir, re.MULTILINE)


def test_while_with_break_on_a_traced_value_is_refused():
    msg = compile_error(while_traced_with_break, [ptr("X", "i32"), scalar("N")])
    assert "this `while` loop depends on a value computed at run time and contains `break`" in msg
    assert "while i < N:" in msg


def break_in_tile_range(X, N, BLOCK: metile.constexpr):
    for k in metile.tile_range(0, N, BLOCK):
        if k > 3:
            break
        metile.store(X + k, 1.0)


def test_break_inside_tile_range_is_refused():
    msg = compile_error(break_in_tile_range, [ptr("X"), scalar("N")], BLOCK=8)
    assert "contains `break`, `continue` or `return`" in msg
    assert "for k in metile.tile_range(0, N, BLOCK):" in msg


def break_in_python_loop(X, BLOCK: metile.constexpr):
    total = 0
    for k in range(10):
        if k == 3:
            break
        total = total + k
    metile.store(X + metile.arange(0, BLOCK), total)


def test_break_in_a_python_loop_still_works():
    ir = trace(break_in_python_loop, [ptr("X", "i32")], BLOCK=4).text
    assert "constant 3 : i32" in ir


def undefined_before_loop(X, N, BLOCK: metile.constexpr):
    for k in metile.tile_range(0, N, BLOCK):
        last = metile.load(X + k + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), last)


def test_a_loop_variable_used_after_the_loop_needs_a_value_before_it():
    msg = compile_error(undefined_before_loop, [ptr("X"), scalar("N")], BLOCK=8)
    assert "`last` is assigned inside this loop" in msg and "no value before the loop" in msg
    assert f"line {line_of(undefined_before_loop, 'for k in')}" in msg


def one_branch_only(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    if metile.sum(x) > 0:
        y = x
    metile.store(X + metile.arange(0, BLOCK), y)


def test_a_variable_assigned_in_one_traced_branch_needs_a_value_before():
    msg = compile_error(one_branch_only, [ptr("X")], BLOCK=8)
    assert "`y` is assigned in only one branch of this `if`" in msg
    assert "if metile.sum(x) > 0:" in msg


def return_in_traced_if(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    if metile.sum(x) > 0:
        return
    metile.store(X + metile.arange(0, BLOCK), x)


def test_return_inside_a_traced_if_is_refused():
    msg = compile_error(return_in_traced_if, [ptr("X")], BLOCK=8)
    assert "contains `return`, `break` or `continue`" in msg


def early_return_on_constexpr(X, BLOCK: metile.constexpr, SKIP: metile.constexpr):
    if SKIP:
        return
    metile.store(X + metile.arange(0, BLOCK), 1.0)


def test_return_inside_a_constexpr_if_works():
    assert "store" not in trace(early_return_on_constexpr, [ptr("X")], BLOCK=8, SKIP=True).text
    assert "store" in trace(early_return_on_constexpr, [ptr("X")], BLOCK=8, SKIP=False).text


def ternary(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    s = metile.sum(x)
    y = x if s > 0 else -x
    metile.store(X + metile.arange(0, BLOCK), y)


def ternary_with_walrus(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    s = metile.sum(x)
    y = (z := x) if s > 0 else -x
    metile.store(X + metile.arange(0, BLOCK), y + z)


def test_ternary_on_a_traced_condition_selects():
    ir = trace(ternary, [ptr("X")], BLOCK=8).text
    assert "select" in ops_at(ir, ternary, "y = x if s > 0 else -x")
    msg = compile_error(ternary_with_walrus, [ptr("X")], BLOCK=8)
    assert "metile.where(c, x, y)" in msg and "y = (z := x) if s > 0 else -x" in msg


def leaked_from_role(X):
    with metile.simdgroup_role(role=0, num_roles=2):
        v = metile.load(X + metile.thread_id())
    metile.store(X + metile.thread_id(), v)


def _helper_with_a_loop(X, n):
    for k in metile.tile_range(0, n, 1):
        metile.store(X + k, 0.0)


def _plain_python_helper_with_a_loop(X, n):
    try:
        for k in metile.tile_range(0, n, 1):
            metile.store(X + k, 0.0)
    finally:
        pass


def tile_range_in_helper(X, N):
    _helper_with_a_loop(X, N)


def tile_range_in_plain_python_helper(X, N):
    _plain_python_helper_with_a_loop(X, N)


def test_tile_range_in_a_helper_function_compiles():
    ir = trace(tile_range_in_helper, [ptr("X"), scalar("N")]).text
    assert re.search(rf"^  }}  // test_tracing\.py:{line_of(_helper_with_a_loop, 'for k in')}$", ir, re.MULTILINE)
    msg = compile_error(tile_range_in_plain_python_helper, [ptr("X"), scalar("N")])
    assert "must be a `for` statement of the kernel or of a helper function it calls" in msg
    assert "for k in metile.tile_range(0, n, 1):" in msg


def fixed_role_size(X):
    with metile.simdgroup_role(role=0, num_roles=2, num_sgs=1):
        metile.store(X, 1.0)


def skipped_assignment(X, FLAG: metile.constexpr):
    if FLAG:
        v = 1.0
    metile.store(X, v)


def test_role_size_and_variables_left_unassigned():
    assert "num_sgs" in compile_error(fixed_role_size, [ptr("X")])
    msg = compile_error(skipped_assignment, [ptr("X")], FLAG=False)
    assert "variable without a value" in msg


def test_values_from_an_ended_region_are_refused():
    msg = compile_error(leaked_from_role, [ptr("X")])
    assert "inside a region that has ended" in msg


def traced_arange(X, N):
    metile.store(X + metile.arange(0, N), 0.0)


def bad_power(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), x**0.5)


def bad_index(X, BLOCK: metile.constexpr):
    x = metile.load(X + metile.arange(0, BLOCK))
    metile.store(X + metile.arange(0, BLOCK), x[0])


def python_range_of_tile(X, N):
    for i in range(int(N)):
        metile.store(X + i, 0.0)


def stale_tile(X):
    metile.store(X, _STALE[0])


_STALE = []


def kernel_returns(X):
    return metile.load(X)


def bad_dtype(X):
    metile.store(X, metile.zeros((4,), dtype="f128"))


@pytest.mark.parametrize(
    ("fn", "params", "constexprs", "expected"),
    [
        (
            traced_arange,
            [ptr("X"), scalar("N")],
            {},
            "arange's size (the tile's length) must be known when the kernel is compiled",
        ),
        (bad_power, [ptr("X")], {"BLOCK": 8}, "constant integer exponent"),
        (bad_index, [ptr("X")], {"BLOCK": 8}, "only be indexed with `:` and `None`"),
        (python_range_of_tile, [ptr("X"), scalar("N")], {}, "int() of a tile"),
        (stale_tile, [ptr("X")], {}, "comes from another trace"),
        (kernel_returns, [ptr("X")], {}, "kernels return nothing"),
        (bad_dtype, [ptr("X")], {}, "unknown dtype 'f128'"),
    ],
)
def test_misuse_errors(fn, params, constexprs, expected):
    if fn is stale_tile:
        _STALE.clear()
        trace(lambda_capture_kernel, [ptr("X")])
    msg = compile_error(fn, params, **constexprs)
    assert expected in msg


def lambda_capture_kernel(X):
    _STALE.append(metile.load(X))


def test_an_exception_in_a_kernel_leaves_no_trace_behind():
    compile_error(mismatched, [ptr("X", "i32")], BLOCK=64)
    with pytest.raises(RuntimeError, match="can only be called inside"):
        metile.program_id(0)
    assert trace(add, ADD_PARAMS, BLOCK=8).name == "add"
