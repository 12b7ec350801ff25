"""Scans (`cumsum`, `cumprod`, forward and reverse) and `sort` on 1-D and 2-D
tiles along either axis, on every backend, against numpy: ragged sizes, absent
lanes (a scan treats them as its identity; a sort moves them to the end of their
line), integer scans exactly, float scans within float tolerance, sorts exactly
(NaNs last, or first when descending). The suite's METILE_CHECK_TARGETS also
compiles each kernel for every GPU target."""

import numpy as np
import pytest

import metile


@metile.kernel
def scan_1d(X, Out, N, OP: metile.constexpr, REVERSE: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    if OP == "sum":
        y = metile.cumsum(x, axis=0, reverse=REVERSE)
    else:
        y = metile.cumprod(x, axis=0, reverse=REVERSE)
    metile.store(Out + offs, y, mask=offs < N)


@metile.kernel
def scan_2d(X, Out, M, N, AXIS: metile.constexpr, OP: metile.constexpr, REVERSE: metile.constexpr,
            BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = rm[:, None] * N + rn[None, :]
    x = metile.load(X + ptrs, mask=mask)
    if OP == "sum":
        y = metile.cumsum(x, axis=AXIS, reverse=REVERSE)
    else:
        y = metile.cumprod(x, axis=AXIS, reverse=REVERSE)
    metile.store(Out + ptrs, y, mask=mask)


def _np_scan(x, op, axis, reverse):
    f = np.cumsum if op == "sum" else np.cumprod
    if reverse:
        return np.flip(f(np.flip(x, axis), axis=axis), axis)
    return f(x, axis=axis)


@pytest.mark.parametrize("n, block", [(1, 16), (13, 16), (64, 64), (200, 256)])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_1d_integers_exact(device, rng, n, block, reverse):
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros_like(x)
    scan_1d[(1,)](x, out, n, OP="sum", REVERSE=reverse, BLOCK=block)
    np.testing.assert_array_equal(out, _np_scan(x, "sum", 0, reverse))


@pytest.mark.parametrize("dtype", [np.int64, np.uint32])
def test_integer_scans_wrap_like_the_language(device, rng, dtype):
    x = rng.integers(1, 2**20, 40).astype(dtype)
    out = np.zeros_like(x)
    scan_1d[(1,)](x, out, 40, OP="prod", REVERSE=False, BLOCK=64)
    np.testing.assert_array_equal(out, np.cumprod(x, dtype=dtype))


@pytest.mark.parametrize("reverse", [False, True])
def test_float_scans_1d(device, rng, reverse):
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    scan_1d[(1,)](x, out, n, OP="sum", REVERSE=reverse, BLOCK=512)
    np.testing.assert_allclose(out, _np_scan(x.astype(np.float64), "sum", 0, reverse), rtol=1e-5, atol=1e-4)
    y = (1 + rng.standard_normal(50) * 0.05).astype(np.float32)
    out = np.zeros_like(y)
    scan_1d[(1,)](y, out, 50, OP="prod", REVERSE=reverse, BLOCK=64)
    np.testing.assert_allclose(out, _np_scan(y.astype(np.float64), "prod", 0, reverse), rtol=1e-5)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("op", ["sum", "prod"])
def test_scans_2d_along_either_axis(device, rng, axis, reverse, op):
    M, N = 7, 13
    x = rng.integers(-3, 4, (M, N)).astype(np.int32)
    out = np.zeros_like(x)
    scan_2d[(1,)](x, out, M, N, AXIS=axis, OP=op, REVERSE=reverse, BM=8, BN=16)
    np.testing.assert_array_equal(out, _np_scan(x, op, axis, reverse))


def test_float_scan_2d(device, rng):
    M, N = 20, 33
    x = rng.standard_normal((M, N)).astype(np.float32)
    out = np.zeros_like(x)
    scan_2d[(1,)](x, out, M, N, AXIS=0, OP="sum", REVERSE=False, BM=32, BN=64)
    np.testing.assert_allclose(out, np.cumsum(x.astype(np.float64), 0), rtol=1e-5, atol=1e-5)


@metile.kernel
def scan_absent(X, Sum, Prod, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs % 3 != 1)
    metile.store(Sum + offs, metile.cumsum(x), mask=offs < N)
    metile.store(Prod + offs, metile.cumprod(x, reverse=True), mask=offs < N)


def test_scans_treat_absent_lanes_as_their_identity(device, rng):
    n = 32
    x = rng.integers(1, 5, n).astype(np.int32)
    present = np.arange(n) % 3 != 1
    s, p = np.zeros_like(x), np.zeros_like(x)
    scan_absent[(1,)](x, s, p, n, BLOCK=32)
    np.testing.assert_array_equal(s, np.cumsum(np.where(present, x, 0)))
    np.testing.assert_array_equal(p, _np_scan(np.where(present, x, 1), "prod", 0, True))


@metile.kernel
def scan_converted(X, F, B, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N, other=0.0)
    metile.store(F + offs, metile.cumsum(x.to(metile.float16)), mask=offs < N)
    metile.store(B + offs, metile.cumsum(x > 0), mask=offs < N)


def test_half_scans_accumulate_in_f32_and_bools_count(device, rng):
    n = 100
    x = rng.random(n).astype(np.float32) - 0.3
    f, b = np.zeros(n, np.float16), np.zeros(n, np.int32)
    scan_converted[(1,)](x, f, b, n, BLOCK=128)
    want = np.cumsum(x.astype(np.float16).astype(np.float64))
    np.testing.assert_allclose(f.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_array_equal(b, np.cumsum(x > 0))


@metile.kernel
def cumsum_dtype(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N, other=0)
    metile.store(Out + offs, metile.cumsum(x, 0, False, metile.int64), mask=offs < N)


def test_cumsum_dtype_converts_first(device):
    x = np.full(8, 2**30, np.int32)
    out = np.zeros(8, np.int64)
    cumsum_dtype[(1,)](x, out, 8, BLOCK=8)
    np.testing.assert_array_equal(out, np.cumsum(x.astype(np.int64)))


# ------------------------------------------------------------------ sort


@metile.kernel
def sort_1d(X, Out, N, DESCENDING: metile.constexpr, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs, mask=offs < N)
    metile.store(Out + offs, metile.sort(x, descending=DESCENDING), mask=offs < N)


@pytest.mark.parametrize("n, block", [(1, 1), (2, 2), (64, 64), (37, 64), (1000, 1024)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_1d_ragged_rows_come_out_sorted(device, rng, n, block, descending):
    # Absent lanes (past N) sort after the present ones, so the masked store
    # writes exactly the sorted present values.
    x = rng.standard_normal(n).astype(np.float32)
    out = np.zeros_like(x)
    sort_1d[(1,)](x, out, n, DESCENDING=descending, BLOCK=block)
    want = np.sort(x)
    np.testing.assert_array_equal(out, want[::-1] if descending else want)


@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.float16])
def test_sort_integers_and_halves(device, rng, dtype):
    x = rng.integers(0, 50, 100).astype(dtype) if dtype != np.float16 else rng.standard_normal(100).astype(dtype)
    out = np.zeros_like(x)
    sort_1d[(1,)](x, out, 100, DESCENDING=False, BLOCK=128)
    np.testing.assert_array_equal(out, np.sort(x))


def test_sort_puts_nan_above_every_number(device):
    x = np.array([3.0, np.nan, -np.inf, 0.0, np.inf, np.nan, -1.0, 2.0], np.float32)
    up, down = np.zeros_like(x), np.zeros_like(x)
    sort_1d[(1,)](x, up, 8, DESCENDING=False, BLOCK=8)
    sort_1d[(1,)](x, down, 8, DESCENDING=True, BLOCK=8)
    np.testing.assert_array_equal(up, np.sort(x))
    np.testing.assert_array_equal(down, np.concatenate([[np.nan, np.nan], np.sort(x)[:6][::-1]]))


@metile.kernel
def sort_2d(X, Out, M, N, DIM: metile.constexpr, DESCENDING: metile.constexpr,
            BM: metile.constexpr, BN: metile.constexpr):
    rm = metile.arange(0, BM)
    rn = metile.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    ptrs = rm[:, None] * N + rn[None, :]
    x = metile.load(X + ptrs, mask=mask)
    metile.store(Out + ptrs, metile.sort(x, dim=DIM, descending=DESCENDING), mask=mask)


@pytest.mark.parametrize("dim", [None, 0, 1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_2d_along_either_axis(device, rng, dim, descending):
    M, N = 6, 11
    x = rng.integers(-20, 20, (M, N)).astype(np.int32)
    out = np.zeros_like(x)
    sort_2d[(1,)](x, out, M, N, DIM=dim, DESCENDING=descending, BM=8, BN=16)
    axis = 1 if dim is None else dim
    want = np.sort(x, axis=axis)
    if descending:
        want = np.flip(want, axis)
    np.testing.assert_array_equal(out, want)


@metile.kernel
def sort_bool(X, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs) > 0
    metile.store(Out + offs, metile.sort(x, descending=True).to(metile.int32))


def test_sort_bools(device, rng):
    x = rng.integers(-1, 2, 32).astype(np.int32)
    out = np.zeros_like(x)
    sort_bool[(1,)](x, out, BLOCK=32)
    np.testing.assert_array_equal(out, np.sort((x > 0).astype(np.int32))[::-1])


# ------------------------------------------------------------------ errors


@metile.kernel
def sort_ragged_block(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X + offs, metile.sort(metile.load(X + offs)))


def test_sort_of_a_non_power_of_two_length_is_refused(device):
    with pytest.raises(metile.CompilationError, match=r"sort needs a power-of-two length along the sorted axis, "
                       r"got 12 .*use a block of 16 elements loaded with a mask") as e:
        sort_ragged_block[(1,)](np.zeros(12, np.float32), BLOCK=12)
    assert "metile.sort(metile.load(X + offs))" in str(e.value)


@metile.kernel
def scan_bad_axis(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X + offs, metile.cumsum(metile.load(X + offs), axis=1))


def test_scan_axis_out_of_range_is_refused(device):
    with pytest.raises(metile.CompilationError, match="cumsum: axis 1 is out of range for a tile of rank 1"):
        scan_bad_axis[(1,)](np.zeros(8, np.float32), BLOCK=8)


@metile.kernel
def scan_runtime_flag(X, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(X + offs, metile.cumsum(x, reverse=N > 0))


def test_scan_flags_must_be_compile_time(device):
    with pytest.raises(metile.CompilationError, match="reverse must be known when the kernel is compiled"):
        scan_runtime_flag[(1,)](np.zeros(8, np.float32), 3, BLOCK=8)


@metile.kernel
def sort_too_big(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(X + offs, metile.sort(metile.load(X + offs)))


def test_a_sort_larger_than_threadgroup_memory_is_refused_on_gpus():
    from metile import _frontend, _metile

    traced = _frontend.specialize(sort_too_big.fn, [("X", "ptr", "f32")], {"BLOCK": 16384}, {})
    with pytest.raises(metile.CompilationError, match="sort works in threadgroup memory and needs 65536 bytes"):
        _metile.compile_msl(traced)


@metile.kernel
def scan_in_role(X, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    with metile.simdgroup_role(role=0, num_roles=2):
        metile.store(X + offs, metile.cumsum(offs))


def test_a_scan_inside_a_simdgroup_role_is_refused_on_gpus():
    from metile import _frontend, _metile

    traced = _frontend.specialize(scan_in_role.fn, [("X", "ptr", "i32")], {"BLOCK": 64}, {})
    for compile_for in (_metile.compile_msl, lambda t: _metile.compile_cuda(t, arch="sm_90")):
        with pytest.raises(metile.CompilationError, match="needs a threadgroup barrier .* cannot run inside "
                           "simdgroup_role") as e:
            compile_for(traced)
        assert "metile.cumsum(offs)" in str(e.value)
