"""Launches with torch (or CuPy) CUDA tensors go on the framework's current stream:
ordered after the work queued there before them and before the work queued after,
with no synchronisation; staging copies, split-K workspaces and timing follow.

Each test delays a side stream with `torch.cuda._sleep` (a GPU busy-wait) before
the work that produces a kernel's input: a kernel that ran on any other stream
would read the input before it is written and the test would fail. cuda only."""

import time
import warnings

import numpy as np
import pytest

import metile
from metile.testing import do_bench

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(
    not (metile.device_available("cuda") and torch.cuda.is_available()), reason="needs CUDA and torch with CUDA"
)

# About 30 ms of busy-waiting on an H100: far longer than the launches it must delay.
SLEEP_CYCLES = 50_000_000


@pytest.fixture(autouse=True)
def cuda():
    previous = metile.get_device()
    metile.set_device("cuda")
    yield
    torch.cuda.synchronize()
    metile.set_device(previous)


@metile.kernel
def scale(X, Out, N, factor, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) * factor, mask=mask)


def _scale(x, out, n, factor=2.0):
    scale[(metile.cdiv(n, 256),)](x, out, n, factor, BLOCK=256)


def _late_input(n, value, stream):
    """A tensor that `stream` fills with `value` only after a long wait."""
    x = torch.zeros(n, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)
        x.fill_(value)
    return x


@pytest.mark.parametrize("n", [1000, 1 << 20])
def test_a_kernel_on_a_side_stream_runs_after_the_work_queued_there(n):
    side = torch.cuda.Stream()
    x = _late_input(n, 3.0, side)
    out = torch.zeros(n, device="cuda")
    with torch.cuda.stream(side):
        _scale(x, out, n)
        # Read on the same stream: no synchronisation anywhere.
        got = out.to("cpu", non_blocking=False)
    assert torch.all(got == 6.0), got[:8]


def test_torch_work_queued_after_the_kernel_sees_its_result():
    n = 1 << 22
    side = torch.cuda.Stream()
    x = _late_input(n, 1.5, side)
    out = torch.zeros(n, device="cuda")
    with torch.cuda.stream(side):
        _scale(x, out, n, 4.0)
        total = (out * 2).sum()
    side.synchronize()
    assert total.item() == pytest.approx(12.0 * n)


def test_the_default_stream_is_kept_when_it_is_current():
    n = 5000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    _scale(x, out, n)
    torch.testing.assert_close(out, 2 * x)


def test_staged_numpy_outputs_wait_for_the_stream():
    n = 4096
    side = torch.cuda.Stream()
    x = _late_input(n, 2.0, side)
    out = np.zeros(n, np.float32)
    with torch.cuda.stream(side), warnings.catch_warnings():
        # The one-time notice that numpy arrays are copied: not what this tests.
        warnings.simplefilter("ignore", metile.MetileWarning)
        _scale(x, out, n, 5.0)
    np.testing.assert_array_equal(out, 10.0)


def test_a_buffer_read_back_waits_for_the_kernel_on_the_side_stream():
    n = 3000
    side = torch.cuda.Stream()
    x = _late_input(n, 7.0, side)
    out = metile.Buffer(np.zeros(n, np.float32))
    with torch.cuda.stream(side):
        _scale(x, out, n, 1.0)
    np.testing.assert_array_equal(out.numpy(), 7.0)


class _DlpackOnly:
    """A CUDA array known only through DLPack: the launch stays on the legacy
    default stream, and torch orders its pending work before it through the
    stream argument of `__dlpack__`."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, stream=None):
        return self.tensor.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


def test_a_dlpack_producer_orders_its_work_before_the_launch():
    n = 2048
    side = torch.cuda.Stream()
    x = _late_input(n, 5.0, side)
    out = torch.zeros(n, device="cuda")
    with torch.cuda.stream(side):
        scale[(metile.cdiv(n, 256),)](_DlpackOnly(x), _DlpackOnly(out), n, 3.0, BLOCK=256)
    torch.cuda.synchronize()
    assert torch.all(out == 15.0)


@metile.kernel
def gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


def test_a_split_k_workspace_in_use_on_one_stream_makes_the_next_stream_wait():
    m, n, k = 96, 80, 512
    first, second = torch.cuda.Stream(), torch.cuda.Stream()
    a1, b1 = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    a2, b2 = torch.randn(m, k, device="cuda"), torch.randn(k, n, device="cuda")
    c1, c2 = torch.empty(m, n, device="cuda"), torch.empty(m, n, device="cuda")
    grid = (metile.cdiv(m, 32), metile.cdiv(n, 32))
    launch = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, split_k=4)
    gemm[grid](a1, b1, c1, m, n, k, **launch)  # compiled, and the pooled workspace made
    torch.cuda.synchronize()
    with torch.cuda.stream(first):
        torch.cuda._sleep(SLEEP_CYCLES)
        gemm[grid](a1, b1, c1, m, n, k, **launch)
    with torch.cuda.stream(second):
        gemm[grid](a2, b2, c2, m, n, k, **launch)
    # The second launch reuses the workspace the first one's kernels (still behind the
    # sleep) will write: its stream waits for them instead of overwriting their partial sums.
    time.sleep(0.005)
    assert not second.query(), "the second stream ran while the first still owed its workspace"
    torch.cuda.synchronize()
    torch.testing.assert_close(c1, a1 @ b1, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(c2, a2 @ b2, rtol=1e-3, atol=1e-3)


def test_do_bench_times_on_the_current_stream():
    n = 1 << 16
    side = torch.cuda.Stream()
    x = torch.ones(n, device="cuda")
    out = torch.empty_like(x)

    def slow_then_kernel():
        torch.cuda._sleep(SLEEP_CYCLES // 10)
        _scale(x, out, n)

    with torch.cuda.stream(side):
        ms = do_bench(slow_then_kernel, warmup=1, rep=3)
    # Events on another stream would close before the sleep (about 3 ms) ends.
    assert ms > 1.0, ms


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_a_launch_on_the_second_gpu_follows_that_gpu_s_current_stream():
    n = 4096
    with torch.cuda.device(1):
        side = torch.cuda.Stream()
        x = torch.zeros(n, device="cuda:1")
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(SLEEP_CYCLES)
            x.fill_(4.0)
            out = torch.zeros(n, device="cuda:1")
            _scale(x, out, n)
            got = out.cpu()
    assert torch.all(got == 8.0)


def test_cupy_arrays_follow_cupy_s_current_stream():
    cupy = pytest.importorskip("cupy")
    n = 4096
    x = cupy.zeros(n, dtype=cupy.float32)
    out = cupy.zeros(n, dtype=cupy.float32)
    side = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.Device().synchronize()
    with side:
        # A long reduction on the stream, then the fill the kernel must wait for.
        big = cupy.ones(1 << 26, dtype=cupy.float32)
        for _ in range(20):
            big = big * 1.0000001
        x.fill(6.0)
        _scale(x, out, n, 0.5)
        got = cupy.asnumpy(out, stream=side)
        side.synchronize()
    np.testing.assert_array_equal(got, 3.0)
