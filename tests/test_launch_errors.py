"""Bad input at launch: every case raises a clear Python exception."""

import numpy as np
import pytest

import metile


@metile.kernel
def add(X, Y, Out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(Out + offs, x + y, mask=mask)


@metile.kernel
def unmasked_copy(X, Out, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(Out + offs, x)


@metile.kernel
def mismatched(X, Out, BLOCK: metile.constexpr):
    a = metile.arange(0, BLOCK)
    b = metile.arange(0, BLOCK * 2)
    metile.store(Out + a, a + b)


def _bufs(n=64, dtype=np.float32):
    return np.ones(n, dtype), np.ones(n, dtype), np.zeros(n, dtype)


def test_too_few_arguments():
    x, y, out = _bufs()
    with pytest.raises(TypeError, match=r"missing the argument 'N'"):
        add[(1,)](x, y, out, BLOCK=64)


def test_too_many_arguments():
    x, y, out = _bufs()
    with pytest.raises(TypeError, match=r"takes 5 arguments but 6 were given"):
        add[(1,)](x, y, out, 64, 64, 1)


def test_missing_constexpr():
    x, y, out = _bufs()
    with pytest.raises(TypeError, match=r"missing the constexpr 'BLOCK'.*BLOCK=\.\.\."):
        add[(1,)](x, y, out, 64)


def test_unknown_keyword():
    x, y, out = _bufs()
    with pytest.raises(TypeError, match=r"unknown keyword argument 'BLOK'.*X, Y, Out, N, BLOCK"):
        add[(1,)](x, y, out, 64, BLOK=64)


def test_argument_given_twice():
    x, y, out = _bufs()
    with pytest.raises(TypeError, match=r"multiple values for argument 'X'"):
        add[(1,)](x, y, out, 64, X=x, BLOCK=64)


@pytest.mark.parametrize("grid", [5, (), (1, 2, 3, 4), (-1,), (1, -1), (1.5,), ("a",), (True,), None])
def test_bad_grid(grid):
    with pytest.raises(ValueError, match=r"grid must be a tuple of 1 to 3 ints, each 0 or more \(0: an empty launch"):
        add[grid]


@pytest.mark.parametrize("dtype", [np.complex64, "m8[s]", object])
def test_unsupported_dtype(dtype):
    x = np.ones(64, dtype)
    _, y, out = _bufs()
    with pytest.raises(TypeError, match=r"argument 'X' has dtype .*supported dtypes: bool, int8, uint8, int16, "
                                        r"uint16, int32, uint32, int64, uint64, float16, bfloat16, float32, float64, "
                                        r"float8_e4m3fn, float8_e5m2"):
        add[(1,)](x, y, out, 64, BLOCK=64)


def test_non_contiguous_array_is_refused():
    x = np.ones(128, np.float32)[::2]
    _, y, out = _bufs()
    with pytest.raises(ValueError, match=r"argument 'X' is a non-contiguous array.*ascontiguousarray"):
        add[(1,)](x, y, out, 64, BLOCK=64)


@pytest.mark.parametrize("bad", [[1.0] * 64, "x", None, object()])
def test_argument_of_unpassable_type(bad):
    _, y, out = _bufs()
    with pytest.raises(TypeError, match=r"argument 'X' of type \w+ cannot be passed to a kernel"):
        add[(1,)](bad, y, out, 64, BLOCK=64)


def test_scalar_beyond_64_bits():
    x, y, out = _bufs()
    with pytest.raises(OverflowError, match=r"argument 'N' = 18446744073709551616 does not fit in 64 bits, the "
                                            r"widest integer kernel argument"):
        add[(1,)](x, y, out, 2**64, BLOCK=64)
    with pytest.raises(OverflowError, match=r"argument 'N' = -9223372036854775809 does not fit in 64 bits"):
        add[(1,)](x, y, out, -(2**63) - 1, BLOCK=64)


def test_mismatched_tile_shapes_show_the_source_line():
    out = np.zeros(64, np.int32)
    with pytest.raises(metile.CompilationError) as info:
        mismatched[(1,)](out, out, BLOCK=16)
    msg = str(info.value)
    assert "[16] and [32] cannot be broadcast together" in msg
    assert "test_launch_errors.py" in msg
    assert "metile.store(Out + a, a + b)" in msg


def test_edsl_call_outside_a_kernel():
    with pytest.raises(RuntimeError, match=r"can only be called inside a @metile.kernel"):
        metile.arange(0, 16)


def test_out_of_bounds_access_names_the_kernel_line(device):
    if device not in ("cpu", "msl-emu"):
        pytest.skip("only the CPU backends check every access")
    x = np.ones(100, np.float32)
    out = np.zeros(100, np.float32)
    with pytest.raises(IndexError) as info:
        unmasked_copy[(2,)](x, out, BLOCK=64)
    msg = str(info.value)
    if device == "cpu":
        assert "`X`" in msg and "outside [0, 100)" in msg
    else:
        # the emulator catches the fault in the emitted MSL and maps its line back to the kernel's
        assert "out-of-bounds access to buffer argument 0" in msg and "the buffer has 400 bytes" in msg
    assert "x = metile.load(X + offs)" in msg


def test_launching_without_a_grid():
    x, y, out = _bufs()
    with pytest.raises(TypeError, match=r"add\[grid\]"):
        add(x, y, out, 64, BLOCK=64)


def test_unknown_device():
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        metile.set_device("tpu")


@pytest.mark.parametrize("grid", [(2**31,), (1, 2**31), (1, 1, 2**32 - 1)])
def test_grid_beyond_program_id_range_is_refused_on_every_backend(device, grid):
    x = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"grid .* out of range; on the .* device this kernel's grid extents"):
        add[grid](x, x, x, 4, BLOCK=4)


def test_msl_grid_limit_follows_the_threadgroup_size():
    # On Apple GPUs threadgroups x threads must fit the 32-bit thread position in the grid.
    if not metile.device_available("msl-emu"):
        pytest.skip("msl-emu is not available here")
    previous = metile.get_device()
    metile.set_device("msl-emu")
    try:
        x = np.zeros(4, np.float32)
        with pytest.raises(ValueError, match=r"between 1 and \[33554431, 2147483647, 2147483647\]"):
            add[(2**25,)](x, x, x, 4, BLOCK=4, num_sgs=4)
    finally:
        metile.set_device(previous)


class _ReadOnlyInterface:
    """An `__array_interface__` producer that marks its memory read-only."""

    def __init__(self, array):
        self._array = array
        interface = dict(array.__array_interface__)
        interface["data"] = (interface["data"][0], True)
        self.__array_interface__ = interface


def _read_only(a):
    a = a.copy()
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("wrap", [_read_only, lambda a: _ReadOnlyInterface(a)], ids=["numpy", "array_interface"])
def test_read_only_output_is_refused(device, wrap):
    n = 10
    out = np.zeros(n, np.float32)
    target = wrap(out)
    x = np.ones(n, np.float32)
    with pytest.raises(ValueError, match=r"argument 'Out' is read-only .* kernel add stores through it"):
        add[(1,)](x, x, target, n, BLOCK=16)
    np.testing.assert_array_equal(out, 0.0)


def test_read_only_inputs_are_fine(device):
    n = 10
    x = _read_only(np.arange(n, dtype=np.float32))
    y = _ReadOnlyInterface(np.ones(n, np.float32))
    out = np.zeros(n, np.float32)
    add[(1,)](x, y, out, n, BLOCK=16)
    np.testing.assert_array_equal(out, np.arange(n) + 1.0)


def test_read_only_dlpack_output_is_refused(device):
    out = _read_only(np.zeros(8, np.float32))
    try:
        capsule_owner = np.from_dlpack(out)
    except (BufferError, TypeError):
        pytest.skip("this numpy cannot export read-only arrays through DLPack")

    class Producer:
        def __dlpack__(self, **kwargs):
            return capsule_owner.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return capsule_owner.__dlpack_device__()

    if np.from_dlpack(Producer()).flags.writeable:
        pytest.skip("this numpy does not mark read-only DLPack imports")
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match="argument 'Out' is read-only"):
        add[(1,)](x, x, Producer(), 8, BLOCK=8)
