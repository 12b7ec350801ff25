"""The kernels the benchmarks measure, with the launch parameters each uses."""

import metile


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
def fused_gemm(A, B, C, M, N, K, alpha, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
               BLOCK_K: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N))
        acc = metile.dot(a, b, acc)
    acc = metile.maximum(acc * alpha, 0.0)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N))


def _ptr(name):
    return (name, "ptr", "f32")


def _i32(name):
    return (name, "scalar", "i32")


def _f32(name):
    return (name, "scalar", "f32")


# name -> (kernel, runtime params as the frontend sees them, constexprs)
SPECS = {
    "add": (add, [_ptr("X"), _ptr("Y"), _ptr("Out"), _i32("N")], {"BLOCK": 1024}),
    "softmax": (softmax, [_ptr("X"), _ptr("Out"), _i32("N")], {"BLOCK": 1024}),
    "layernorm": (layernorm, [_ptr("X"), _ptr("W"), _ptr("B"), _ptr("Out"), _i32("N"), _f32("eps")],
                  {"BLOCK": 1024}),
    "rmsnorm": (rmsnorm, [_ptr("X"), _ptr("W"), _ptr("Out"), _i32("N"), _f32("eps")], {"BLOCK": 1024}),
    "gemm 64x64x32": (gemm, [_ptr("A"), _ptr("B"), _ptr("C"), _i32("M"), _i32("N"), _i32("K")],
                      {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
    "fused gemm": (fused_gemm, [_ptr("A"), _ptr("B"), _ptr("C"), _i32("M"), _i32("N"), _i32("K"), _f32("alpha")],
                   {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}),
}
