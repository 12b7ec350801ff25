"""The NVIDIA path specifically: the CUDA C++ the emitter writes (checked here
without a GPU), and on a machine with one: CUDA tensors used in place, numpy
staging, Buffer's device copy, faults and the errors when CUDA is missing."""

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import metile
from metile import _frontend, _metile
from metile.testing import reference_kernels as rk

HAS_CUDA = metile.device_available("cuda")
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no cuda device here")

ADD_PARAMS = [("X", "ptr", "f32"), ("Y", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32")]


def _add_cuda(arch="sm_90", dtype="f32"):
    params = [(n, k, dtype if k == "ptr" else d) for n, k, d in ADD_PARAMS]
    traced = _frontend.specialize(rk.add.fn, params, {"BLOCK": 1024}, {})
    return _metile.compile_cuda(traced, arch=arch)


def test_cuda_source_is_produced_without_a_gpu():
    out = _add_cuda()
    src = out["cuda"]
    assert 'extern "C" __global__ void __launch_bounds__(256) add(' in src
    assert "const float* X," in src and "float* Out," in src and "int N)" in src
    assert "metile_vec<float, 4>" in src  # 16-byte vector accesses
    assert out["kernel_name"] == "add" and out["threads_per_group"] == 256 and out["shared_bytes"] == 0
    assert _add_cuda()["cuda"] == src  # deterministic


def test_bf16_kernels_include_the_nvrtc_header():
    src = _add_cuda(dtype="bf16")["cuda"]
    assert "#include <cuda_bf16.h>" in src and "#include <cuda_fp16.h>" not in src


def test_warp_reductions_and_shared_memory_in_softmax():
    traced = _frontend.specialize(rk.softmax.fn, [("X", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32")],
                                  {"BLOCK": 1024}, {})
    out = _metile.compile_cuda(traced, arch="sm_80")
    src = out["cuda"]
    assert "__syncthreads();" in src and "extern __shared__" in src
    assert "__shfl_xor_sync" in src or "simd_sum(" in src
    assert "for sm_80" in src


@pytest.mark.parametrize("arch", ["sm_9", "90", "gfx90a", "sm_60"])
def test_bad_arch_is_refused(arch):
    with pytest.raises(ValueError, match="arch must name an NVIDIA architecture"):
        _add_cuda(arch=arch)


def test_debug_cuda_prints_the_source():
    if not HAS_CUDA:
        pytest.skip("METILE_DEBUG=cuda prints while compiling for a cuda device")
    script = textwrap.dedent("""
        import numpy as np, metile
        from metile.testing.reference_kernels import add
        x = np.ones(10, np.float32)
        add[(1,)](x, x, x, 10, BLOCK=128)
    """)
    env = dict(os.environ, METILE_DEBUG="cuda", METILE_DEVICE="cuda")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert "// CUDA C++ of add" in r.stderr and "__global__" in r.stderr


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a GPU")
def test_without_a_driver_the_error_names_what_is_missing():
    env = dict(os.environ, METILE_DEVICE="cuda")
    script = "import metile\ntry:\n    metile.get_device()\nexcept ValueError as e:\n    print(e)\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert "cuda backend needs" in r.stdout and ("libcuda" in r.stdout or "NVRTC" in r.stdout)


@pytest.fixture
def on_cuda():
    previous = metile.get_device()
    metile.set_device("cuda")
    yield
    metile.set_device(previous)


@needs_cuda
def test_numpy_arguments_are_staged_and_written_back_with_a_warning(on_cuda, rng):
    n = 1000
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rk.add[(metile.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    np.testing.assert_allclose(out, x + y, rtol=1e-6)
    # Said once per process, so only when this was the first numpy launch on cuda.
    staging = [w for w in caught if "copied to the GPU and back" in str(w.message)]
    assert all(w.category is metile.MetileWarning and w.filename == __file__ for w in staging), staging


@needs_cuda
def test_buffer_keeps_a_device_copy(on_cuda, rng):
    n = 5000
    xs = rng.standard_normal(n).astype(np.float32)
    x, out = metile.Buffer(data=xs), metile.Buffer.zeros((n,))
    rk.add[(metile.cdiv(n, 1024),)](x, x, out, n, BLOCK=1024)
    np.testing.assert_allclose(out.numpy(), 2 * xs, rtol=1e-6)
    out.numpy()[:] = 1.0  # written through the host view: uploaded at the next launch
    rk.add[(metile.cdiv(n, 1024),)](out, out, out, n, BLOCK=1024)
    np.testing.assert_array_equal(out.numpy(), np.full(n, 2.0, np.float32))
    metile.set_device("cpu")  # a host launch sees the device's latest contents
    rk.add[(metile.cdiv(n, 1024),)](out, x, out, n, BLOCK=1024)
    np.testing.assert_allclose(out.numpy(), 2.0 + xs, rtol=1e-6)


@needs_cuda
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_torch_tensors_are_used_in_place(on_cuda, dtype):
    torch = pytest.importorskip("torch")
    n = 3000
    td = getattr(torch, dtype)
    x = (torch.randn(n, device="cuda") * 10).to(td)
    y = (torch.randn(n, device="cuda") * 10).to(td)
    out = torch.empty(n, dtype=td, device="cuda")
    rk.add[(metile.cdiv(n, 512),)](x, y, out, n, BLOCK=512)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


@needs_cuda
def test_cupy_arrays_are_used_in_place(on_cuda):
    cp = pytest.importorskip("cupy")
    n = 777
    x = cp.arange(n, dtype=cp.float32)
    out = cp.zeros(n, dtype=cp.float32)
    rk.add[(1,)](x, x, out, n, BLOCK=1024)
    metile.synchronize()
    assert bool((out == 2 * x).all())


@needs_cuda
def test_misaligned_and_strided_tensors_are_refused(on_cuda):
    torch = pytest.importorskip("torch")
    x = torch.zeros(1025, device="cuda")
    with pytest.raises(TypeError, match="not 16-byte aligned"):
        rk.add[(1,)](x[1:], x[1:], x[1:], 1024, BLOCK=1024)
    m = torch.zeros(64, 64, device="cuda")
    with pytest.raises(ValueError, match="non-contiguous CUDA tensor"):
        rk.add[(1,)](m.t(), m, m, 64, BLOCK=1024)


def test_cuda_tensors_are_refused_on_host_devices():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA tensor")
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        x = torch.zeros(16, device="cuda")
        with pytest.raises(TypeError, match="is in CUDA memory, but the current device is cpu"):
            rk.add[(1,)](x, x, x, 16, BLOCK=16)
    finally:
        metile.set_device(previous)


@needs_cuda
def test_a_gpu_fault_names_the_kernel_and_the_process_state(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, metile
        metile.set_device("cuda")

        @metile.kernel
        def wild(X, Out, BLOCK: metile.constexpr):
            offs = metile.arange(0, BLOCK) * 1000000
            metile.store(Out + offs, metile.load(X + offs))

        x = metile.Buffer.zeros((16,))
        try:
            wild[(1,)](x, x, BLOCK=1024)
            metile.synchronize()
        except RuntimeError as e:
            print("ERR", e)
    """)
    path = tmp_path / "fault.py"  # kernels are read from their source file
    path.write_text(script)
    env = dict(os.environ, METILE_DEVICE="cuda")
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=120)
    assert "ERR" in r.stdout, r.stdout + r.stderr
    assert "`wild`" in r.stdout and "restart the process" in r.stdout


def _softmax_cuda(n_param):
    params = [("X", "ptr", "f32"), ("Out", "ptr", "f32"), n_param]
    return _metile.compile_cuda(_frontend.specialize(rk.softmax.fn, params, {"BLOCK": 1024}, {}))["cuda"]


def test_a_row_length_known_to_be_a_multiple_of_16_vectorises_row_accesses():
    vector_load = "*((const metile_vec<float, 4>*)(X + "
    assert vector_load in _softmax_cuda(("N", "scalar", "i32", 16))
    assert vector_load not in _softmax_cuda(("N", "scalar", "i32"))


def test_integer_arguments_that_are_multiples_of_16_get_their_own_specialisation(rng):
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        for n in (64, 70, 128):
            x = rng.standard_normal((3, n)).astype(np.float32)
            out = np.zeros_like(x)
            rk.softmax[(3,)](x, out, n, BLOCK=32)
            e = np.exp(x - x.max(axis=1, keepdims=True))
            np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    finally:
        metile.set_device(previous)
    assert rk.softmax.cache_info()["specializations"] >= 2


def test_two_byte_rows_move_16_bytes_per_access_on_nvidia():
    params = [("X", "ptr", "bf16"), ("Out", "ptr", "bf16"), ("N", "scalar", "i32", 16)]
    traced = _frontend.specialize(rk.softmax.fn, params, {"BLOCK": 1024}, {})
    src = _metile.compile_cuda(traced, num_sgs=4)["cuda"]
    assert "*((const metile_vec<bfloat, 8>*)(X + " in src
