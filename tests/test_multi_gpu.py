"""Several GPUs in one process: a launch runs on the GPU its tensors live on
(`cuda:N`), arguments on two GPUs are refused, numpy arrays and `metile.Buffer`
follow the launch, and a data-parallel job runs one process per GPU. The
device tests need a machine with two GPUs; the naming rules run anywhere."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import metile
from metile.testing import reference_kernels as rk


def _gpus() -> int:
    if not metile.device_available("cuda"):
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()


GPUS = _gpus()
needs_two = pytest.mark.skipif(GPUS < 2, reason="needs two CUDA GPUs")


@metile.kernel
def double(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, 2 * metile.load(X + offs, mask=mask), mask=mask)


@pytest.fixture
def cuda():
    previous = metile.get_device()
    metile.set_device("cuda")
    yield
    metile.set_device(previous)


@pytest.mark.parametrize("name, message", [
    ("cuda:x", "'cuda:x' names no GPU: write cuda:N"),
    ("cuda:-1", "'cuda:-1' names no GPU"),
])
def test_a_badly_named_gpu_is_refused(name, message):
    with pytest.raises(ValueError, match=message):
        metile.set_device(name)
    assert not metile.device_available(name)


@pytest.mark.skipif(not metile.device_available("cuda"), reason="no cuda device here")
def test_a_gpu_beyond_the_count_is_named():
    with pytest.raises(ValueError, match=r"cuda:64 does not exist: this process sees \d+ GPU"):
        metile.set_device("cuda:64")


@needs_two
@pytest.mark.parametrize("gpu", [1, 0, 1])
def test_tensors_on_any_gpu_are_written_there(cuda, gpu):
    import torch

    n = 1000
    x = torch.arange(n, dtype=torch.float32, device=f"cuda:{gpu}")
    out = torch.zeros(n, dtype=torch.float32, device=f"cuda:{gpu}")
    double[(metile.cdiv(n, 256),)](x, out, n, BLOCK=256)
    torch.cuda.synchronize(gpu)
    np.testing.assert_array_equal(out.cpu().numpy(), 2 * np.arange(n, dtype=np.float32))


@needs_two
def test_each_gpu_gets_its_own_compiled_kernel(cuda):
    import torch

    for gpu in (0, 1, 0, 1):
        x = torch.full((300,), float(gpu + 1), device=f"cuda:{gpu}")
        out = torch.empty_like(x)
        double[(2,)](x, out, 300, BLOCK=256)
        assert out.cpu().eq(2 * (gpu + 1)).all()
    assert double.cache_info()["specializations"] >= 2


@needs_two
def test_arguments_on_two_gpus_are_refused(cuda):
    import torch

    x = torch.ones(10, device="cuda:0")
    out = torch.zeros(10, device="cuda:1")
    with pytest.raises(ValueError, match=r"argument 'X' is on cuda:0 and argument 'Out' on cuda:1"):
        double[(1,)](x, out, 10, BLOCK=16)


@needs_two
def test_numpy_and_buffers_follow_the_tensor_gpu(cuda):
    import torch

    n = 777
    x = torch.arange(n, dtype=torch.float32, device="cuda:1")
    out = np.zeros(n, np.float32)
    double[(metile.cdiv(n, 128),)](x, out, n, BLOCK=128)
    np.testing.assert_array_equal(out, 2 * np.arange(n, dtype=np.float32))
    buf = metile.Buffer(data=np.zeros(n, np.float32))
    double[(metile.cdiv(n, 128),)](torch.ones(n, device="cuda:0"), buf, n, BLOCK=128)
    double[(metile.cdiv(n, 128),)](x, buf, n, BLOCK=128)  # the buffer's copy moves to cuda:1
    np.testing.assert_array_equal(buf.numpy(), 2 * np.arange(n, dtype=np.float32))


@needs_two
def test_cupy_arrays_on_the_second_gpu(cuda):
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(1):
        x = cupy.arange(500, dtype=cupy.float32)
        out = cupy.zeros(500, dtype=cupy.float32)
    double[(2,)](x, out, 500, BLOCK=256)
    metile.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(out), 2 * np.arange(500, dtype=np.float32))


@needs_two
def test_set_device_names_a_gpu_for_host_arrays(cuda):
    metile.set_device("cuda:1")
    x = np.arange(100, dtype=np.float32)
    out = np.zeros(100, np.float32)
    rk.add[(1,)](x, x, out, 100, BLOCK=128)
    np.testing.assert_array_equal(out, 2 * x)


@needs_two
def test_one_process_per_gpu_as_a_data_parallel_job_runs_them():
    worker = textwrap.dedent(
        """
        import os, numpy as np, torch, metile
        from test_multi_gpu import double
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        metile.set_device("cuda")
        n = 100000 + rank
        x = torch.arange(n, dtype=torch.float32, device=f"cuda:{rank}")
        out = torch.zeros_like(x)
        for _ in range(50):
            double[(metile.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        torch.cuda.synchronize()
        assert torch.equal(out, 2 * x), rank
        print("rank", rank, "ok")
        """
    )
    here = os.path.dirname(__file__)
    procs = [
        subprocess.Popen([sys.executable, "-c", worker], cwd=here, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={**os.environ, "LOCAL_RANK": str(rank)})
        for rank in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (p, text) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0 and f"rank {rank} ok" in text, text
