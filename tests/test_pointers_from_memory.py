"""Integers loaded from memory cast to pointers (`x.to(metile.pointer_type(d))`,
Triton's grouped-GEMM idiom), and what the checking backends do with them: an
address must point into a buffer argument of the launch, and the accesses
through it are checked against that buffer (cpu: the interpreter resolves the
address to the argument; msl-emu: the address gets that argument's tag)."""

import numpy as np
import pytest

import metile


@metile.kernel
def gather_rows(table, out, length, BLOCK: metile.constexpr, rows_a, rows_b):
    # Row `i` lives wherever table[i] says; rows_a and rows_b are the buffers
    # those addresses point into.
    i = metile.program_id(0)
    row = metile.load(table + i).to(metile.pointer_type(metile.float32))
    offs = metile.arange(0, BLOCK)
    values = metile.load(row + offs, mask=offs < length, other=0.0)
    metile.store(out + i * BLOCK + offs, values * 2.0, mask=offs < length)
    metile.store(row + offs, values + 1.0, mask=offs < length)


@pytest.fixture
def on_cpu():
    previous = metile.get_device()
    metile.set_device("cpu")
    yield
    metile.set_device(previous)


def _addresses(*rows):
    return np.array([r.__array_interface__["data"][0] for r in rows], np.int64)


def test_pointers_read_from_memory_reach_argument_buffers(device, rng):
    if device == "cuda":
        pytest.skip("numpy buffers are staged on cuda: their host addresses mean nothing on the GPU")
    length = 37
    a = rng.standard_normal(3 * 48).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    a0, b0 = a.copy(), b.copy()
    table = _addresses(a[48:], b, a[96:], a)  # element offsets 48, 0, 96, 0
    out = np.zeros((4, 64), np.float32)
    gather_rows[(4,)](table, out, length, 64, a, b)
    for i, (src, at) in enumerate([(a0, 48), (b0, 0), (a0, 96), (a0, 0)]):
        np.testing.assert_array_equal(out[i, :length], src[at:at + length] * 2)
    # The stores through the pointers wrote the argument buffers themselves.
    np.testing.assert_array_equal(b[:length], b0[:length] + 1)
    np.testing.assert_array_equal(a[48:48 + length], a0[48:48 + length] + 1)


def test_an_address_outside_every_argument_is_refused(device, rng):
    if device == "cuda":
        pytest.skip("an address outside the launch's buffers faults on a GPU; only checking backends refuse it")
    elsewhere = np.zeros(64, np.float32)  # not an argument of the launch
    a, b = np.zeros(64, np.float32), np.zeros(64, np.float32)
    table = _addresses(a, elsewhere, b, a)
    out = np.zeros((4, 64), np.float32)
    expected = {
        "cpu": (RuntimeError, r"points into no buffer argument of this launch"),
        "msl-emu": (IndexError, r"through a pointer that comes from no buffer argument"),
    }
    error, message = expected.get(device, (Exception, ""))
    with pytest.raises(error, match=message):
        gather_rows[(4,)](table, out, 8, 64, a, b)
    assert not elsewhere.any()


def test_the_cpu_refuses_a_pointer_of_the_wrong_element_type(on_cpu):
    ints = np.zeros(64, np.int32)
    table = _addresses(ints)
    with pytest.raises(RuntimeError, match=r"points into `rows_a`, a buffer of i32, but is used as a pointer to f32"):
        gather_rows[(1,)](table, np.zeros((1, 64), np.float32), 8, 64, ints, np.zeros(4, np.float32))


def test_the_cpu_refuses_a_misaligned_address(on_cpu):
    a = np.zeros(64, np.float32)
    table = _addresses(a) + 2
    with pytest.raises(RuntimeError, match=r"is not aligned to f32 elements of `rows_a` \(byte offset 2\)"):
        gather_rows[(1,)](table, np.zeros((1, 64), np.float32), 8, 64, a, a)


@metile.kernel
def bad_cast(table, WHAT: metile.constexpr):
    offs = metile.arange(0, 4)
    if WHAT == "tile":
        metile.load(table + offs).to(metile.pointer_type(metile.float32))
    elif WHAT == "pointer":
        (table + 0).to(metile.pointer_type(metile.float32))
    elif WHAT == "pointee":
        metile.load(table + 0).to("ptr<f17>")


@pytest.mark.parametrize("what, message", [
    ("tile", r"only one address at a time can become a pointer, got a tile of shape \[4\]"),
    ("pointer", r"ptr<i64> is already a pointer; pointer casts between element types are not supported"),
    ("pointee", r"unknown pointee dtype in pointer type ptr<f17>"),
])
def test_cast_errors(what, message):
    with pytest.raises(metile.CompilationError, match=message):
        bad_cast[(1,)](np.zeros(4, np.int64), WHAT=what)


@metile.kernel
def narrow_address(table):
    metile.load(metile.load(table + 0).to(metile.pointer_type(metile.float32)))


def test_only_64_bit_integers_become_pointers():
    with pytest.raises(metile.CompilationError, match=r"only 64-bit integers \(int64, uint64\) can become pointers, "
                                                      r"got i32"):
        narrow_address[(1,)](np.zeros(4, np.int32))


def test_pointer_type_names_a_pointer():
    assert metile.pointer_type(metile.float16) == "ptr<f16>"
    with pytest.raises(TypeError, match=r"pointer_type takes a dtype such as metile.float16, got 'ptr<f16>'"):
        metile.pointer_type("ptr<f16>")
