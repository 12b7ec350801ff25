"""Atomics (`atomic_add`, `atomic_max`, `atomic_min`, `atomic_and`, `atomic_or`,
`atomic_xor`, `atomic_xchg`, `atomic_cas`) on every backend: each op on each
dtype against numpy (old values included), masks and ragged sizes, tiles whose
layout replicates elements, a histogram, split-K accumulation, a ticket counter
of scalar atomics, and the layer-norm backward tutorial with its lock
(`atomic_cas` spin, `atomic_xchg` release) with more programs than workers."""

import numpy as np
import pytest

import metile
from metile import _frontend, _metile

OPS = ["add", "max", "min", "and", "or", "xor", "xchg", "cas"]
INT_TYPES = [np.int32, np.uint32, np.int64]


def _accepts(op, dtype):
    if op in ("and", "or", "xor"):
        return dtype in INT_TYPES
    return True


def _apple_refuses(dtype):
    return dtype in (np.int64, np.float16)


@metile.kernel
def rmw(X, V, C, Old, N, OP: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    v = metile.load(V + offs)
    if OP == "add":
        old = metile.atomic_add(X + offs, v, mask=mask)
    elif OP == "max":
        old = metile.atomic_max(X + offs, v, mask=mask)
    elif OP == "min":
        old = metile.atomic_min(X + offs, v, mask=mask)
    elif OP == "and":
        old = metile.atomic_and(X + offs, v, mask=mask)
    elif OP == "or":
        old = metile.atomic_or(X + offs, v, mask=mask)
    elif OP == "xor":
        old = metile.atomic_xor(X + offs, v, mask=mask)
    elif OP == "xchg":
        old = metile.atomic_xchg(X + offs, v, mask=mask)
    else:
        # Triton's atomic_cas has no mask: lanes past N compare against a value
        # that never matches.
        old = metile.atomic_cas(X + offs, metile.load(C + offs), v)
    metile.store(Old + offs, old)


def _values(rng, n, dtype, specials=()):
    if dtype == np.float32:
        v = rng.standard_normal(n).astype(np.float32) * 8
        k = min(len(specials), n)
        v[:k] = np.array(specials[:k], np.float32)
        return v
    info = np.iinfo(dtype)
    wide = np.uint64 if dtype == np.uint32 else np.int64
    return rng.integers(info.min, int(info.max) + 1, n, dtype=wide).astype(dtype)


def _float_choice(op, old, v):
    """The language's float max/min: NaN operands ignored, ties keep the stored value."""
    better = v > old if op == "max" else v < old
    return np.where(better | (np.isnan(old) & ~np.isnan(v)), v, old)


def _expected(op, x, v, c):
    if op == "add":
        return x + v
    if op in ("max", "min"):
        if x.dtype == np.float32:
            return _float_choice(op, x, v)
        return np.maximum(x, v) if op == "max" else np.minimum(x, v)
    if op == "and":
        return x & v
    if op == "or":
        return x | v
    if op == "xor":
        return x ^ v
    if op == "xchg":
        return v.copy()
    return np.where(x.view(f"u{x.itemsize}") == c.view(f"u{x.itemsize}"), v, x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.float32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("n", [5, 100])
def test_each_atomic_matches_numpy(device, rng, op, dtype, n):
    if not _accepts(op, dtype):
        pytest.skip("not defined on floats")
    block = 64
    padded = metile.cdiv(n, block) * block
    # Float specials meet numbers, NaNs and zeros of the other sign.
    x = _values(rng, padded, dtype, [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, np.nan])
    v = _values(rng, padded, dtype, [2.0, 0.0, -0.0, np.nan, np.nan, np.inf, np.nan])
    c = x.copy()
    c[1::2] = v[1::2]  # half the comparands match
    if dtype == np.float32:
        c[n:] = np.float32(np.nan)  # never equal bit for bit: 0x7fc00000 is not in x
        x[n:] = np.float32(7.0)
        c[0] = x[0]  # a NaN comparand matches the same NaN bits
    else:
        c[n:] = x[n:] + 1
    before = x.copy()
    old = np.full(padded, 99, dtype)
    launch = lambda: rmw[(padded // block,)](x, v, c, old, n, OP=op, BLOCK=block)  # noqa: E731
    if device == "msl-emu" and dtype == np.int64:
        with pytest.raises(metile.CompilationError, match="on i64 is not available on Apple GPUs"):
            launch()
        return
    launch()
    expected = _expected(op, before, v, c)
    if op != "cas":
        expected[n:] = before[n:]
    if op == "add" and dtype == np.float32:
        # Which NaN a NaN sum is differs between processors: compared as values.
        np.testing.assert_array_equal(x, expected)
    else:
        np.testing.assert_array_equal(x.view(f"u{x.itemsize}"), expected.view(f"u{x.itemsize}"))
    if op == "cas":
        np.testing.assert_array_equal(old.view(f"u{x.itemsize}"), before.view(f"u{x.itemsize}"))
    else:
        # The old values, and 0 for masked-off lanes.
        want = before.copy()
        want[n:] = 0
        np.testing.assert_array_equal(old.view(f"u{x.itemsize}"), want.view(f"u{x.itemsize}"))


@metile.kernel
def half_add(X, V, Old, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    old = metile.atomic_add(X + offs % 4, metile.load(V + offs, mask=mask), mask=mask)
    metile.store(Old + offs, old, mask=mask)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_add_rounds_once_and_is_refused_on_apple(device, dtype):
    n = 37
    if dtype == "f16":
        x = np.zeros(4, np.float16)
        v = (np.arange(n) % 5).astype(np.float16) * np.float16(0.25)
        to_f = lambda a: a.astype(np.float32)  # noqa: E731
    else:
        try:
            import ml_dtypes
        except ImportError:
            pytest.skip("ml_dtypes is needed for bf16 arrays")
        x = np.zeros(4, ml_dtypes.bfloat16)
        v = ((np.arange(n) % 5) * 0.25).astype(ml_dtypes.bfloat16)
        to_f = lambda a: a.astype(np.float32)  # noqa: E731
    old = np.zeros(n, x.dtype)
    if device == "msl-emu":
        with pytest.raises(metile.CompilationError, match=rf"atomic_add on {dtype} is not available on Apple GPUs: "
                           r"Metal has no 16-bit float atomics") as e:
            half_add[(1,)](x, v, old, n, BLOCK=64)
        assert "metile.atomic_add(X + offs % 4" in str(e.value)
        return
    half_add[(1,)](x, v, old, n, BLOCK=64)
    # Quarter steps sum exactly in either type whatever the order.
    expected = np.array([to_f(v[i::4]).sum() for i in range(4)], np.float32)
    np.testing.assert_array_equal(to_f(x), expected)


# --------------------------------------------------------------- histogram


@metile.kernel
def histogram(X, H, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    bins = metile.load(X + offs, mask=mask)
    metile.atomic_add(H + bins, 1, mask=mask, sem="relaxed")


@pytest.mark.parametrize("n", [1, 999, 4096])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.float32], ids=lambda d: np.dtype(d).name)
def test_histogram(device, rng, n, dtype):
    bins = 16
    x = rng.integers(0, bins, n).astype(np.int32)
    h = np.zeros(bins, dtype)
    histogram[(metile.cdiv(n, 256),)](x, h, n, BLOCK=256)
    np.testing.assert_array_equal(h, np.bincount(x, minlength=bins).astype(dtype))


# ------------------------------------------------------ split-K accumulation


@metile.kernel
def split_k_matmul(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr,
                   SPLIT: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    pid_k = metile.program_id(2)
    rm = pid_m * BM + metile.arange(0, BM)
    rn = pid_n * BN + metile.arange(0, BN)
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for kb in range(pid_k, metile.cdiv(K, BK), SPLIT):
        rk = kb * BK + metile.arange(0, BK)
        a = metile.load(A + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = metile.load(B + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    metile.atomic_add(C + rm[:, None] * N + rn[None, :], acc, mask=c_mask, sem="relaxed")


@pytest.mark.parametrize(("m", "n", "k"), [(37, 45, 100), (16, 16, 16), (5, 70, 33)])
def test_split_k_accumulation(device, rng, m, n, k):
    # Small integers: every partial sum is exact in f32, whatever order the atomics land in.
    a = rng.integers(-3, 4, (m, k)).astype(np.float32)
    b = rng.integers(-3, 4, (k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    bm = bn = bk = 16
    split = 3
    split_k_matmul[(metile.cdiv(m, bm), metile.cdiv(n, bn), split)](a, b, c, m, n, k, BM=bm, BN=bn, BK=bk,
                                                                    SPLIT=split)
    np.testing.assert_array_equal(c, a @ b)


# ------------------------------------------------------------- scalar atomics


@metile.kernel
def tickets(Counter, Ticket, SEM: metile.constexpr, SCOPE: metile.constexpr):
    pid = metile.program_id(0)
    ticket = metile.atomic_add(Counter, 1, sem=SEM, scope=SCOPE)
    metile.store(Ticket + pid, ticket)


@pytest.mark.parametrize("sem", ["relaxed", "acquire", "release", "acq_rel"])
@pytest.mark.parametrize("scope", ["gpu", "cta"])
def test_a_scalar_atomic_runs_once_per_program(device, sem, scope):
    programs = 150
    counter = np.zeros(1, np.int32)
    ticket = np.full(programs, -1, np.int32)
    tickets[(programs,)](counter, ticket, SEM=sem, SCOPE=scope)
    assert counter[0] == programs
    np.testing.assert_array_equal(np.sort(ticket), np.arange(programs))


@metile.kernel
def small_tile_add(X, V, Old, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    old = metile.atomic_add(X + offs, metile.load(V + offs, mask=mask), mask=mask)
    metile.store(Old + offs, old + 1000, mask=mask)


@pytest.mark.parametrize("n", [3, 8])
def test_a_tile_smaller_than_the_threadgroup_is_applied_once(device, n):
    # Eight elements over a threadgroup of at least 32 threads: the layout holds each
    # element in several threads; one of them does the atomic and shares the old value.
    x = np.arange(8, dtype=np.int32) * 10
    v = np.arange(8, dtype=np.int32) + 1
    old = np.zeros(8, np.int32)
    small_tile_add[(1,)](x, v, old, n, BLOCK=8, num_sgs=2)
    np.testing.assert_array_equal(x[:n], np.arange(n) * 10 + np.arange(n) + 1)
    np.testing.assert_array_equal(x[n:], np.arange(n, 8) * 10)
    np.testing.assert_array_equal(old[:n], np.arange(n) * 10 + 1000)


@metile.kernel
def read_then_add(X, Y, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    metile.atomic_add(X + offs, 5, mask=mask)
    metile.store(Y + offs, x * 2, mask=mask)


def test_a_load_before_an_atomic_keeps_the_old_value(device):
    x = np.arange(20, dtype=np.int32)
    y = np.zeros(20, np.int32)
    read_then_add[(1,)](x, y, 20, BLOCK=32)
    np.testing.assert_array_equal(y, np.arange(20) * 2)
    np.testing.assert_array_equal(x, np.arange(20) + 5)


# ---------------------------------------------- layer-norm backward (the lock)


@metile.kernel
def layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N,
                            GROUP_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = metile.load(X + cols, mask=mask, other=0).to(metile.float32)
    dy = metile.load(DY + cols, mask=mask, other=0).to(metile.float32)
    w = metile.load(W + cols, mask=mask).to(metile.float32)
    mean = metile.load(Mean + row)
    rstd = metile.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = metile.where(mask, xhat, 0.)
    wdy = metile.where(mask, wdy, 0.)
    c1 = metile.sum(xhat * wdy, axis=0) / N
    c2 = metile.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    metile.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while metile.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = metile.load(Count)
    if count == 0:
        metile.atomic_xchg(Count, 1)
    else:
        partial_dw += metile.load(DW, mask=mask)
        partial_db += metile.load(DB, mask=mask)
    metile.store(DW, partial_dw, mask=mask)
    metile.store(DB, partial_db, mask=mask)
    metile.atomic_xchg(Lock, 0)


@metile.kernel
def layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: metile.constexpr,
                        BLOCK_SIZE_N: metile.constexpr):
    pid = metile.program_id(0)
    cols = pid * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
    dw = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    db = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + metile.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += metile.load(DW + offs, mask=mask, other=0.)
        db += metile.load(DB + offs, mask=mask, other=0.)
    sum_dw = metile.sum(dw, axis=0)
    sum_db = metile.sum(db, axis=0)
    metile.store(FINAL_DW + cols, sum_dw, mask=cols < N)
    metile.store(FINAL_DB + cols, sum_db, mask=cols < N)


@pytest.mark.parametrize(("m", "n", "group"), [(37, 100, 8), (64, 128, 4), (9, 30, 16)])
def test_layer_norm_backward_with_the_lock(device, rng, m, n, group):
    x = rng.standard_normal((m, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal((m, n)).astype(np.float32)
    mean = x.mean(axis=1).astype(np.float32)
    rstd = (1 / np.sqrt(x.var(axis=1) + 1e-5)).astype(np.float32)
    block_n = metile.next_power_of_2(n)
    locks = np.zeros(2 * group, np.int32)
    dw_part = np.zeros((group, n), np.float32)
    db_part = np.zeros((group, n), np.float32)
    dx = np.zeros_like(x)
    layer_norm_bwd_dx_fused[(m,)](dx, dy, dw_part, db_part, x, w, mean, rstd, locks, n, n,
                                  GROUP_SIZE_M=group, BLOCK_SIZE_N=block_n)
    dw = np.zeros(n, np.float32)
    db = np.zeros(n, np.float32)
    layer_norm_bwd_dwdb[(metile.cdiv(n, 32),)](dw_part, db_part, dw, db, group, n, BLOCK_SIZE_M=32,
                                               BLOCK_SIZE_N=32)
    assert (locks[:group] == 0).all(), "every lock is released"
    assert (locks[group:] == (np.arange(group) < m)).all(), "each group's first writer sets its count"
    x64, dy64, w64 = x.astype(np.float64), dy.astype(np.float64), w.astype(np.float64)
    xhat = (x64 - mean[:, None]) * rstd[:, None]
    wdy = w64 * dy64
    c1 = (xhat * wdy).sum(axis=1, keepdims=True) / n
    c2 = wdy.sum(axis=1, keepdims=True) / n
    np.testing.assert_allclose(dx, (wdy - (xhat * c1 + c2)) * rstd[:, None], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, (dy64 * xhat).sum(axis=0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db, dy64.sum(axis=0), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------- errors


@metile.kernel
def bad_sem(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_add(X + offs, 1, sem="seq_cst")


@metile.kernel
def bad_scope(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_or(X + offs, 1, scope="device")


@metile.kernel
def float_bitwise(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_xor(X + offs, 1)


@metile.kernel
def pointer_operand(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_xchg(X + offs, X + offs)


@metile.kernel
def on_shared(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    s = metile.shared(BLOCK, dtype=metile.int32)
    metile.atomic_add(s + offs, 1)


@metile.kernel
def on_number(X, BLOCK: metile.constexpr):
    metile.atomic_add(3, 1)


def test_atomic_argument_errors_name_the_argument_and_line(device):
    ints = np.zeros(16, np.int32)
    with pytest.raises(metile.CompilationError, match=r"atomic_add's sem must be \"relaxed\", \"acquire\", "
                       r"\"release\" or \"acq_rel\", got 'seq_cst'") as e:
        bad_sem[(1,)](ints, BLOCK=16)
    assert 'metile.atomic_add(X + offs, 1, sem="seq_cst")' in str(e.value)
    with pytest.raises(metile.CompilationError, match=r"atomic_or's scope must be \"gpu\", \"cta\" or \"sys\", "
                       r"got 'device'"):
        bad_scope[(1,)](ints, BLOCK=16)
    with pytest.raises(metile.CompilationError, match="atomic_xor is not defined on f32 pointers; it takes i32, "
                       "u32 or i64"):
        float_bitwise[(1,)](np.zeros(16, np.float32), BLOCK=16)
    with pytest.raises(metile.CompilationError, match="atomic_max is not defined on f16 pointers; it takes i32, "
                       "u32, i64 or f32"):
        half_max[(1,)](np.zeros(16, np.float16), BLOCK=16)
    with pytest.raises(metile.CompilationError, match="atomic_add is not defined on bool pointers; it takes i32, "
                       "u32, i64, f16, bf16 or f32"):
        bool_add[(1,)](np.zeros(16, np.bool_), BLOCK=16)
    with pytest.raises(metile.CompilationError, match="atomic_xchg: the value must be a number or a tile of "
                       "numbers, got a pointer"):
        pointer_operand[(1,)](ints, BLOCK=16)
    with pytest.raises(metile.CompilationError, match="atomic_add needs a pointer into a kernel buffer; atomics "
                       "on metile.shared memory are not supported"):
        on_shared[(1,)](ints, BLOCK=16)
    with pytest.raises(metile.CompilationError, match="atomic_add needs a pointer"):
        on_number[(1,)](ints, BLOCK=16)


@metile.kernel
def half_max(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_max(X + offs, 1.0)


@metile.kernel
def bool_add(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_add(X + offs, 1)


@metile.kernel
def system_scope(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_add(X + offs, 1, scope="sys")


def test_system_scope_runs_on_cpu_and_is_refused_on_apple(device):
    x = np.zeros(16, np.int32)
    if device == "msl-emu":
        with pytest.raises(metile.CompilationError, match=r"atomic_add with scope=\"sys\" is not available on Apple "
                           r"GPUs: Metal's widest scope is the device; use scope=\"gpu\""):
            system_scope[(1,)](x, BLOCK=16)
        return
    system_scope[(2,)](x, BLOCK=16)
    np.testing.assert_array_equal(x, np.full(16, 2))


@metile.kernel
def unmasked_add(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.atomic_add(X + offs, 1)


def test_an_out_of_bounds_atomic_changes_nothing(device):
    if device not in ("cpu", "msl-emu"):
        pytest.skip("only the CPU backends check every access")
    x = np.zeros(10, np.int32)
    with pytest.raises(IndexError) as e:
        unmasked_add[(1,)](x, BLOCK=16)
    assert "metile.atomic_add(X + offs, 1)" in str(e.value)
    if device == "cpu":
        assert "`X`" in str(e.value) and "outside [0, 10)" in str(e.value)
        np.testing.assert_array_equal(x, 0)


def test_an_atomic_on_a_misaligned_array_is_refused_on_cpu():
    # An int32 view one byte into raw memory: the cpu backend uses memory in place,
    # and atomics need aligned elements (GPU backends copy such arrays).
    raw = bytearray(4 * 17)
    x = np.frombuffer(memoryview(raw)[1:65], dtype=np.int32)
    assert not x.flags.aligned
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        with pytest.raises(TypeError, match=r"`atomic_add` on `X` needs the buffer aligned to its 4-byte elements"):
            unmasked_add[(1,)](x, BLOCK=16)
    finally:
        metile.set_device(previous)


def test_an_atomic_on_a_read_only_array_is_refused(device):
    x = np.zeros(16, np.int32)
    x.flags.writeable = False
    with pytest.raises(ValueError, match=r"argument 'X' is read-only .* kernel unmasked_add stores through it"):
        unmasked_add[(1,)](x, BLOCK=16)


def role_scalar_atomic(X, BLOCK: metile.constexpr):
    with metile.simdgroup_role(0, 2):
        old = metile.atomic_add(X, 1)
        metile.store(X + 1, old)


def test_a_program_atomic_inside_simdgroup_role_is_refused():
    traced = _frontend.specialize(role_scalar_atomic, [("X", "ptr", "i32")], {"BLOCK": 64}, {"threads_per_group": 64})
    with pytest.raises(metile.CompilationError, match="needs a threadgroup barrier, which cannot run inside "
                       "simdgroup_role") as e:
        _metile.compile_msl(traced, num_sgs=2)
    assert "metile.atomic_add(X, 1)" in str(e.value)
