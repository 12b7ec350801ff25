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


def test_a_config_sets_constexprs_and_num_sgs(device):
    @metile.kernel
    def lanes(Out):
        metile.store(Out + metile.thread_id(), metile.thread_id())

    cfg = metile.Config(num_sgs=2)
    assert dict(cfg) == {"num_sgs": 2} and cfg.num_sgs == 2
    out = np.full(128, -1, np.int32)
    lanes[(1,)](out, **cfg)
    np.testing.assert_array_equal(out[:64], np.arange(64))
    np.testing.assert_array_equal(out[64:], -1)

    @metile.kernel
    def fill(Out, VALUE: metile.constexpr, BLOCK: metile.constexpr):
        metile.store(Out + metile.arange(0, BLOCK), VALUE)

    out = np.zeros(16, np.int32)
    fill[(1,)](out, **metile.Config(VALUE=5, BLOCK=16, num_sgs=1))
    np.testing.assert_array_equal(out, 5)
    assert repr(metile.Config(BLOCK=16, num_sgs=1)) == "Config(BLOCK=16, num_sgs=1)"


def test_config_validates_num_sgs():
    import pytest

    with pytest.raises(ValueError, match="num_sgs must be an int from 1 to 32"):
        metile.Config(num_sgs=64)
