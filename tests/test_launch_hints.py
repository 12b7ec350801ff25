"""Launch and hints at Triton's breadth: callable grids on every kernel,
`kernel.warmup(...)` returning the compiled kernel (registers, shared memory),
`num_stages=` on `tile_range`/`range`, and the promises `multiple_of`,
`max_contiguous` and `max_constancy`, which allow vector accesses, never change
results, and are checked on the cpu backend."""

import inspect
import re

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


def line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@metile.kernel
def add_one(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) + 1.0, mask=mask)


# ------------------------------------------------------------- grids


@pytest.mark.parametrize("n", [1, 100, 257])
def test_a_callable_grid_gets_the_launch_arguments(device, n):
    x = np.arange(n, dtype=np.float32)
    out = np.zeros_like(x)
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (metile.cdiv(meta["N"], meta["BLOCK"]),)

    add_one[grid](x, out, n, BLOCK=64, num_sgs=2)
    np.testing.assert_array_equal(out, x + 1)
    assert seen[0]["N"] == n and seen[0]["BLOCK"] == 64 and seen[0]["num_sgs"] == 2
    assert seen[0]["X"] is x and set(seen[0]) == {"X", "Out", "N", "BLOCK", "num_sgs"}


def test_a_callable_grid_with_a_configured_launcher(device):
    x = np.arange(70, dtype=np.float32)
    out = np.zeros_like(x)
    launcher = add_one[lambda meta: (metile.cdiv(meta["N"], meta["BLOCK"]),)].configure(BLOCK=32)
    launcher(x, out, 70)
    np.testing.assert_array_equal(out, x + 1)
    assert callable(launcher.grid) and add_one[(3,)].grid == (3, 1, 1)


def test_grid_function_errors():
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError) as e:
        add_one[lambda meta: meta["N"]](x, x, 4, BLOCK=4)
    assert "the grid function of add_one returned an invalid grid" in str(e.value)
    assert "the grid must be a tuple of 1 to 3 ints" in str(e.value)

    def fails(meta):
        raise KeyError("BLOCK_SIZE")

    with pytest.raises(KeyError, match="BLOCK_SIZE"):
        add_one[fails](x, x, 4, BLOCK=4)
    with pytest.raises(ValueError, match="the grid must be a tuple of 1 to 3 ints"):
        add_one["(4,)"]


# ------------------------------------------------------------- warmup


def test_warmup_returns_the_compiled_kernel(device):
    x = np.zeros(64, np.float32)
    compiled = add_one.warmup(x, x, 64, BLOCK=64, grid=(1,))
    assert compiled.name == "add_one"
    assert compiled == ["Out"] and list(compiled) == ["Out"] and compiled.written == ["Out"]
    assert compiled.metadata.device == device
    if device == "cpu":
        assert compiled.n_regs is None and compiled.metadata.shared == 0 and compiled.metadata.num_warps is None
    else:
        assert compiled.metadata.threads_per_group % 32 == 0
        assert compiled.metadata.num_warps == compiled.metadata.threads_per_group // 32
    if device == "cuda":
        assert compiled.n_regs > 0 and compiled.n_spills >= 0
    else:
        assert compiled.n_regs is None
    assert "n_regs=" in repr(compiled)


def test_warmup_takes_tritons_num_warps_and_init_handles():
    if not metile.device_available("msl-emu"):
        pytest.skip("no msl-emu device here")
    previous = metile.get_device()
    metile.set_device("msl-emu")
    try:
        x = np.zeros(256, np.float32)
        compiled = add_one.warmup(x, x, 256, BLOCK=256, num_warps=2, grid=(1,))
        compiled._init_handles()
        assert compiled.metadata.num_warps == 2
        with pytest.raises(TypeError, match="num_sgs and num_warps name the same launch option"):
            add_one[(1,)](x, x, 256, BLOCK=256, num_warps=2, num_sgs=2)
    finally:
        metile.set_device(previous)


@metile.kernel
def reduce_rows(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    x = metile.load(X + row * N + metile.arange(0, BLOCK), mask=metile.arange(0, BLOCK) < N)
    metile.store(Out + row, metile.sum(x))


def test_warmup_reports_shared_memory_of_reductions():
    if not metile.device_available("msl-emu"):
        pytest.skip("no msl-emu device here")
    previous = metile.get_device()
    metile.set_device("msl-emu")
    try:
        x = np.zeros((4, 1000), np.float32)
        compiled = reduce_rows.warmup(x, np.zeros(4, np.float32), 1000, BLOCK=1024, num_sgs=4)
    finally:
        metile.set_device(previous)
    # A reduction over four simdgroups meets in threadgroup memory.
    assert compiled.metadata.shared > 0 and compiled.metadata.num_warps == 4


# ------------------------------------------------------------- num_stages


@metile.kernel
def staged_gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                BLOCK_K: metile.constexpr, STAGES: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.range(0, K, BLOCK_K, num_stages=STAGES):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_num_stages_never_changes_results(device, rng, stages):
    M, N, K = 45, 70, 100
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    staged_gemm[(metile.cdiv(M, 32), metile.cdiv(N, 32))](
        a, b, c, M, N, K, BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, STAGES=stages)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=2e-3, atol=2e-3 * np.sqrt(K))


def _staged_gemm_cuda(stages):
    params = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32"),
              ("M", "scalar", "i32", 16), ("N", "scalar", "i32", 16), ("K", "scalar", "i32", 16)]
    constexprs = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "STAGES": stages}
    traced = _frontend.specialize(staged_gemm.fn, params, constexprs, {})
    assert f" stages={stages} " in traced.text
    return _metile.compile_cuda(traced, arch="sm_80", num_sgs=8)


def test_num_stages_sets_the_depth_of_the_operand_ring():
    # Each stage is one commit group of asynchronous copies (one per prologue stage, one in the loop).
    for stages in (2, 3, 5):
        out = _staged_gemm_cuda(stages)
        assert len(re.findall(r"cp\.async\.commit_group", out["cuda"])) == stages
    assert _staged_gemm_cuda(5)["shared_bytes"] > _staged_gemm_cuda(2)["shared_bytes"]
    # One stage: nothing in flight ahead, no ring.
    assert "cp.async" not in _staged_gemm_cuda(1)["cuda"]


@metile.kernel
def range_with_stages(X, Out, N, S: metile.constexpr):
    acc = 0.0
    for i in range(0, N, num_stages=S):
        acc += metile.load(X + i)
    metile.store(Out, acc)


@metile.kernel
def range_with_other_keywords(X, Out, N):
    for i in range(0, N, step=2):
        metile.store(Out + i, 1.0)


@metile.kernel
def tile_range_traced_stages(X, Out, N):
    for i in metile.tile_range(0, N, 1, num_stages=N):
        metile.store(Out + i, 1.0)


def test_range_takes_num_stages(device):
    x = np.arange(10, dtype=np.float32)
    out = np.zeros(1, np.float32)
    range_with_stages[(1,)](x, out, 10, S=3)
    assert out[0] == x.sum()
    text = _frontend.specialize(range_with_stages.fn, [("X", "ptr", "f32"), ("Out", "ptr", "f32"),
                                                       ("N", "scalar", "i32")], {"S": 3}, {}).text
    assert "stages=3" in text


@pytest.mark.parametrize(
    "kernel, constexprs, error, message",
    [
        (range_with_stages, {"S": 0}, metile.CompilationError,
         "num_stages must be an int from 1 (no pipelining) to 16, got 0"),
        (range_with_other_keywords, {}, metile.CompilationError,
         "range() in a kernel takes one keyword argument, num_stages"),
        (tile_range_traced_stages, {}, metile.CompilationError, "num_stages must be known when the kernel is compiled"),
    ],
)
def test_num_stages_errors(kernel, constexprs, error, message):
    with pytest.raises(error) as e:
        kernel[(1,)](np.zeros(4, np.float32), np.zeros(4, np.float32), 4, **constexprs)
    assert message in str(e.value)


# ------------------------------------------------------------- promises


@metile.kernel
def gather_rows(X, Starts, Out, BLOCK: metile.constexpr, HINT: metile.constexpr):
    pid = metile.program_id(0)
    start = metile.load(Starts + pid)
    offs = start + metile.arange(0, BLOCK)
    if HINT:
        offs = metile.max_contiguous(metile.multiple_of(offs, BLOCK), BLOCK)
    metile.store(Out + pid * BLOCK + metile.arange(0, BLOCK), metile.load(X + offs))


GATHER_PARAMS = [("X", "ptr", "f32"), ("Starts", "ptr", "i32"), ("Out", "ptr", "f32")]


@pytest.mark.parametrize("hint", [False, True])
def test_promises_never_change_results(device, rng, hint):
    x = rng.standard_normal(64).astype(np.float32)
    starts = np.array([8, 0, 40, 16], np.int32)
    out = np.zeros(32, np.float32)
    gather_rows[(4,)](x, starts, out, BLOCK=8, HINT=hint)
    np.testing.assert_array_equal(out, np.concatenate([x[s:s + 8] for s in starts]))


def test_promises_allow_vector_accesses():
    def compiled(hint):
        traced = _frontend.specialize(gather_rows.fn, GATHER_PARAMS, {"BLOCK": 128, "HINT": hint}, {})
        msl = _metile.compile_msl(traced, num_sgs=1)["msl"]
        return traced.text, msl, _metile.compile_cuda(traced, arch="sm_80", num_sgs=1)["cuda"]

    # Four elements a thread: one 16-byte load of X each, where the offsets are promised.
    text, msl, cuda = compiled(True)
    assert "assume multiple_of=128" in text and "assume contiguous=128" in text
    assert "(device const float4*)(X + " in msl and "(const metile_vec<float, 4>*)(X + " in cuda
    _, msl, cuda = compiled(False)
    assert "float4*)(X + " not in msl and "metile_vec<float, 4>*)(X + " not in cuda


@metile.kernel
def scalar_promise(X, Out, Stride, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    stride = metile.multiple_of(metile.load(Stride), 4)
    offs = row * stride + metile.arange(0, BLOCK)
    c = metile.max_constancy(metile.full((BLOCK,), 3, dtype="i32"), BLOCK)
    metile.store(Out + row * BLOCK + metile.arange(0, BLOCK), metile.load(X + offs) + c)


def test_a_scalar_promise(device):
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(8, np.float32)
    scalar_promise[(2,)](x, out, np.array([12], np.int32), BLOCK=4)
    np.testing.assert_array_equal(out, np.concatenate([x[0:4], x[12:16]]) + 3)


@pytest.mark.parametrize(
    "kernel, args, message, marker",
    [
        (gather_rows, (np.zeros(64, np.float32), np.array([8, 3], np.int32), np.zeros(16, np.float32)),
         "the kernel promised multiple_of(x, 8), but element (0) of x is 3, not a multiple of 8", "multiple_of"),
        (scalar_promise, (np.zeros(64, np.float32), np.zeros(8, np.float32), np.array([6], np.int32)),
         "the kernel promised multiple_of(x, 4), but the value of x is 6, not a multiple of 4", "multiple_of"),
    ],
)
def test_a_broken_promise_is_an_error_on_cpu(kernel, args, message, marker):
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        constexprs = {"BLOCK": 8, "HINT": True} if kernel is gather_rows else {"BLOCK": 4}
        with pytest.raises(RuntimeError) as e:
            kernel[(2,)](*args, **constexprs)
    finally:
        metile.set_device(previous)
    assert message in str(e.value)
    assert f"test_launch_hints.py:{line_of(kernel, marker)}" in str(e.value)


@metile.kernel
def contiguity_broken(X, Idx, Out, BLOCK: metile.constexpr):
    offs = metile.max_contiguous(metile.load(Idx + metile.arange(0, BLOCK)), BLOCK)
    metile.store(Out + metile.arange(0, BLOCK), metile.load(X + offs))


def test_a_broken_contiguity_promise_is_an_error_on_cpu():
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        with pytest.raises(RuntimeError) as e:
            contiguity_broken[(1,)](np.zeros(8, np.float32), np.array([0, 1, 3, 4], np.int32),
                                    np.zeros(4, np.float32), BLOCK=4)
    finally:
        metile.set_device(previous)
    assert "the kernel promised max_contiguous(x, 4), but element (2) of x is 3 after 1" in str(e.value)


@metile.kernel
def promise_on_floats(X, Out):
    metile.store(Out, metile.multiple_of(metile.load(X), 4))


@metile.kernel
def promise_not_positive(X, Out):
    metile.store(Out, metile.load(X) + metile.multiple_of(metile.program_id(0), 0))


@metile.kernel
def promise_traced_value(X, Out):
    pid = metile.program_id(0)
    metile.store(Out, metile.load(X) + metile.multiple_of(pid, pid))


@pytest.mark.parametrize(
    "kernel, message",
    [
        (promise_on_floats, "multiple_of describes integers or pointers, got a f32 value"),
        (promise_not_positive, "multiple_of needs a positive int, got 0"),
        (promise_traced_value, "multiple_of must be known when the kernel is compiled"),
    ],
)
def test_promise_errors(kernel, message):
    with pytest.raises(metile.CompilationError) as e:
        kernel[(1,)](np.zeros(4, np.float32), np.zeros(4, np.float32))
    assert message in str(e.value)
    assert f"line {line_of(kernel, 'multiple_of')}" in str(e.value)


# ---------------------------------------- tl.range's scheduling hints (accepted, no effect)


@metile.kernel
def range_hints(X, N, FLATTEN: metile.constexpr, UNROLL: metile.constexpr):
    acc = metile.zeros((4,), dtype=metile.float32)
    for i in metile.range(0, N, 1, flatten=FLATTEN, warp_specialize=False, loop_unroll_factor=UNROLL,
                          disallow_acc_multi_buffer=True):
        acc += metile.load(X + i * 4 + metile.arange(0, 4))
    metile.store(X + metile.arange(0, 4), acc)


def test_triton_range_hints_are_accepted(device):
    x = np.arange(12, dtype=np.float32)
    range_hints[(1,)](x, 3, FLATTEN=True, UNROLL=2)
    np.testing.assert_array_equal(x[:4], np.array([12, 15, 18, 21], np.float32))


@pytest.mark.parametrize("flatten, unroll, message", [
    (1, 1, "tile_range's flatten must be True or False known when the kernel is compiled, got 1"),
    (True, 0, "tile_range's loop_unroll_factor must be an int from 1 known when the kernel is compiled, got 0"),
])
def test_range_hint_errors(flatten, unroll, message):
    with pytest.raises(metile.CompilationError) as e:
        range_hints[(1,)](np.zeros(12, np.float32), 3, FLATTEN=flatten, UNROLL=unroll)
    assert message in str(e.value)
    assert f"line {line_of(range_hints, 'metile.range(')}" in str(e.value)
