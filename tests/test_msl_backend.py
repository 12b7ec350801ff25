"""The Apple path specifically: MSL inspection, determinism across processes,
METILE_DEBUG, and what the lowering refuses (with figures and source lines)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import metile
from metile import _frontend, _metile

pytestmark = pytest.mark.skipif(not metile.device_available("msl-emu"), reason="msl-emu needs clang++")


@metile.kernel
def saxpy(X, Y, Out, a, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, a * metile.load(X + offs, mask=mask) + metile.load(Y + offs, mask=mask), mask=mask)


@metile.kernel
def too_much_shared(Out):
    buf = metile.shared(16384, "f32")
    metile.store(buf + metile.thread_id(), 1.0)
    metile.barrier()
    metile.store(Out + metile.thread_id(), metile.load(buf + metile.thread_id()))


@metile.kernel
def buffer_chosen_at_run_time(X, Y, Out, flag, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    src = X
    if flag > 0:
        src = Y
    metile.store(Out + offs, metile.load(src + offs))


SAXPY_PARAMS = [("X", "ptr", "f32"), ("Y", "ptr", "f32"), ("Out", "ptr", "f32"), ("a", "scalar", "f32"),
                ("N", "scalar", "i32")]


def _saxpy_msl():
    traced = _frontend.specialize(saxpy.fn, SAXPY_PARAMS, {"BLOCK": 256}, {"threads_per_group": 128})
    return _metile.compile_msl(traced)


def test_msl_signature_follows_the_metal_conventions():
    out = _saxpy_msl()
    msl = out["msl"]
    assert msl.startswith("#include <metal_stdlib>")
    assert "kernel void saxpy(" in msl
    assert "device const float* X [[buffer(0)]]" in msl
    assert "device float* Out [[buffer(2)]]" in msl
    assert "constant float& a [[buffer(3)]]" in msl
    assert "constant int& N [[buffer(4)]]" in msl
    assert out["gpu_ir"]


def test_msl_is_byte_identical_across_processes():
    script = (
        f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_msl_backend as t; "
        "sys.stdout.write(t._saxpy_msl()['msl'])"
    )
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
        for seed in (1, 2)
    ]
    assert runs[0] == runs[1] == _saxpy_msl()["msl"]


def test_metile_debug_prints_the_msl(capfd):
    previous = metile.get_device()
    metile.set_device("msl-emu")
    os.environ["METILE_DEBUG"] = "msl,gpu_ir"
    try:
        x = np.ones(300, np.float32)
        out = np.zeros_like(x)
        saxpy[(3,)](x, x, out, 2.0, 300, BLOCK=128)
    finally:
        del os.environ["METILE_DEBUG"]
        metile.set_device(previous)
    err = capfd.readouterr().err
    assert "// MSL of saxpy" in err and "kernel void saxpy(" in err
    assert "// GPU IR of saxpy" in err
    np.testing.assert_array_equal(out, 3 * x)


def test_threadgroup_memory_over_32_kib_is_refused_with_figures():
    previous = metile.get_device()
    metile.set_device("msl-emu")
    try:
        with pytest.raises(metile.CompilationError) as info:
            too_much_shared[(1,)](np.zeros(128, np.float32))
    finally:
        metile.set_device(previous)
    msg = str(info.value)
    assert "65536" in msg and "32768" in msg
    assert "test_msl_backend.py" in msg


@pytest.mark.parametrize("num_sgs", [0, 33, True, "4"])
def test_num_sgs_must_be_1_to_32(num_sgs):
    x = np.ones(8, np.float32)
    with pytest.raises(ValueError, match=r"num_sgs must be an int from 1 to 32"):
        saxpy[(1,)](x, x, x, 1.0, 8, BLOCK=8, num_sgs=num_sgs)


def test_a_buffer_chosen_at_run_time_is_refused_on_the_gpu_path():
    previous = metile.get_device()
    metile.set_device("msl-emu")
    try:
        x = np.ones(16, np.float32)
        with pytest.raises(metile.CompilationError) as info:
            buffer_chosen_at_run_time[(1,)](x, x, x, 1, BLOCK=16)
    finally:
        metile.set_device(previous)
    assert "test_msl_backend.py" in str(info.value)
