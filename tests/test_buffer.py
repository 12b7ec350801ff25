"""metile.Buffer: zero-copy views of numpy memory."""

import numpy as np
import pytest

import metile


def test_buffer_wraps_a_contiguous_array_without_copying():
    arr = np.arange(8, dtype=np.float32)
    buf = metile.Buffer(data=arr)
    assert buf.numpy() is arr
    buf.numpy()[0] = 42
    assert arr[0] == 42
    assert buf.shape == (8,) and buf.size == 8 and buf.nbytes == 32 and len(buf) == 8
    assert buf.dtype == np.float32
    assert "shape=(8,)" in repr(buf) and "float32" in repr(buf)
    np.testing.assert_array_equal(np.asarray(buf), arr)


def test_zeros_defaults_to_float32_and_takes_a_dtype():
    z = metile.Buffer.zeros((3, 4))
    assert z.numpy().dtype == np.float32 and z.shape == (3, 4) and not z.numpy().any()
    assert metile.Buffer.zeros((5,), dtype="f16").numpy().dtype == np.float16
    assert metile.Buffer.zeros((5,), dtype="int32").numpy().dtype == np.int32
    assert metile.Buffer(shape=(2,), dtype=np.uint32).numpy().dtype == np.uint32


def test_from_numpy_is_the_same_as_data():
    arr = np.zeros(4, dtype=np.int32)
    buf = metile.Buffer.from_numpy(arr)
    assert buf.numpy() is arr


def test_a_strided_array_is_copied_into_contiguous_memory():
    arr = np.arange(16, dtype=np.float32)[::2]
    buf = metile.Buffer(data=arr)
    assert buf.numpy().flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(buf.numpy(), arr)


@pytest.mark.parametrize("dtype", ["m8[s]", np.complex64, object])
def test_unsupported_dtypes_are_refused(dtype):
    with pytest.raises(TypeError, match=r"supported dtypes: bool, int8, uint8, int16, uint16, int32, uint32, int64, "
                                        r"uint64, float16, bfloat16, float32, float64, float8_e4m3fn, float8_e5m2"):
        metile.Buffer(data=np.zeros(4, dtype=dtype))


def test_buffer_needs_an_array():
    with pytest.raises(TypeError, match="needs a numpy array, got list"):
        metile.Buffer(data=[1.0, 2.0])
    with pytest.raises(TypeError, match="needs data=array"):
        metile.Buffer()
    with pytest.raises(TypeError, match="not both"):
        metile.Buffer(data=np.zeros(2, np.float32), shape=(2,))
