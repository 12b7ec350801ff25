"""Triton's tutorials ported line by line, the way their users write them (only
`tl.` becomes `metile.`, and `tl.arange(0, N)` keeps its meaning: start 0, size
N), on every backend at ragged sizes, against numpy. Tutorials whose ops are
covered elsewhere: low-memory dropout and layer-norm backward need atomics and
random numbers (test_atomics.py, test_random.py)."""

import numpy as np
import pytest

import metile

# ------------------------------------------------------------ 01 vector add


@metile.kernel
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + metile.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = metile.load(x_ptr + offsets, mask=mask)
    y = metile.load(y_ptr + offsets, mask=mask)
    output = x + y
    metile.store(output_ptr + offsets, output, mask=mask)


def add(x, y):
    output = np.empty_like(x)
    n_elements = output.size
    grid = lambda meta: (metile.cdiv(n_elements, meta["BLOCK_SIZE"]),)  # noqa: E731
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=1024)
    return output


@pytest.mark.parametrize("size", [1, 98432, 1023])
def test_01_vector_add(device, rng, size):
    x = rng.random(size, dtype=np.float32)
    y = rng.random(size, dtype=np.float32)
    np.testing.assert_array_equal(add(x, y), x + y)


# ------------------------------------------------------------ 02 fused softmax


@metile.kernel
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: metile.constexpr, num_stages: metile.constexpr):
    # starting row of the program
    row_start = metile.program_id(0)
    row_step = metile.num_programs(0)
    for row_idx in metile.range(row_start, n_rows, row_step, num_stages=num_stages):
        # The stride represents how much we need to increase the pointer to advance 1 row
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = metile.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = metile.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - metile.max(row, axis=0)
        numerator = metile.exp(row_minus_max)
        denominator = metile.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        metile.store(output_ptrs, softmax_output, mask=mask)


def softmax(x, num_programs):
    n_rows, n_cols = x.shape
    BLOCK_SIZE = metile.next_power_of_2(n_cols)
    y = np.empty_like(x)
    softmax_kernel[(num_programs, 1, 1)](y, x, x.shape[1], y.shape[1], n_rows, n_cols,
                                         BLOCK_SIZE=BLOCK_SIZE, num_stages=2)
    return y


@pytest.mark.parametrize("shape, programs", [((37, 781), 8), ((5, 1), 7), ((64, 128), 64)])
def test_02_fused_softmax(device, rng, shape, programs):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(softmax(x, programs), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------ 03 matrix multiplication


@metile.kernel
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: metile.constexpr, BLOCK_SIZE_N: metile.constexpr, BLOCK_SIZE_K: metile.constexpr,
                  GROUP_SIZE_M: metile.constexpr, ACTIVATION: metile.constexpr):
    pid = metile.program_id(axis=0)
    num_pid_m = metile.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)) % N
    offs_k = metile.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
    for k in range(0, metile.cdiv(K, BLOCK_SIZE_K)):
        a = metile.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = metile.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = metile.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(metile.float16)

    offs_cm = pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    metile.store(c_ptrs, c, mask=c_mask)


def leaky_relu(x):
    return metile.where(x >= 0, x, 0.01 * x)


def matmul(a, b, activation=""):
    M, K = a.shape
    K, N = b.shape
    c = np.empty((M, N), dtype=np.float16)
    grid = lambda META: (metile.cdiv(M, META["BLOCK_SIZE_M"]) * metile.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    matmul_kernel[grid](a, b, c, M, N, K, a.shape[1], 1, b.shape[1], 1, c.shape[1], 1,
                        BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=4, ACTIVATION=activation)
    return c


@pytest.mark.parametrize("M, N, K", [(64, 64, 64), (100, 70, 45), (33, 129, 17)])
@pytest.mark.parametrize("activation", ["", "leaky_relu"])
def test_03_matmul(device, rng, M, N, K, activation):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    if activation:
        ref = np.where(ref >= 0, ref, 0.01 * ref)
    np.testing.assert_allclose(matmul(a, b, activation).astype(np.float32), ref, rtol=2e-2, atol=2e-2)


# ------------------------------------------------------------ 05 layer norm (forward)


@metile.kernel
def _layer_norm_fwd_fused(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: metile.constexpr):
    # Map the program id to the row of X and Y it should compute.
    row = metile.program_id(0)
    Y += row * stride
    X += row * stride
    # Compute mean
    mean = 0
    _mean = metile.zeros([BLOCK_SIZE], dtype=metile.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        a = metile.load(X + cols, mask=cols < N, other=0.).to(metile.float32)
        _mean += a
    mean = metile.sum(_mean, axis=0) / N
    # Compute variance
    _var = metile.zeros([BLOCK_SIZE], dtype=metile.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        x = metile.load(X + cols, mask=cols < N, other=0.).to(metile.float32)
        x = metile.where(cols < N, x - mean, 0.)
        _var += x * x
    var = metile.sum(_var, axis=0) / N
    rstd = 1 / metile.sqrt(var + eps)
    # Write mean / rstd
    metile.store(Mean + row, mean)
    metile.store(Rstd + row, rstd)
    # Normalize and apply linear transformation
    for off in range(0, N, BLOCK_SIZE):
        cols = off + metile.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = metile.load(W + cols, mask=mask)
        b = metile.load(B + cols, mask=mask)
        x = metile.load(X + cols, mask=mask, other=0.).to(metile.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        # Write output
        metile.store(Y + cols, y, mask=mask)


@pytest.mark.parametrize("M, N", [(7, 1000), (3, 129), (2, 5)])
def test_05_layer_norm_forward(device, rng, M, N):
    x = (rng.standard_normal((M, N)) * 2 + 1).astype(np.float32)
    w = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    y = np.empty_like(x)
    mean = np.empty(M, np.float32)
    rstd = np.empty(M, np.float32)
    block = min(1024, metile.next_power_of_2(N))
    _layer_norm_fwd_fused[(M,)](x, y, w, b, mean, rstd, x.shape[1], N, 1e-5, BLOCK_SIZE=block)
    ref_mean = x.mean(1)
    ref_rstd = 1 / np.sqrt(x.var(1) + 1e-5)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd, ref_rstd, rtol=1e-4)
    np.testing.assert_allclose(y, (x - ref_mean[:, None]) * ref_rstd[:, None] * w + b, rtol=1e-4, atol=1e-4)
