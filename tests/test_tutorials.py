"""Triton's tutorials ported line by line, the way their users write them (only
`tl.` becomes `metile.`, and `tl.arange(0, N)` keeps its meaning: start 0, size
N), on every backend at ragged sizes, against numpy. Tutorials whose ops are
covered elsewhere: low-memory dropout and layer-norm backward need atomics and
random numbers (test_atomics.py, test_random.py)."""

import numpy as np
import pytest
from test_pointer_gemm import _tutorial_params

import metile
from metile import _frontend, _metile
from metile.extra import libdevice

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


# ------------------------------------------------------------ 06 fused attention (forward)
# The tutorial's block-pointer kernel. For a ragged N_CTX (the tutorial's is a
# multiple of the blocks) three things are added, each marked "ragged": the
# loads and the store check their bounds, keys past N_CTX are masked out of the
# non-causal stage, and the store of M is masked.


def _attn_fwd_inner(acc, l_i, m_i, q,  #
                    K_block_ptr, V_block_ptr,  #
                    start_m, qk_scale,  #
                    BLOCK_M: metile.constexpr, HEAD_DIM: metile.constexpr, BLOCK_N: metile.constexpr,  #
                    STAGE: metile.constexpr, offs_m: metile.constexpr, offs_n: metile.constexpr,  #
                    N_CTX: metile.constexpr, fp8_v: metile.constexpr):
    # range of values handled by this stage
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = metile.multiple_of(lo, BLOCK_M)
    # causal = False
    else:
        lo, hi = 0, N_CTX
    K_block_ptr = metile.advance(K_block_ptr, (0, lo))
    V_block_ptr = metile.advance(V_block_ptr, (lo, 0))
    # loop over k, v and update accumulator
    for start_n in range(lo, hi, BLOCK_N):
        start_n = metile.multiple_of(start_n, BLOCK_N)
        # -- compute qk ----
        k = metile.load(K_block_ptr, boundary_check=(0, 1))  # ragged
        qk = metile.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + metile.where(mask, 0, -1.0e6)
            m_ij = metile.maximum(m_i, metile.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            qk = qk + metile.where(start_n + offs_n[None, :] < N_CTX, 0, -1.0e6)  # ragged
            m_ij = metile.maximum(m_i, metile.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = metile.math.exp2(qk)
        l_ij = metile.sum(p, 1)
        # -- update m_i and l_i
        alpha = metile.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + l_ij
        # -- update output accumulator --
        acc = acc * alpha[:, None]
        # update acc
        v = metile.load(V_block_ptr, boundary_check=(0, 1))  # ragged
        if fp8_v:
            p = p.to(metile.float8e5)
        else:
            p = p.to(metile.float16)
        acc = metile.dot(p, v, acc)
        # update m_i and l_i
        m_i = m_ij
        V_block_ptr = metile.advance(V_block_ptr, (BLOCK_N, 0))
        K_block_ptr = metile.advance(K_block_ptr, (0, BLOCK_N))
    return acc, l_i, m_i


@metile.kernel
def _attn_fwd(Q, K, V, sm_scale, M, Out,  #
              stride_qz, stride_qh, stride_qm, stride_qk,  #
              stride_kz, stride_kh, stride_kn, stride_kk,  #
              stride_vz, stride_vh, stride_vk, stride_vn,  #
              stride_oz, stride_oh, stride_om, stride_on,  #
              Z, H, N_CTX,  #
              HEAD_DIM: metile.constexpr,  #
              BLOCK_M: metile.constexpr,  #
              BLOCK_N: metile.constexpr,  #
              STAGE: metile.constexpr  #
              ):
    metile.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = metile.program_id(0)
    off_hz = metile.program_id(1)
    off_z = off_hz // H
    off_h = off_hz % H
    qvk_offset = off_z.to(metile.int64) * stride_qz + off_h.to(metile.int64) * stride_qh

    # block pointers
    Q_block_ptr = metile.make_block_ptr(
        base=Q + qvk_offset,
        shape=(N_CTX, HEAD_DIM),
        strides=(stride_qm, stride_qk),
        offsets=(start_m * BLOCK_M, 0),
        block_shape=(BLOCK_M, HEAD_DIM),
        order=(1, 0),
    )
    v_order: metile.constexpr = (0, 1) if V.dtype == metile.pointer_type(metile.float8e5) else (1, 0)
    V_block_ptr = metile.make_block_ptr(
        base=V + qvk_offset,
        shape=(N_CTX, HEAD_DIM),
        strides=(stride_vk, stride_vn),
        offsets=(0, 0),
        block_shape=(BLOCK_N, HEAD_DIM),
        order=v_order,
    )
    K_block_ptr = metile.make_block_ptr(
        base=K + qvk_offset,
        shape=(HEAD_DIM, N_CTX),
        strides=(stride_kk, stride_kn),
        offsets=(0, 0),
        block_shape=(HEAD_DIM, BLOCK_N),
        order=(0, 1),
    )
    O_block_ptr = metile.make_block_ptr(
        base=Out + qvk_offset,
        shape=(N_CTX, HEAD_DIM),
        strides=(stride_om, stride_on),
        offsets=(start_m * BLOCK_M, 0),
        block_shape=(BLOCK_M, HEAD_DIM),
        order=(1, 0),
    )
    # initialize offsets
    offs_m = start_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = metile.arange(0, BLOCK_N)
    # initialize pointer to m and l
    m_i = metile.zeros([BLOCK_M], dtype=metile.float32) - float("inf")
    l_i = metile.zeros([BLOCK_M], dtype=metile.float32) + 1.0
    acc = metile.zeros([BLOCK_M, HEAD_DIM], dtype=metile.float32)
    # load scales
    qk_scale = sm_scale
    qk_scale *= 1.44269504  # 1/log(2)
    # load q: it will stay in SRAM throughout
    q = metile.load(Q_block_ptr, boundary_check=(0, 1))  # ragged
    # stage 1: off-band
    # For causal = True, STAGE = 3 and _attn_fwd_inner gets 1 as its STAGE
    # For causal = False, STAGE = 1, and _attn_fwd_inner gets 3 as its STAGE
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr,  #
                                        start_m, qk_scale,  #
                                        BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                        4 - STAGE, offs_m, offs_n, N_CTX,
                                        V.dtype == metile.pointer_type(metile.float8e5)  #
                                        )
    # stage 2: on-band
    if STAGE & 2:
        # barrier makes it easier for compielr to schedule the
        # two loops independently
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr,  #
                                        start_m, qk_scale,  #
                                        BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                        2, offs_m, offs_n, N_CTX,
                                        V.dtype == metile.pointer_type(metile.float8e5)  #
                                        )
    # epilogue
    m_i += metile.math.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    metile.store(m_ptrs, m_i, mask=offs_m < N_CTX)  # ragged
    metile.store(O_block_ptr, acc.to(metile.float16), boundary_check=(0, 1))  # ragged


def attention(q, k, v, causal, sm_scale, BLOCK_M=32, BLOCK_N=32):
    Z, H, N_CTX, HEAD_DIM = q.shape
    o = np.empty_like(q)
    M = np.empty((Z, H, N_CTX), dtype=np.float32)
    stage = 3 if causal else 1
    grid = (metile.cdiv(N_CTX, BLOCK_M), Z * H, 1)
    _attn_fwd[grid](q, k, v, sm_scale, M, o,  #
                    *(s // q.itemsize for s in q.strides), *(s // k.itemsize for s in k.strides),
                    *(s // v.itemsize for s in v.strides), *(s // o.itemsize for s in o.strides),
                    Z, H, N_CTX, HEAD_DIM=HEAD_DIM, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, STAGE=stage)
    return o, M


@pytest.mark.parametrize("Z, H, N_CTX", [(1, 2, 77), (2, 1, 64), (1, 1, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_06_fused_attention_forward(device, rng, Z, H, N_CTX, causal):
    HEAD_DIM, sm_scale = 64, 0.5
    q, k, v = ((rng.standard_normal((Z, H, N_CTX, HEAD_DIM)) * 0.5).astype(np.float16) for _ in range(3))
    o, M = attention(q, k, v, causal, sm_scale)
    s = np.einsum("zhmd,zhnd->zhmn", q.astype(np.float32), k.astype(np.float32)) * sm_scale
    if causal:
        s = np.where(np.tril(np.ones((N_CTX, N_CTX), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    lse = np.log2(p.sum(-1)) + s.max(-1) / np.log(2)
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float32)
    np.testing.assert_allclose(o.astype(np.float32), ref, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(M, lse, rtol=1e-3, atol=1e-3)


# The current tutorial's spelling: tensor descriptors made in the kernel. Its
# descriptors span all heads (`y_dim = Z * H * N_CTX` rows); for a ragged N_CTX
# they are made per head instead (marked "ragged"), so that the rows past N_CTX
# read zeros and are not written, rather than being the next head's rows.


def _attn_fwd_inner_desc(acc, l_i, m_i, q,  #
                         desc_k, desc_v,  #
                         offset_y, dtype: metile.constexpr, start_m, qk_scale,  #
                         BLOCK_M: metile.constexpr, HEAD_DIM: metile.constexpr, BLOCK_N: metile.constexpr,  #
                         STAGE: metile.constexpr, offs_m: metile.constexpr, offs_n: metile.constexpr,  #
                         N_CTX: metile.constexpr, warp_specialize: metile.constexpr):
    # range of values handled by this stage
    if STAGE == 1:
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = metile.multiple_of(lo, BLOCK_M)
    # causal = False
    else:
        lo, hi = 0, N_CTX
    offsetk_y = offset_y + lo
    offsetv_y = offset_y + lo
    # loop over k, v and update accumulator
    for start_n in metile.range(lo, hi, BLOCK_N, warp_specialize=warp_specialize):
        start_n = metile.multiple_of(start_n, BLOCK_N)
        # -- compute qk ----
        k = desc_k.load([offsetk_y, 0]).T
        qk = metile.dot(q, k)
        if STAGE == 2:
            mask = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + metile.where(mask, 0, -1.0e6)
            m_ij = metile.maximum(m_i, metile.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            qk = qk + metile.where(start_n + offs_n[None, :] < N_CTX, 0, -1.0e6)  # ragged
            m_ij = metile.maximum(m_i, metile.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = metile.math.exp2(qk)
        # -- compute correction factor
        alpha = metile.math.exp2(m_i - m_ij)
        l_ij = metile.sum(p, 1)
        # -- update output accumulator --
        acc = acc * alpha[:, None]
        # prepare p and v for the dot
        v = desc_v.load([offsetv_y, 0])
        p = p.to(dtype)
        acc = metile.dot(p, v, acc)
        # update m_i and l_i
        l_i = l_i * alpha + l_ij
        m_i = m_ij
        offsetk_y += BLOCK_N
        offsetv_y += BLOCK_N
    return acc, l_i, m_i


@metile.kernel
def _attn_fwd_desc(sm_scale, M,  #
                   Z, H, desc_q, desc_k, desc_v, desc_o, N_CTX,  #
                   HEAD_DIM: metile.constexpr,  #
                   BLOCK_M: metile.constexpr,  #
                   BLOCK_N: metile.constexpr,  #
                   FP8_OUTPUT: metile.constexpr,  #
                   STAGE: metile.constexpr,  #
                   warp_specialize: metile.constexpr,  #
                   ):
    dtype = metile.float8e5 if FP8_OUTPUT else metile.float16
    metile.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = metile.program_id(0)
    off_hz = metile.program_id(1)
    head = off_hz.to(metile.int64) * N_CTX * HEAD_DIM  # ragged
    y_dim = N_CTX  # ragged
    desc_q = metile.make_tensor_descriptor(desc_q + head, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
    desc_v = metile.make_tensor_descriptor(desc_v + head, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
    desc_k = metile.make_tensor_descriptor(desc_k + head, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = metile.make_tensor_descriptor(desc_o + head, shape=[y_dim, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])

    offset_y = 0  # ragged
    qo_offset_y = offset_y + start_m * BLOCK_M
    # initialize offsets
    offs_m = start_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = metile.arange(0, BLOCK_N)
    # initialize pointer to m and l
    m_i = metile.zeros([BLOCK_M], dtype=metile.float32) - float("inf")
    l_i = metile.zeros([BLOCK_M], dtype=metile.float32) + 1.0
    acc = metile.zeros([BLOCK_M, HEAD_DIM], dtype=metile.float32)
    # load scales
    qk_scale = sm_scale
    qk_scale *= 1.44269504  # 1/log(2)
    # load q: it will stay in SRAM throughout
    q = desc_q.load([qo_offset_y, 0])
    # stage 1: off-band
    # For causal = True, STAGE = 3 and _attn_fwd_inner gets 1 as its STAGE
    # For causal = False, STAGE = 1, and _attn_fwd_inner gets 3 as its STAGE
    if STAGE & 1:
        acc, l_i, m_i = _attn_fwd_inner_desc(acc, l_i, m_i, q,  #
                                             desc_k, desc_v,  #
                                             offset_y, dtype, start_m, qk_scale,  #
                                             BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                             4 - STAGE, offs_m, offs_n, N_CTX,  #
                                             warp_specialize)
    # stage 2: on-band
    if STAGE & 2:
        acc, l_i, m_i = _attn_fwd_inner_desc(acc, l_i, m_i, q,  #
                                             desc_k, desc_v,  #
                                             offset_y, dtype, start_m, qk_scale,  #
                                             BLOCK_M, HEAD_DIM, BLOCK_N,  #
                                             2, offs_m, offs_n, N_CTX,  #
                                             warp_specialize)
    # epilogue
    m_i += metile.math.log2(l_i)
    acc = acc / l_i[:, None]
    m_ptrs = M + off_hz * N_CTX + offs_m
    metile.store(m_ptrs, m_i, mask=offs_m < N_CTX)  # ragged
    desc_o.store([qo_offset_y, 0], acc.to(dtype))


@pytest.mark.parametrize("Z, H, N_CTX", [(1, 2, 77), (1, 1, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_06_fused_attention_forward_with_descriptors(device, rng, Z, H, N_CTX, causal):
    HEAD_DIM, sm_scale, BLOCK = 64, 0.5, 32
    q, k, v = ((rng.standard_normal((Z, H, N_CTX, HEAD_DIM)) * 0.5).astype(np.float16) for _ in range(3))
    o = np.zeros_like(q)
    M = np.zeros((Z, H, N_CTX), dtype=np.float32)
    grid = (metile.cdiv(N_CTX, BLOCK), Z * H, 1)
    _attn_fwd_desc[grid](sm_scale, M, Z, H, q, k, v, o, N_CTX, HEAD_DIM=HEAD_DIM, BLOCK_M=BLOCK, BLOCK_N=BLOCK,
                         FP8_OUTPUT=False, STAGE=3 if causal else 1, warp_specialize=False)
    reference, _ = attention(q, k, v, causal, sm_scale)  # the block-pointer port, itself checked against numpy
    s = np.einsum("zhmd,zhnd->zhmn", q.astype(np.float32), k.astype(np.float32)) * sm_scale
    if causal:
        s = np.where(np.tril(np.ones((N_CTX, N_CTX), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float32)
    np.testing.assert_allclose(o.astype(np.float32), ref, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(o.astype(np.float32), reference.astype(np.float32), rtol=1e-2, atol=1e-2)


# ------------------------------------------------------------ 07 libdevice (asin)


@metile.kernel
def asin_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: metile.constexpr):
    pid = metile.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + metile.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = metile.load(x_ptr + offsets, mask=mask)
    x = libdevice.asin(x)
    metile.store(y_ptr + offsets, x, mask=mask)


@pytest.mark.parametrize("size", [98432, 1000, 3])
def test_07_libdevice_asin(device, rng, size):
    x = rng.uniform(-1, 1, size).astype(np.float32)
    output = np.zeros_like(x)
    grid = lambda meta: (metile.cdiv(size, meta["BLOCK_SIZE"]),)  # noqa: E731
    asin_kernel[grid](x, output, size, BLOCK_SIZE=1024)
    np.testing.assert_allclose(output, np.arcsin(x), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ 09 persistent matmul
# The tutorial's persistent kernels, with pointers and with device-side tensor
# descriptors (the contiguity hint of the first is left out, see below;
# `flatten=` and `warp_specialize=` are accepted and have no effect).


def _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS):
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (tile_id % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@metile.kernel
def matmul_kernel_persistent(a_ptr, b_ptr, c_ptr,  #
                             M, N, K,  #
                             stride_am, stride_ak,  #
                             stride_bk, stride_bn,  #
                             stride_cm, stride_cn,  #
                             BLOCK_SIZE_M: metile.constexpr,  #
                             BLOCK_SIZE_N: metile.constexpr,  #
                             BLOCK_SIZE_K: metile.constexpr,  #
                             GROUP_SIZE_M: metile.constexpr,  #
                             NUM_SMS: metile.constexpr,  #
                             ):
    start_pid = metile.program_id(axis=0)
    num_pid_m = metile.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    k_tiles = metile.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n

    tile_id_c = start_pid - NUM_SMS

    offs_k_for_mask = metile.arange(0, BLOCK_SIZE_K)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n

    for tile_id in metile.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        start_m = pid_m * BLOCK_SIZE_M
        start_n = pid_n * BLOCK_SIZE_N
        offs_am = start_m + metile.arange(0, BLOCK_SIZE_M)
        offs_bn = start_n + metile.arange(0, BLOCK_SIZE_N)
        offs_am = metile.where(offs_am < M, offs_am, 0)
        offs_bn = metile.where(offs_bn < N, offs_bn, 0)
        # The tutorial hints here that offs_am and offs_bn are runs of BLOCK_SIZE
        # contiguous values; in the last tile of a ragged M or N the clamp above
        # breaks the run, and meTile checks its hints (the cpu backend refuses the
        # false promise), so the port leaves the hint out.

        accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K + metile.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
            b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

            a = metile.load(a_ptrs, mask=offs_k_for_mask[None, :] < K - ki * BLOCK_SIZE_K, other=0.0)
            b = metile.load(b_ptrs, mask=offs_k_for_mask[:, None] < K - ki * BLOCK_SIZE_K, other=0.0)
            accumulator = metile.dot(a, b, accumulator)

        tile_id_c += NUM_SMS
        pid_m, pid_n = _compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_cm = pid_m * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        c = accumulator.to(metile.float16)
        metile.store(c_ptrs, c, mask=c_mask)


@metile.kernel
def matmul_kernel_descriptor_persistent(a_ptr, b_ptr, c_ptr,  #
                                        M, N, K,  #
                                        BLOCK_SIZE_M: metile.constexpr,  #
                                        BLOCK_SIZE_N: metile.constexpr,  #
                                        BLOCK_SIZE_K: metile.constexpr,  #
                                        GROUP_SIZE_M: metile.constexpr,  #
                                        EPILOGUE_SUBTILE: metile.constexpr,  #
                                        NUM_SMS: metile.constexpr,  #
                                        WARP_SPECIALIZE: metile.constexpr,  #
                                        ):
    # Matmul using TMA and device-side descriptor creation
    dtype = metile.float16
    start_pid = metile.program_id(axis=0)
    num_pid_m = metile.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = metile.cdiv(N, BLOCK_SIZE_N)
    k_tiles = metile.cdiv(K, BLOCK_SIZE_K)
    num_tiles = num_pid_m * num_pid_n

    a_desc = metile.make_tensor_descriptor(
        a_ptr,
        shape=[M, K],
        strides=[K, 1],
        block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_K],
    )
    b_desc = metile.make_tensor_descriptor(
        b_ptr,
        shape=[N, K],
        strides=[K, 1],
        block_shape=[BLOCK_SIZE_N, BLOCK_SIZE_K],
    )
    c_desc = metile.make_tensor_descriptor(
        c_ptr,
        shape=[M, N],
        strides=[N, 1],
        block_shape=[BLOCK_SIZE_M, BLOCK_SIZE_N if not EPILOGUE_SUBTILE else BLOCK_SIZE_N // 2],
    )

    # tile_id_c is used in the epilogue to break the dependency between
    # the prologue and the epilogue
    tile_id_c = start_pid - NUM_SMS
    num_pid_in_group = GROUP_SIZE_M * num_pid_n

    for tile_id in metile.range(start_pid, num_tiles, NUM_SMS, flatten=True, warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _compute_pid(tile_id, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_am = pid_m * BLOCK_SIZE_M
        offs_bn = pid_n * BLOCK_SIZE_N

        accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_SIZE_K
            a = a_desc.load([offs_am, offs_k])
            b = b_desc.load([offs_bn, offs_k])
            accumulator = metile.dot(a, b.T, accumulator)

        tile_id_c += NUM_SMS
        pid_m, pid_n = _compute_pid(tile_id_c, num_pid_in_group, num_pid_m, GROUP_SIZE_M, NUM_SMS)
        offs_cm = pid_m * BLOCK_SIZE_M
        offs_cn = pid_n * BLOCK_SIZE_N

        if EPILOGUE_SUBTILE:
            acc = metile.reshape(accumulator, (BLOCK_SIZE_M, 2, BLOCK_SIZE_N // 2))
            acc = metile.permute(acc, (0, 2, 1))
            acc0, acc1 = metile.split(acc)
            c0 = acc0.to(dtype)
            c_desc.store([offs_cm, offs_cn], c0)
            c1 = acc1.to(dtype)
            c_desc.store([offs_cm, offs_cn + BLOCK_SIZE_N // 2], c1)
        else:
            c = accumulator.to(dtype)
            c_desc.store([offs_cm, offs_cn], c)


NUM_SMS = 3  # a persistent grid smaller than the number of tiles: each program loops


# N = 80 and 48: the last column tile is clamped by `where` while the others take the
# copies that assume no clamp.
@pytest.mark.parametrize("M, N, K", [(100, 70, 45), (32, 32, 32), (17, 129, 80), (96, 80, 64), (40, 48, 70)])
def test_09_persistent_matmul(device, rng, M, N, K):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = np.zeros((M, N), np.float16)
    grid = lambda META: (min(NUM_SMS, metile.cdiv(M, META["BLOCK_SIZE_M"]) * metile.cdiv(N, META["BLOCK_SIZE_N"])), )  # noqa: E731
    matmul_kernel_persistent[grid](a, b, c, M, N, K, K, 1, N, 1, N, 1,
                                   BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GROUP_SIZE_M=4, NUM_SMS=NUM_SMS)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_09_persistent_matmul_copies_clamped_columns_behind_a_bounds_test(arch):
    # `where(offs_bn < N, offs_bn, 0)` keeps no runs; every column tile but the last
    # has no clamped lane, so B's runs are copied asynchronously once a uniform
    # bounds test finds that, as A's are.
    constexprs = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8, "NUM_SMS": 132}
    traced = _frontend.specialize(matmul_kernel_persistent.fn, _tutorial_params("f16"), constexprs,
                                  {"threads_per_group": 128})
    src = _metile.compile_cuda(traced, num_sgs=4, arch=arch)["cuda"]
    copies = {x: sum(f'"l"({x}_ptr' in line for line in src.splitlines() if "cp.async.cg.shared.global" in line)
              for x in "ab"}
    assert copies["a"] > 0 and copies["b"] > 0


@pytest.mark.parametrize("M, N, K", [(100, 70, 45), (17, 129, 80)])
@pytest.mark.parametrize("subtile", [False, True])
def test_09_descriptor_persistent_matmul(device, rng, M, N, K, subtile):
    a = rng.standard_normal((M, K)).astype(np.float16)
    b_t = np.ascontiguousarray(rng.standard_normal((K, N)).astype(np.float16).T)  # b is transposed
    c = np.zeros((M, N), np.float16)
    grid = lambda META: (min(NUM_SMS, metile.cdiv(M, META["BLOCK_SIZE_M"]) * metile.cdiv(N, META["BLOCK_SIZE_N"])), )  # noqa: E731
    matmul_kernel_descriptor_persistent[grid](a, b_t, c, M, N, K, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32,
                                              GROUP_SIZE_M=4, EPILOGUE_SUBTILE=subtile, NUM_SMS=NUM_SMS,
                                              WARP_SPECIALIZE=False)
    ref = a.astype(np.float32) @ b_t.T.astype(np.float32)
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2e-2, atol=2e-2)


# ------------------------------------------------------------ 08 grouped GEMM
# The tutorial's kernel reads each problem's matrix addresses from int64 arrays
# and casts them to pointers. Two additions, marked: the masks of a ragged
# problem (the tutorial "assumes full tiles for now"), and three parameters
# naming the buffers the addresses point into. On cpu and msl-emu a pointer read
# from memory must point into a buffer argument of the launch (that is how
# every access through it is still checked), so the matrices live in three
# arenas passed to the kernel; the tutorial's kernel never names them.


@metile.kernel
def grouped_matmul_kernel(
    # device tensor of matrices pointers
    group_a_ptrs,
    group_b_ptrs,
    group_c_ptrs,
    # device tensor of gemm sizes. its shape is [group_size, 3]
    # dim 0 is group_size, dim 1 is the values of <M, N, K> of each gemm
    group_gemm_sizes,
    # device tensor of leading dimension sizes. its shape is [group_size, 3]
    # dim 0 is group_size, dim 1 is the values of <lda, ldb, ldc> of each gemm
    g_lds,
    # number of gemms
    group_size,
    # the buffers the addresses point into (added)
    a_arena, b_arena, c_arena,
    # number of virtual SM
    NUM_SM: metile.constexpr,
    # tile sizes
    BLOCK_SIZE_M: metile.constexpr,
    BLOCK_SIZE_N: metile.constexpr,
    BLOCK_SIZE_K: metile.constexpr,
):
    tile_idx = metile.program_id(0)
    last_problem_end = 0
    for g in range(group_size):
        # get the gemm size of the current problem
        gm = metile.load(group_gemm_sizes + g * 3)
        gn = metile.load(group_gemm_sizes + g * 3 + 1)
        gk = metile.load(group_gemm_sizes + g * 3 + 2)
        num_m_tiles = metile.cdiv(gm, BLOCK_SIZE_M)
        num_n_tiles = metile.cdiv(gn, BLOCK_SIZE_N)
        num_tiles = num_m_tiles * num_n_tiles
        # iterate through the tiles in the current gemm problem
        while (tile_idx >= last_problem_end and tile_idx < last_problem_end + num_tiles):
            # pick up a tile from the current gemm problem
            k = gk
            lda = metile.load(g_lds + g * 3)
            ldb = metile.load(g_lds + g * 3 + 1)
            ldc = metile.load(g_lds + g * 3 + 2)
            a_ptr = metile.load(group_a_ptrs + g).to(metile.pointer_type(metile.float16))
            b_ptr = metile.load(group_b_ptrs + g).to(metile.pointer_type(metile.float16))
            c_ptr = metile.load(group_c_ptrs + g).to(metile.pointer_type(metile.float16))
            # figure out tile coordinates
            tile_idx_in_gemm = tile_idx - last_problem_end
            tile_m_idx = tile_idx_in_gemm // num_n_tiles
            tile_n_idx = tile_idx_in_gemm % num_n_tiles

            # do regular gemm here
            offs_am = tile_m_idx * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
            offs_bn = tile_n_idx * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
            offs_k = metile.arange(0, BLOCK_SIZE_K)
            a_ptrs = a_ptr + offs_am[:, None] * lda + offs_k[None, :]
            b_ptrs = b_ptr + offs_k[:, None] * ldb + offs_bn[None, :]
            accumulator = metile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=metile.float32)
            for kk in range(0, metile.cdiv(k, BLOCK_SIZE_K)):
                k_left = k - kk * BLOCK_SIZE_K  # ragged
                a = metile.load(a_ptrs, mask=(offs_am[:, None] < gm) & (offs_k[None, :] < k_left), other=0.0)
                b = metile.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_bn[None, :] < gn), other=0.0)
                accumulator += metile.dot(a, b)
                a_ptrs += BLOCK_SIZE_K
                b_ptrs += BLOCK_SIZE_K * ldb
            c = accumulator.to(metile.float16)

            offs_cm = tile_m_idx * BLOCK_SIZE_M + metile.arange(0, BLOCK_SIZE_M)
            offs_cn = tile_n_idx * BLOCK_SIZE_N + metile.arange(0, BLOCK_SIZE_N)
            c_ptrs = c_ptr + ldc * offs_cm[:, None] + offs_cn[None, :]

            metile.store(c_ptrs, c, mask=(offs_cm[:, None] < gm) & (offs_cn[None, :] < gn))  # ragged

            # go to the next tile by advancing NUM_SM
            tile_idx += NUM_SM

        # get ready to go to the next gemm problem
        last_problem_end = last_problem_end + num_tiles


def _arena(sizes, torch_device):
    """One buffer holding matrices of the given element counts, and each one's element offset."""
    starts = np.cumsum([0, *(-(-s // 8) * 8 for s in sizes)])  # 16-byte aligned starts
    if torch_device:
        import torch
        return torch.zeros(int(starts[-1]), dtype=torch.float16, device="cuda"), starts[:-1]
    return np.zeros(int(starts[-1]), np.float16), starts[:-1]


def _like(values, arena):
    """`values` (numpy) as the arena's kind of array."""
    if isinstance(arena, np.ndarray):
        return values
    import torch
    return torch.from_numpy(values).to(arena.device)


def _address(buffer):
    return buffer.data_ptr() if hasattr(buffer, "data_ptr") else buffer.ctypes.data


def group_gemm_fn(group_A, group_B, device):
    on_cuda = device == "cuda"  # addresses must be the GPU's: torch tensors there
    shapes = [(a.shape[0], b.shape[1], a.shape[1]) for a, b in zip(group_A, group_B, strict=True)]
    a_arena, a_at = _arena([m * k for m, n, k in shapes], on_cuda)
    b_arena, b_at = _arena([k * n for m, n, k in shapes], on_cuda)
    c_arena, c_at = _arena([m * n for m, n, k in shapes], on_cuda)
    for (m, n, k), a, b, ai, bi in zip(shapes, group_A, group_B, a_at, b_at, strict=True):
        a_arena[ai:ai + m * k] = _like(a.ravel(), a_arena)
        b_arena[bi:bi + k * n] = _like(b.ravel(), b_arena)
    arenas = ((a_arena, a_at), (b_arena, b_at), (c_arena, c_at))
    addresses = [[_address(arena) + 2 * int(i) for i in at] for arena, at in arenas]
    g_sizes = np.array([s for m, n, k in shapes for s in (m, n, k)], np.int32)
    g_lds = np.array([s for m, n, k in shapes for s in (k, n, n)], np.int32)
    ptr_arrays = [np.array(a, np.int64) for a in addresses]
    if on_cuda:
        import torch
        ptr_arrays = [torch.from_numpy(p).cuda() for p in ptr_arrays]
        g_sizes, g_lds = torch.from_numpy(g_sizes).cuda(), torch.from_numpy(g_lds).cuda()
    grid = lambda META: (META["NUM_SM"],)  # noqa: E731
    grouped_matmul_kernel[grid](*ptr_arrays, g_sizes, g_lds, len(shapes), a_arena, b_arena, c_arena,
                                NUM_SM=5, BLOCK_SIZE_M=32, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32)
    c_host = c_arena.cpu().numpy() if on_cuda else c_arena
    return [c_host[ci:ci + m * n].reshape(m, n) for (m, n, k), ci in zip(shapes, c_at, strict=True)]


def test_08_grouped_gemm(device, rng):
    if device == "cuda":
        pytest.importorskip("torch")
    dims = [(70, 45, 33), (32, 32, 32), (5, 100, 64), (64, 7, 9)]
    group_A = [rng.standard_normal((m, k)).astype(np.float16) for m, n, k in dims]
    group_B = [rng.standard_normal((k, n)).astype(np.float16) for m, n, k in dims]
    for a, b, c in zip(group_A, group_B, group_gemm_fn(group_A, group_B, device), strict=True):
        ref = a.astype(np.float32) @ b.astype(np.float32)
        np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2e-2, atol=2e-2)
