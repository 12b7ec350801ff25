"""One trace per specialisation (constexpr values + argument dtypes + device)."""

import numpy as np

import metile


@metile.kernel
def scale(X, Out, N, factor, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) * factor, mask=mask)


def test_second_launch_does_not_trace_again():
    x = np.arange(100, dtype=np.float32)
    out = np.zeros_like(x)
    scale[(2,)](x, out, 100, 2.0, BLOCK=64)
    assert scale.cache_info()["traces"] == 1
    scale[(2,)](x, out, 100, 3.0, BLOCK=64)
    scale[(4,)](x, out, 100, 3.0, BLOCK=64)
    assert scale.cache_info()["traces"] == 1
    np.testing.assert_array_equal(out, x * 3)

    scale[(4,)](x, out, 100, 3.0, BLOCK=32)  # a new constexpr value
    assert scale.cache_info()["traces"] == 2
    scale[(4,)](x.astype(np.float16), out.astype(np.float16), 100, 3.0, BLOCK=32)  # new dtypes
    assert scale.cache_info() == {"traces": 3, "specializations": 3}


def test_buffers_and_arrays_share_a_specialisation():
    @metile.kernel
    def copy(X, Out, BLOCK: metile.constexpr):
        offs = metile.arange(0, BLOCK)
        metile.store(Out + offs, metile.load(X + offs))

    x = np.arange(16, dtype=np.float32)
    out = metile.Buffer.zeros((16,))
    copy[(1,)](x, out, BLOCK=16)
    copy[(1,)](metile.Buffer(data=x), out.numpy(), BLOCK=16)
    assert copy.cache_info()["traces"] == 1
    np.testing.assert_array_equal(out.numpy(), x)


def test_constexpr_defaults_apply_when_not_passed():
    @metile.kernel
    def fill(Out, VALUE: metile.constexpr = 7, BLOCK: metile.constexpr = 8):
        metile.store(Out + metile.arange(0, BLOCK), VALUE)

    out = np.zeros(8, np.int32)
    fill[(1,)](out)
    np.testing.assert_array_equal(out, 7)
    fill[(1,)](out, VALUE=3)
    np.testing.assert_array_equal(out, 3)
