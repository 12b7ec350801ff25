"""MLX arrays (mlx.core.array) as kernel arguments: read in place, and stores seen by MLX."""

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

import metile  # noqa: E402


@metile.kernel
def _axpy(X, Y, Out, N, alpha, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, alpha * metile.load(X + offs, mask=mask) + metile.load(Y + offs, mask=mask), mask=mask)


@metile.kernel
def _copy(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < N), mask=offs < N)


@metile.kernel
def _read_past_end(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs + N))


def _launch_axpy(x, y, out, n, alpha=2.0):
    _axpy[(metile.cdiv(n, 128),)](x, y, out, n, alpha, BLOCK=128)


@pytest.mark.parametrize("n", [1, 127, 1000, 4099])
def test_stores_into_an_mlx_array_are_seen_by_mlx(device, n):
    x = mx.arange(n, dtype=mx.float32)
    y = mx.ones((n,), dtype=mx.float32) * 0.5
    out = mx.zeros((n,), dtype=mx.float32)
    _launch_axpy(x, y, out, n)
    expected = 2.0 * np.arange(n, dtype=np.float32) + 0.5
    # Read back through MLX itself: an MLX op on the written array.
    np.testing.assert_array_equal(np.array(out + 0), expected)
    assert out.sum().item() == pytest.approx(float(expected.sum()), rel=1e-4)  # MLX sums in f32


def test_lazy_inputs_are_evaluated_before_the_launch(device):
    n = 300
    base = mx.arange(n, dtype=mx.float32)
    lazy = base * 3 + 1  # not evaluated yet
    out = mx.zeros((n,), dtype=mx.float32)
    _copy[(metile.cdiv(n, 128),)](lazy, out, n, BLOCK=128)
    np.testing.assert_array_equal(np.array(out), 3 * np.arange(n, dtype=np.float32) + 1)


@pytest.mark.parametrize("mx_dtype,np_dtype", [("bfloat16", None), ("float16", np.float16), ("int32", np.int32),
                                               ("uint8", np.uint8)])
def test_every_dtype_mlx_exports_is_read_in_place(device, mx_dtype, np_dtype):
    n = 77
    dtype = getattr(mx, mx_dtype)
    x = (mx.arange(n) % 50).astype(dtype)
    out = mx.zeros((n,), dtype=dtype)
    _copy[(1,)](x, out, n, BLOCK=128)
    assert out.dtype == dtype
    np.testing.assert_array_equal(np.array(out.astype(mx.float32)), np.arange(n, dtype=np.float32) % 50)


def test_a_contiguous_slice_writes_into_its_parent(device):
    parent = mx.zeros((10,), dtype=mx.float32)
    window = parent[3:8]
    src = mx.array([1, 2, 3, 4, 5], dtype=mx.float32)
    _copy[(1,)](src, window, 5, BLOCK=8)
    np.testing.assert_array_equal(np.array(parent), [0, 0, 0, 1, 2, 3, 4, 5, 0, 0])


def test_mlx_and_numpy_arguments_mix(device):
    n = 200
    x = mx.arange(n, dtype=mx.float32)
    y = np.full(n, 0.25, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    _launch_axpy(x, y, out, n, alpha=-1.0)
    np.testing.assert_array_equal(out, -np.arange(n, dtype=np.float32) + 0.25)


def test_an_empty_array_launches_nothing(device):
    x = mx.zeros((0,), dtype=mx.float32)
    out = mx.zeros((0,), dtype=mx.float32)
    _copy[(1,)](x, out, 0, BLOCK=8)
    assert out.shape == (0,)


def test_a_transposed_array_is_refused(device):
    x = mx.arange(12, dtype=mx.float32).reshape(3, 4).T
    out = mx.zeros((12,), dtype=mx.float32)
    with pytest.raises(ValueError, match=r"argument 'X' is a non-contiguous MLX array \(shape \[4, 3\], strides "
                                         r"\[1, 4\] in elements\); .* pass mx.contiguous\(x\) instead"):
        _copy[(1,)](x, out, 12, BLOCK=16)


def test_an_unsupported_dtype_is_refused(device):
    x = mx.zeros((4,), dtype=mx.complex64)
    out = mx.zeros((4,), dtype=mx.float32)
    with pytest.raises(TypeError, match=r"argument 'X' has DLPack dtype \(code 5, 64 bits, 1 lanes\), which meTile "
                                        r"does not support"):
        _copy[(1,)](x, out, 4, BLOCK=8)


def test_reads_past_an_mlx_array_name_the_kernel_line(device):
    if device not in ("cpu", "msl-emu"):
        pytest.skip("bounds are checked on the CPU backends")
    x = mx.zeros((8,), dtype=mx.float32)
    out = mx.zeros((8,), dtype=mx.float32)
    # cpu names the parameter, msl-emu the Metal buffer argument; both name the kernel line.
    with pytest.raises(IndexError, match=r"out-of-bounds access to (`X`: element index 8|buffer argument 0)") as e:
        _read_past_end[(1,)](x, out, 4, BLOCK=8)
    assert "metile.load(X + offs + N)" in str(e.value)
