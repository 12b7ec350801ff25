"""Fused attention, forward and backward, written in the meTile language.

The forward is FlashAttention's: each program owns BLOCK_M queries of one head
and streams the keys and values past them in blocks of BLOCK_N, keeping the
softmax online (a running maximum `m_i` and denominator `l_i`, the output
accumulator rescaled by `exp2(m_old - m_new)`), with the scale folded into the
exponent (`exp2(qk * sm_scale * log2(e) - m)`). Q/K/V are f16, bf16 or fp8 e4m3
(`float8e4nv`); products accumulate in f32 and the softmax is computed in f32.

The backward is the structure of Triton's fused-attention tutorial (06): a
preprocessing kernel computes `Delta = rowsum(dO * O)`, then one kernel whose
programs each compute dK and dV of one block of keys (looping over queries) and
dQ of one block of queries (looping over keys), recomputing P from Q, K and the
forward's log-sum-exp `M`. The diagonal blocks of a causal attention are done in
narrower steps (`BLK_SLICE_FACTOR`) with the mask, the others without it.

Every sequence length works: loads past `N_CTX` read zeros, keys past it are
masked out of the softmax, and stores past it are dropped.

Launchers: `attention(q, k, v, causal, sm_scale)` returns `(o, M)`;
`attention_backward(q, k, v, o, M, do, causal, sm_scale)` returns
`(dq, dk, dv)`. Arrays are (Z, H, N_CTX, HEAD_DIM), numpy (with `ml_dtypes`
for bf16/fp8) or any framework's tensors the kernels take (torch on cuda).
"""

import re

import metile
from metile import _metile

LOG2E = 1.44269504  # 1 / ln(2): exp(x) = exp2(x * LOG2E)
LN2 = 0.6931471824645996  # ln(2)

# The tiles each head dim is run with, (BLOCK_M, BLOCK_N), per kind of target. Q's block
# stays on chip for the whole program and K's and V's blocks are staged per step, so wide
# heads take narrower blocks: on NVIDIA GPUs to stay within the shared memory of sm_80 and
# sm_90 (hd256 64x64 bf16: 97 KiB; hd128 takes 128x128, 1.3x the speed of 128x64 on an H100),
# on Apple GPUs within the 32 KiB of threadgroup memory
# (what every kernel compiled for `apple`, as msl-emu does, must fit; the cpu takes these too),
# with both products on simdgroup_matrix (`apple`) and matmul2d (`apple10`): the first product's
# staging takes the threadgroup memory it can, and where too little is left for one step of the
# second (hd128 at (64, 32) on apple10, hd256 at (32, 16)), that one runs on the generic path.
FORWARD_BLOCKS = {
    "cuda": {16: (128, 64), 32: (128, 64), 64: (128, 64), 128: (128, 128), 256: (64, 64)},
    "apple": {16: (64, 32), 32: (64, 32), 64: (64, 64), 128: (32, 32), 256: (32, 32)},
}
# Simdgroups per program where the compiler's choice is not the fastest: hd256's 64x64 blocks
# on 8 warps ran at 1.3x their speed on 4 on an H100.
FORWARD_SIMDGROUPS = {"cuda": {256: 8}, "apple": {}}
# Backward: (BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2); BLOCK_N1 == BLOCK_M2 (one program does
# dK/dV of one key block and dQ of the query block at the same place). The tutorial's
# (32, 128, 128, 32) at hd64 on NVIDIA; on Apple hd256 fits no blocks (its `dot`s are refused).
BACKWARD_BLOCKS = {
    "cuda": {16: (32, 128, 128, 32), 32: (32, 128, 128, 32), 64: (32, 128, 128, 32), 128: (32, 64, 64, 32),
             256: (16, 32, 32, 16)},
    "apple": {16: (16, 32, 32, 16), 32: (16, 32, 32, 16), 64: (16, 32, 32, 16), 128: (16, 16, 16, 16),
              256: (16, 16, 16, 16)},
}


# Wider blocks where the GPU has the shared memory for them beside the K/V ring: on sm_90
# (227 KiB), hd256 at (128, 64) ran at 1.7x (64, 64) on an H100; sm_80/sm_86 keep the defaults.
HOPPER_FORWARD_BLOCKS = {256: (128, 64)}


def _target():
    return "cuda" if metile.get_device() == "cuda" else "apple"


def _forward_blocks(head_dim, dtype):
    """The default (BLOCK_M, BLOCK_N) of the forward on the current device."""
    if _target() == "cuda" and dtype in (metile.float16, metile.bfloat16):
        sm = re.search(r"\(sm_(\d+)", _metile.device_model())
        if sm is not None and int(sm.group(1)) >= 90 and head_dim in HOPPER_FORWARD_BLOCKS:
            return HOPPER_FORWARD_BLOCKS[head_dim]
    return FORWARD_BLOCKS[_target()][head_dim]


# ------------------------------------------------------------------ forward

NO_MASK, CAUSAL_MASK, KEY_BOUND_MASK = 0, 1, 2


def _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, lo, hi, qk_scale, offs_m, offs_n, N_CTX,
                    BLOCK_N: metile.constexpr, MASK: metile.constexpr):
    """Streams the keys and values of rows [lo, hi) past the queries `q`."""
    for start_n in metile.range(lo, hi, BLOCK_N):
        start_n = metile.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([start_n, 0])
        qk = metile.dot(q, k.T)
        if MASK == NO_MASK:
            m_ij = metile.maximum(m_i, metile.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        else:
            if MASK == CAUSAL_MASK:
                keep = offs_m[:, None] >= start_n + offs_n[None, :]
            else:
                keep = (start_n + offs_n < N_CTX)[None, :]
            # A large finite negative rather than -inf: exp2 of it is 0 all the same,
            # and a row whose every key is masked would give inf - inf (NaN) with -inf.
            qk = qk * qk_scale + metile.where(keep, 0.0, -1.0e6)
            m_ij = metile.maximum(m_i, metile.max(qk, 1))
            qk = qk - m_ij[:, None]
        p = metile.math.exp2(qk)
        alpha = metile.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + metile.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([start_n, 0])
        acc = metile.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@metile.kernel
def attention_fwd(Q, K, V, Out, M, sm_scale, N_CTX,
                  HEAD_DIM: metile.constexpr, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                  CAUSAL: metile.constexpr):
    """One program: BLOCK_M queries of head `program_id(1)` (of Z * H, each a contiguous
    (N_CTX, HEAD_DIM) matrix). Writes Out and M = log2(sum(exp2(scaled scores))) per query."""
    metile.static_assert(BLOCK_M % BLOCK_N == 0, "BLOCK_M must be a multiple of BLOCK_N")
    start_m = metile.program_id(0)
    off_hz = metile.program_id(1)
    head = off_hz.to(metile.int64) * N_CTX * HEAD_DIM
    desc_q = metile.make_tensor_descriptor(Q + head, shape=[N_CTX, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
    desc_k = metile.make_tensor_descriptor(K + head, shape=[N_CTX, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
    desc_v = metile.make_tensor_descriptor(V + head, shape=[N_CTX, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
    desc_o = metile.make_tensor_descriptor(Out + head, shape=[N_CTX, HEAD_DIM], strides=[HEAD_DIM, 1],
                                           block_shape=[BLOCK_M, HEAD_DIM])
    offs_m = start_m * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = metile.arange(0, BLOCK_N)
    m_i = metile.zeros([BLOCK_M], dtype=metile.float32) - float("inf")
    l_i = metile.zeros([BLOCK_M], dtype=metile.float32)
    acc = metile.zeros([BLOCK_M, HEAD_DIM], dtype=metile.float32)
    qk_scale = sm_scale * LOG2E
    q = desc_q.load([start_m * BLOCK_M, 0])
    if CAUSAL:
        # Keys wholly before this block's first query need no mask; the diagonal block
        # does (it also masks the keys past N_CTX: they come after every query).
        diagonal = start_m * BLOCK_M
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, 0, diagonal, qk_scale,
                                        offs_m, offs_n, N_CTX, BLOCK_N, NO_MASK)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, diagonal,
                                        min(diagonal + BLOCK_M, N_CTX), qk_scale,
                                        offs_m, offs_n, N_CTX, BLOCK_N, CAUSAL_MASK)
    else:
        # Whole key blocks without a mask, then the ragged last block (if any) with one.
        whole = N_CTX // BLOCK_N * BLOCK_N
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, 0, whole, qk_scale,
                                        offs_m, offs_n, N_CTX, BLOCK_N, NO_MASK)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, desc_k, desc_v, whole, N_CTX, qk_scale,
                                        offs_m, offs_n, N_CTX, BLOCK_N, KEY_BOUND_MASK)
    m_i += metile.math.log2(l_i)
    acc = acc / l_i[:, None]
    metile.store(M + off_hz * N_CTX + offs_m, m_i, mask=offs_m < N_CTX)
    desc_o.store([start_m * BLOCK_M, 0], acc.to(desc_o.dtype))


# ------------------------------------------------------------------ backward


@metile.kernel
def attention_bwd_preprocess(Out, DO, Delta, N_CTX, BLOCK_M: metile.constexpr, HEAD_DIM: metile.constexpr):
    """Delta = rowsum(O * dO) in f32, per query of each head."""
    off_m = metile.program_id(0) * BLOCK_M + metile.arange(0, BLOCK_M)
    off_hz = metile.program_id(1)
    off_n = metile.arange(0, HEAD_DIM)
    rows = off_hz.to(metile.int64) * N_CTX + off_m
    in_bounds = off_m < N_CTX
    o = metile.load(Out + rows[:, None] * HEAD_DIM + off_n[None, :], mask=in_bounds[:, None], other=0.0)
    do = metile.load(DO + rows[:, None] * HEAD_DIM + off_n[None, :], mask=in_bounds[:, None], other=0.0)
    delta = metile.sum(o.to(metile.float32) * do.to(metile.float32), axis=1)
    metile.store(Delta + rows, delta, mask=in_bounds)


def _attn_bwd_dkdv(dk, dv, Q, k, v, DO, M, D, stride_tok, stride_d, N_CTX,
                   BLOCK_M1: metile.constexpr, BLOCK_N1: metile.constexpr, HEAD_DIM: metile.constexpr,
                   start_n, start_m, num_steps, MASK: metile.constexpr):
    """dK and dV of the keys [start_n, start_n + BLOCK_N1) from `num_steps` blocks of
    BLOCK_M1 queries from `start_m`; `k` is pre-scaled by sm_scale * log2(e)."""
    offs_m = start_m + metile.arange(0, BLOCK_M1)
    offs_n = start_n + metile.arange(0, BLOCK_N1)
    offs_k = metile.arange(0, HEAD_DIM)
    qT_ptrs = Q + offs_m[None, :] * stride_tok + offs_k[:, None] * stride_d
    do_ptrs = DO + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d
    metile.static_assert(BLOCK_N1 % BLOCK_M1 == 0, "BLOCK_N1 must be a multiple of BLOCK_M1")
    curr_m = start_m
    step_m = BLOCK_M1
    for _ in metile.range(0, num_steps):
        offs_m = curr_m + metile.arange(0, BLOCK_M1)
        query_in_bounds = offs_m < N_CTX
        qT = metile.load(qT_ptrs, mask=query_in_bounds[None, :], other=0.0)
        # M is loaded before the product, as the tutorial does, to hide its latency.
        m = metile.load(M + offs_m, mask=query_in_bounds, other=0.0)
        qkT = metile.dot(k, qT)
        pT = metile.math.exp2(qkT - m[None, :])
        if MASK:
            keep = (offs_m[None, :] >= offs_n[:, None]) & query_in_bounds[None, :]
        else:
            keep = query_in_bounds[None, :]
        pT = metile.where(keep, pT, 0.0)
        do = metile.load(do_ptrs, mask=query_in_bounds[:, None], other=0.0)
        dv += metile.dot(pT.to(do.dtype), do)
        Di = metile.load(D + offs_m, mask=query_in_bounds, other=0.0)
        dpT = metile.dot(v, metile.trans(do)).to(metile.float32)
        dsT = pT * (dpT - Di[None, :])
        dk += metile.dot(dsT.to(qT.dtype), metile.trans(qT))
        curr_m += step_m
        qT_ptrs += step_m * stride_tok
        do_ptrs += step_m * stride_tok
    return dk, dv


def _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, N_CTX,
                 BLOCK_M2: metile.constexpr, BLOCK_N2: metile.constexpr, HEAD_DIM: metile.constexpr,
                 start_m, start_n, num_steps, MASK: metile.constexpr):
    """dQ of the queries [start_m, start_m + BLOCK_M2) from `num_steps` blocks of BLOCK_N2
    keys from `start_n`; K is pre-scaled, so dQ is scaled by ln(2) at the end."""
    offs_m = start_m + metile.arange(0, BLOCK_M2)
    offs_n = start_n + metile.arange(0, BLOCK_N2)
    offs_k = metile.arange(0, HEAD_DIM)
    kT_ptrs = K + offs_n[None, :] * stride_tok + offs_k[:, None] * stride_d
    vT_ptrs = V + offs_n[None, :] * stride_tok + offs_k[:, None] * stride_d
    Di = metile.load(D + offs_m, mask=offs_m < N_CTX, other=0.0)
    metile.static_assert(BLOCK_M2 % BLOCK_N2 == 0, "BLOCK_M2 must be a multiple of BLOCK_N2")
    curr_n = start_n
    step_n = BLOCK_N2
    for _ in metile.range(0, num_steps):
        offs_n = curr_n + metile.arange(0, BLOCK_N2)
        key_in_bounds = offs_n < N_CTX
        kT = metile.load(kT_ptrs, mask=key_in_bounds[None, :], other=0.0)
        vT = metile.load(vT_ptrs, mask=key_in_bounds[None, :], other=0.0)
        qk = metile.dot(q, kT)
        p = metile.math.exp2(qk - m)
        if MASK:
            keep = (offs_m[:, None] >= offs_n[None, :]) & key_in_bounds[None, :]
        else:
            keep = key_in_bounds[None, :]
        p = metile.where(keep, p, 0.0)
        dp = metile.dot(do, vT).to(metile.float32)
        ds = p * (dp - Di[:, None])
        dq += metile.dot(ds.to(kT.dtype), metile.trans(kT))
        curr_n += step_n
        kT_ptrs += step_n * stride_tok
        vT_ptrs += step_n * stride_tok
    return dq


@metile.kernel
def attention_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, M, D,
                  stride_z, stride_h, stride_tok, stride_d, H, N_CTX,
                  BLOCK_M1: metile.constexpr, BLOCK_N1: metile.constexpr,
                  BLOCK_M2: metile.constexpr, BLOCK_N2: metile.constexpr,
                  BLK_SLICE_FACTOR: metile.constexpr, HEAD_DIM: metile.constexpr, CAUSAL: metile.constexpr):
    """dK, dV of keys [pid * BLOCK_N1, +BLOCK_N1) and dQ of queries [pid * BLOCK_M2, +BLOCK_M2)
    of head `program_id(2)`; Q, K, V, dO share strides, K is pre-scaled by sm_scale * log2(e)."""
    metile.static_assert(BLOCK_N1 == BLOCK_M2, "a program's key block and query block must be the same rows")
    bhid = metile.program_id(2)
    off_chz = (bhid * N_CTX).to(metile.int64)
    adj = stride_h.to(metile.int64) * (bhid % H) + stride_z.to(metile.int64) * (bhid // H)
    pid = metile.program_id(0)

    Q += adj
    K += adj
    V += adj
    DO += adj
    DQ += adj
    DK += adj
    DV += adj
    M += off_chz
    D += off_chz

    offs_k = metile.arange(0, HEAD_DIM)

    # dK and dV of this program's key block.
    start_n = pid * BLOCK_N1
    offs_n = start_n + metile.arange(0, BLOCK_N1)
    key_in_bounds = offs_n < N_CTX
    dv = metile.zeros([BLOCK_N1, HEAD_DIM], dtype=metile.float32)
    dk = metile.zeros([BLOCK_N1, HEAD_DIM], dtype=metile.float32)
    k = metile.load(K + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d, mask=key_in_bounds[:, None],
                    other=0.0)
    v = metile.load(V + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d, mask=key_in_bounds[:, None],
                    other=0.0)
    if CAUSAL:
        # Queries of the diagonal block, in narrower steps with the mask; then the
        # queries after it, which see every key of the block.
        MASK_BLOCK_M1: metile.constexpr = BLOCK_M1 // BLK_SLICE_FACTOR
        start_m = start_n
        num_steps = BLOCK_N1 // MASK_BLOCK_M1
        dk, dv = _attn_bwd_dkdv(dk, dv, Q, k, v, DO, M, D, stride_tok, stride_d, N_CTX,
                                MASK_BLOCK_M1, BLOCK_N1, HEAD_DIM, start_n, start_m, num_steps, True)
        start_m += num_steps * MASK_BLOCK_M1
    else:
        start_m = 0
    num_steps = metile.cdiv(N_CTX - start_m, BLOCK_M1)
    dk, dv = _attn_bwd_dkdv(dk, dv, Q, k, v, DO, M, D, stride_tok, stride_d, N_CTX,
                            BLOCK_M1, BLOCK_N1, HEAD_DIM, start_n, start_m, num_steps, False)
    dv_ptrs = DV + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d
    metile.store(dv_ptrs, dv, mask=key_in_bounds[:, None])
    dk *= sm_scale
    dk_ptrs = DK + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d
    metile.store(dk_ptrs, dk, mask=key_in_bounds[:, None])

    # dQ of this program's query block.
    start_m = pid * BLOCK_M2
    offs_m = start_m + metile.arange(0, BLOCK_M2)
    query_in_bounds = offs_m < N_CTX
    q = metile.load(Q + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d, mask=query_in_bounds[:, None],
                    other=0.0)
    do = metile.load(DO + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d,
                     mask=query_in_bounds[:, None], other=0.0)
    dq = metile.zeros([BLOCK_M2, HEAD_DIM], dtype=metile.float32)
    m = metile.load(M + offs_m, mask=query_in_bounds, other=0.0)
    m = m[:, None]
    if CAUSAL:
        # Keys of the diagonal block with the mask, then the keys before it without.
        MASK_BLOCK_N2: metile.constexpr = BLOCK_N2 // BLK_SLICE_FACTOR
        end_n = start_m + BLOCK_M2
        num_steps = BLOCK_M2 // MASK_BLOCK_N2
        dq = _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, N_CTX,
                          BLOCK_M2, MASK_BLOCK_N2, HEAD_DIM, start_m, end_n - num_steps * MASK_BLOCK_N2, num_steps,
                          True)
        end_n -= num_steps * MASK_BLOCK_N2
        num_steps = end_n // BLOCK_N2
        dq = _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, N_CTX,
                          BLOCK_M2, BLOCK_N2, HEAD_DIM, start_m, end_n - num_steps * BLOCK_N2, num_steps, False)
    else:
        num_steps = metile.cdiv(N_CTX, BLOCK_N2)
        dq = _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, N_CTX,
                          BLOCK_M2, BLOCK_N2, HEAD_DIM, start_m, 0, num_steps, False)
    dq *= LN2
    dq_ptrs = DQ + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d
    metile.store(dq_ptrs, dq, mask=query_in_bounds[:, None])


# ------------------------------------------------------------------ launchers

# The element types the kernels take, by the dtype names numpy (with ml_dtypes) and torch give.
_DTYPES = {"float16": metile.float16, "bfloat16": metile.bfloat16, "float8_e4m3fn": metile.float8e4nv,
           "float32": metile.float32}
_FORWARD_INPUTS = (metile.float16, metile.bfloat16, metile.float8e4nv)
_BACKWARD_INPUTS = (metile.float16, metile.bfloat16)
_OUTPUTS = (metile.float16, metile.bfloat16)


def _dtype(x):
    name = str(x.dtype).removeprefix("torch.")
    return _DTYPES.get(name, name)


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _empty(like, shape, dtype):
    """An uninitialised array of `shape` and meTile `dtype` of `like`'s kind (and device)."""
    if _is_torch(like):
        import torch

        names = {metile.float16: torch.float16, metile.bfloat16: torch.bfloat16, metile.float32: torch.float32}
        return torch.empty(shape, dtype=names[dtype], device=like.device)
    import numpy as np

    if dtype == metile.bfloat16:
        import ml_dtypes

        return np.empty(shape, ml_dtypes.bfloat16)
    return np.empty(shape, {metile.float16: np.float16, metile.float32: np.float32}[dtype])


def _contiguous(x):
    if _is_torch(x):
        return x.contiguous()
    import numpy as np

    return np.ascontiguousarray(x)


def _element_strides(x):
    if _is_torch(x):
        return tuple(x.stride())
    return tuple(s // x.itemsize for s in x.strides)


def _check_operands(names_and_arrays, allowed, what):
    first_name, first = names_and_arrays[0]
    shape = tuple(first.shape)
    if len(shape) != 4:
        raise ValueError(f"{what}: {first_name} must be (Z, H, N_CTX, HEAD_DIM), got shape {shape}")
    head_dim = shape[3]
    if head_dim not in FORWARD_BLOCKS["cuda"]:
        raise ValueError(f"{what}: HEAD_DIM must be one of {sorted(FORWARD_BLOCKS['cuda'])}, got {head_dim}")
    dtype = _dtype(first)
    if dtype not in allowed:
        raise TypeError(f"{what}: {first_name} must be one of {', '.join(allowed)}; got {dtype}")
    for name, x in names_and_arrays[1:]:
        if tuple(x.shape) != shape:
            raise ValueError(f"{what}: {name} has shape {tuple(x.shape)}, {first_name} has {shape}")
        if _dtype(x) != dtype:
            raise TypeError(f"{what}: {name} is {_dtype(x)}, {first_name} is {dtype}")
    return shape, dtype


def attention(q, k, v, causal, sm_scale, *, out_dtype=None, BLOCK_M=None, BLOCK_N=None, num_sgs=None):
    """softmax(q k^T * sm_scale (+ causal mask)) v for (Z, H, N_CTX, HEAD_DIM) arrays.

    q, k and v are f16, bf16 or fp8 e4m3 (`metile.float8e4nv`), all of one dtype; the output
    is `out_dtype` (f16 or bf16; by default q's dtype, f16 for fp8). Returns `(o, M)`, M the
    (Z, H, N_CTX) f32 log-sum-exp in base 2 (`log2(sum_j exp2(q.k_j * sm_scale * log2(e)))`)
    that `attention_backward` takes.
    BLOCK_M and BLOCK_N default to `FORWARD_BLOCKS[target][HEAD_DIM]`
    (`HOPPER_FORWARD_BLOCKS` for f16/bf16 on sm_90 and later).
    """
    (Z, H, N_CTX, HEAD_DIM), dtype = _check_operands([("q", q), ("k", k), ("v", v)], _FORWARD_INPUTS, "attention")
    if out_dtype is None:
        out_dtype = metile.float16 if dtype == metile.float8e4nv else dtype
    if out_dtype not in _OUTPUTS:
        raise TypeError(f"attention: out_dtype must be one of {', '.join(_OUTPUTS)}; got {out_dtype!r}")
    default_m, default_n = _forward_blocks(HEAD_DIM, dtype)
    BLOCK_M = BLOCK_M or default_m
    BLOCK_N = BLOCK_N or default_n
    q, k, v = _contiguous(q), _contiguous(k), _contiguous(v)
    o = _empty(q, (Z, H, N_CTX, HEAD_DIM), out_dtype)
    M = _empty(q, (Z, H, N_CTX), metile.float32)
    num_sgs = num_sgs or FORWARD_SIMDGROUPS[_target()].get(HEAD_DIM)
    options = {} if num_sgs is None else {"num_sgs": num_sgs}
    grid = (metile.cdiv(N_CTX, BLOCK_M), Z * H)
    attention_fwd[grid](q, k, v, o, M, float(sm_scale), N_CTX, HEAD_DIM=HEAD_DIM, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                        CAUSAL=bool(causal), **options)
    return o, M


def attention_backward(q, k, v, o, M, do, causal, sm_scale, *, blocks=None, BLK_SLICE_FACTOR=2, num_sgs=None):
    """dQ, dK, dV of `attention(q, k, v, causal, sm_scale)` given its `(o, M)` and dO.

    f16 or bf16 operands (o and do too); the gradients have q's dtype. `blocks` is
    (BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2), by default `BACKWARD_BLOCKS[target][HEAD_DIM]`.
    """
    (Z, H, N_CTX, HEAD_DIM), dtype = _check_operands(
        [("q", q), ("k", k), ("v", v), ("o", o), ("do", do)], _BACKWARD_INPUTS, "attention_backward")
    if tuple(M.shape) != (Z, H, N_CTX) or _dtype(M) != metile.float32:
        raise ValueError(f"attention_backward: M must be the forward's (Z, H, N_CTX) float32 log-sum-exp, got "
                         f"{tuple(M.shape)} {_dtype(M)}")
    BLOCK_M1, BLOCK_N1, BLOCK_M2, BLOCK_N2 = blocks or BACKWARD_BLOCKS[_target()][HEAD_DIM]
    q, k, v, o, do, M = (_contiguous(x) for x in (q, k, v, o, do, M))
    # The tutorial's pre-scaled K: the kernel's q.k is then already in base-2 exponent units.
    scale = sm_scale * LOG2E
    if _is_torch(k):
        arg_k = k * scale
    else:
        arg_k = (k.astype("float32") * scale).astype(k.dtype)
    dq, dk, dv = (_empty(q, (Z, H, N_CTX, HEAD_DIM), dtype) for _ in range(3))
    delta = _empty(q, (Z, H, N_CTX), metile.float32)
    options = {} if num_sgs is None else {"num_sgs": num_sgs}
    pre_block = min(128, metile.next_power_of_2(N_CTX))
    attention_bwd_preprocess[(metile.cdiv(N_CTX, pre_block), Z * H)](o, do, delta, N_CTX, BLOCK_M=pre_block,
                                                                      HEAD_DIM=HEAD_DIM, **options)
    grid = (metile.cdiv(N_CTX, BLOCK_N1), 1, Z * H)
    attention_bwd[grid](q, arg_k, v, float(sm_scale), do, dq, dk, dv, M, delta, *_element_strides(q), H, N_CTX,
                        BLOCK_M1=BLOCK_M1, BLOCK_N1=BLOCK_N1, BLOCK_M2=BLOCK_M2, BLOCK_N2=BLOCK_N2,
                        BLK_SLICE_FACTOR=BLK_SLICE_FACTOR, HEAD_DIM=HEAD_DIM, CAUSAL=bool(causal), **options)
    return dq, dk, dv
