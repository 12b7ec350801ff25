"""Reference kernels shared by meTile's tests, benchmarks and docs: the seed's
add, softmax and GEMM, plus layernorm, rmsnorm, a GEMM with fused epilogues and
one for any matrix sides (`bounds=`), and fused attention with its backward pass
(`attention`, `attention_backward`: launchers of the kernels in
`metile.testing.reference_attention`).
Each is checked against numpy by the conformance suite (attention by
tests/test_attention.py)."""

import metile
from metile.testing.reference_attention import attention, attention_backward

__all__ = ["add", "attention", "attention_backward", "gemm", "gemm_bounded", "gemm_epilogue", "layernorm",
           "linear", "rmsnorm", "softmax"]


@metile.kernel
def add(X, Y, Out, N, BLOCK: metile.constexpr):
    pid = metile.program_id(0)
    offs = pid * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(Out + offs, x + y, mask=mask)


@metile.kernel
def softmax(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    m = -1e38
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        m = metile.maximum(m, x)
    m = metile.max(m)

    s = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        s = s + metile.exp(x - m)
    s = metile.sum(s)

    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        metile.store(Out + row * N + cols, metile.exp(x - m) / s, mask=mask)


@metile.kernel
def layernorm(X, W, B, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    acc = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        acc = acc + metile.load(X + row * N + cols, mask=cols < N)
    mean = metile.sum(acc) / N
    var_acc = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        d = metile.where(mask, x - mean, 0.0)
        var_acc = var_acc + d * d
    rstd = 1.0 / metile.sqrt(metile.sum(var_acc) / N + eps)
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        w = metile.load(W + cols, mask=mask)
        b = metile.load(B + cols, mask=mask)
        metile.store(Out + row * N + cols, (x - mean) * rstd * w + b, mask=mask)


@metile.kernel
def rmsnorm(X, W, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    sq = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        x = metile.load(X + row * N + cols, mask=cols < N)
        sq = sq + x * x
    rms = metile.sqrt(metile.sum(sq) / N + eps)
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        w = metile.load(W + cols, mask=mask)
        metile.store(Out + row * N + cols, x / rms * w, mask=mask)


def _gelu(x):
    return 0.5 * x * (1.0 + metile.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@metile.kernel
def gemm_epilogue(A, B, C, M, N, K, alpha, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                  BLOCK_K: metile.constexpr, ACT: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    if ACT == "relu":
        acc = metile.maximum(acc, 0.0)
    elif ACT == "gelu":
        acc = _gelu(acc)
    elif ACT == "silu":
        acc = acc / (1.0 + metile.exp(-acc))
    elif ACT == "scale":
        acc = acc * alpha
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


@metile.kernel
def gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


@metile.kernel
def gemm_bounded(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                 BLOCK_K: metile.constexpr):
    """The seed GEMM for matrices whose sides are not multiples of the tile."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


@metile.kernel
def linear(X, W, Y, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr):
    """Y = X @ W.T with the weight W stored (N, K), as a linear layer keeps it; any sides."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype=metile.float32)
    for k in metile.range(0, K, BLOCK_K):
        x = metile.tile_load(X, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        w = metile.tile_load(W, pid_n * BLOCK_N, k, K, (BLOCK_N, BLOCK_K), bounds=(N, K))
        acc = metile.dot(x, w.T, acc)
    metile.tile_store(Y, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))
