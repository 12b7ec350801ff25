"""metile.Buffer in a device's shared memory (metal's MTLBuffers; msl-emu's
page-aligned host pages take the same path, so it is tested here)."""

import gc
import mmap

import numpy as np
import pytest

import metile


@pytest.fixture
def shared_device(device):
    if device not in ("msl-emu", "metal"):
        pytest.skip(f"{device} buffers are plain numpy arrays")
    return device


@metile.kernel
def scale(X, Out, N, factor, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) * factor, mask=mask)


def _address(array):
    return array.__array_interface__["data"][0]


def test_zeros_are_page_aligned_shared_memory(shared_device):
    buf = metile.Buffer.zeros((3, 5), dtype="f16")
    view = buf.numpy()
    assert view.shape == (3, 5) and view.dtype == np.float16 and not view.any()
    assert view.flags["C_CONTIGUOUS"] and view.flags["WRITEABLE"]
    assert _address(view) % mmap.PAGESIZE == 0
    assert buf.numpy() is view, "numpy() is the same view every time"


def test_zeros_views_outlive_the_buffer(shared_device):
    buf = metile.Buffer.zeros((10,), dtype="i32")
    view = buf.numpy()
    del buf
    gc.collect()
    view[:] = 5  # still valid memory: the view keeps the allocation alive
    assert view.sum() == 50


def test_data_buffers_still_wrap_the_callers_array(shared_device):
    arr = np.arange(10, dtype=np.int32)
    buf = metile.Buffer(data=arr)
    assert buf.numpy() is arr


@pytest.mark.parametrize("n", [1, 100, 256, 1000])
def test_kernels_read_and_write_buffers_and_their_slices(shared_device, n):
    x = metile.Buffer(data=np.linspace(-1, 1, n + 7, dtype=np.float32))
    out = metile.Buffer.zeros((n + 7,))
    block = 128
    scale[(triton_cdiv(n, block),)](x, out, n, 2.0, BLOCK=block)
    metile.synchronize()
    expected = np.zeros(n + 7, np.float32)
    expected[:n] = 2 * x.numpy()[:n]
    np.testing.assert_array_equal(out.numpy(), expected)
    # A slice of a buffer's view is bound at its offset.
    tail = out.numpy()[7:]
    scale[(triton_cdiv(n, block),)](x.numpy()[:n], tail, n, -1.0, BLOCK=block)
    metile.synchronize()
    np.testing.assert_array_equal(out.numpy()[7:], -x.numpy()[:n])


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_empty_buffers(shared_device):
    buf = metile.Buffer.zeros((0,))
    assert buf.numpy().shape == (0,) and buf.nbytes == 0


@pytest.mark.parametrize(
    ("shape", "error", "match"),
    [
        ((2, -1), TypeError, r"a buffer's shape must be a non-negative int or a tuple of them, got \(2, -1\)"),
        ("3", TypeError, r"a buffer's shape must be a non-negative int or a tuple of them, got '3'"),
        ((2**40, 2**40), OverflowError, r"a buffer of shape \[1099511627776, 1099511627776\] is too large"),
    ],
)
def test_bad_shapes_are_refused(shared_device, shape, error, match):
    with pytest.raises(error, match=match):
        metile.Buffer.zeros(shape)


def test_unsupported_dtypes_are_refused(shared_device):
    with pytest.raises(TypeError, match="complex64, which meTile does not support"):
        metile.Buffer(data=np.zeros(3, np.complex64))
