"""Hostile memory accesses on msl-emu, beside the cpu backend running the same kernel: reads
and writes just outside a buffer, into another argument's buffer, far before or megabytes past
one, and past threadgroup memory all raise IndexError naming the kernel line, and nothing outside
the buffer changes. Each case runs in a fresh process (tests/isolated.py), so a crash is a failed
test rather than a lost run."""

import os

import pytest
from isolated import run_isolated

import metile

DEVICES = [d for d in ("msl-emu", "cpu") if metile.device_available(d)]

TESTS = os.path.dirname(os.path.abspath(__file__))
KERNELS = f"""
import sys
sys.path.insert(0, {TESTS!r})
import numpy as np
from hostile_emu_kernels import expect_index_error, shared_shift, shifted_copy
"""


def _index_error(device, case, env=None):
    outcome = run_isolated(KERNELS + case, device=device, env=env)
    assert outcome.returncode == 0, f"exit {outcome.returncode}\n{outcome.stdout}\n{outcome.stderr}"
    assert "IndexError:" in outcome.stdout, outcome.stdout
    return outcome.stdout


@pytest.mark.parametrize("device", DEVICES)
def test_reading_the_element_before_a_buffer(device):
    out = _index_error(device, """
x = np.arange(64, dtype=np.float32)
out = np.zeros(64, np.float32)
shifted_copy[(1,)](x, out, 64, 0, 0, BLOCK=64)
assert (out == x).all()
expect_index_error(lambda: shifted_copy[(1,)](x, out, 64, -1, 0, BLOCK=64))
""")
    assert "x = metile.load(X + offs + LOAD_SHIFT)" in out
    if device == "msl-emu":
        assert "out-of-bounds access to buffer argument 0 (device const float*): " \
               "a 4-byte device read at byte offset -4; the buffer has 256 bytes" in out, out
    else:
        assert "element index -1 is outside [0, 64)" in out, out


@pytest.mark.parametrize("device", DEVICES)
def test_reading_a_few_elements_past_the_end(device):
    out = _index_error(device, """
x = np.arange(61, dtype=np.float32)
out = np.zeros(64, np.float32)
expect_index_error(lambda: shifted_copy[(1,)](x, out, 61, 0, 0, BLOCK=64))
""")
    assert "x = metile.load(X + offs + LOAD_SHIFT)" in out
    if device == "msl-emu":
        assert "out-of-bounds access to buffer argument 0 (device const float*)" in out, out
        assert "the buffer has 244 bytes" in out, out
    else:
        assert "is outside [0, 61)" in out, out


@pytest.mark.parametrize("device", DEVICES)
def test_reading_into_another_arguments_buffer(device):
    # x and out are neighbours in one allocation: x[64:128] is out.
    out = _index_error(device, """
both = np.arange(128, dtype=np.float32)
x, out = both[:64], both[64:]
expect_index_error(lambda: shifted_copy[(1,)](x, out, 64, 64, 0, BLOCK=64))
assert (both == np.arange(128)).all(), "nothing was written"
""")
    if device == "msl-emu":
        assert "out-of-bounds access to buffer argument 0 (device const float*): a " in out, out
        assert "-byte device read at byte offset 256; the buffer has 256 bytes" in out, out
    else:
        assert "element index 64 is outside [0, 64)" in out, out


@pytest.mark.parametrize("device", DEVICES)
def test_a_store_far_before_out_does_not_overwrite_another_argument(device):
    out = _index_error(device, """
both = np.arange(128, dtype=np.float32)
x, out = both[:64], both[64:]
expect_index_error(lambda: shifted_copy[(1,)](x, out, 64, 0, -64, BLOCK=64))
assert (both == np.arange(128)).all(), "x was overwritten"
""")
    assert "metile.store(Out + offs + STORE_SHIFT, x, mask=offs < N)" in out
    if device == "msl-emu":
        assert "out-of-bounds access to buffer argument 1 (device float*): a " in out, out
        assert "-byte device write at byte offset -256; the buffer has 256 bytes" in out, out


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shift", [1 << 22, -(1 << 22), (1 << 31) - 128])
def test_a_store_megabytes_away_is_caught_and_the_process_goes_on(device, shift):
    out = _index_error(device, f"""
x = np.ones(64, np.float32)
out = np.zeros(64, np.float32)
expect_index_error(lambda: shifted_copy[(1,)](x, out, 64, 0, {shift}, BLOCK=64))
assert (out == 0).all()
shifted_copy[(1,)](x, out, 64, 0, 0, BLOCK=64)
assert (out == 1).all(), "a correct launch afterwards works"
""")
    if device == "msl-emu":
        assert f"-byte device write at byte offset {4 * shift}; the buffer has 256 bytes" in out, out


@pytest.mark.parametrize("device", DEVICES)
def test_threadgroup_memory_out_of_bounds(device):
    out = _index_error(device, """
out = np.zeros(128, np.float32)
shared_shift[(1,)](out, 0)
assert (out == 1).all()
expect_index_error(lambda: shared_shift[(1,)](out, 200))
""")
    assert "metile.store(Out + tid, metile.load(tile + tid + SHIFT))" in out
    if device == "msl-emu":
        assert "out-of-bounds access to threadgroup parameter 0 (threadgroup float*): a 4-byte threadgroup read" in out
        assert "it has 1024 bytes" in out, out
    else:
        assert "is outside [0, 256)" in out, out


needs_emu = pytest.mark.skipif("msl-emu" not in DEVICES, reason="no msl-emu device here")


@needs_emu
def test_unchecked_mode_runs_in_bounds_kernels():
    outcome = run_isolated(KERNELS + """
x = np.arange(64, dtype=np.float32)
out = np.zeros(64, np.float32)
shifted_copy[(1,)](x, out, 64, 0, 0, BLOCK=64)
assert (out == x).all()
print("ok")
""", device="msl-emu", env={"METILE_EMU_CHECKS": "0"})
    assert outcome.returncode == 0 and "ok" in outcome.stdout, outcome.stderr


@needs_emu
def test_misaligned_slices_run_and_overlapping_ones_are_refused():
    outcome = run_isolated(KERNELS + """
data = np.arange(72, dtype=np.float32)
view = data[1:65]  # 4 bytes past a 16-byte boundary
out = np.zeros(64, np.float32)
shifted_copy[(1,)](view, out, 64, 0, 0, BLOCK=64)
assert (out == view).all()
shifted_copy[(1,)](view, view, 64, 0, 0, BLOCK=64)  # in place, same view twice
assert (data[1:65] == np.arange(1, 65)).all()
try:
    shifted_copy[(1,)](data[0:64], data[1:65], 64, 0, 0, BLOCK=64)
except TypeError as e:
    print("TypeError:", e)
""", device="msl-emu")
    assert outcome.returncode == 0, outcome.stderr
    assert "TypeError: arguments 0 and 1 overlap at addresses 4 bytes apart, which cannot both be 16-byte aligned" \
           in outcome.stdout, outcome.stdout
