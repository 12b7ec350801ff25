"""Kernels for test_hostile_interp.py, in a module of their own so that a fresh
process (tests/isolated.py) can import them: a kernel needs its source file."""

import metile


@metile.kernel
def divide(X, Y, Q, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    q = x // y
    metile.store(Q + offs, q, mask=mask)


@metile.kernel
def remainder(X, Y, R, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    y = metile.load(Y + offs)
    r = x % y
    metile.store(R + offs, r, mask=offs < N)


@metile.kernel
def divide_other(X, Y, Q, R, N, OTHER: metile.constexpr, BLOCK: metile.constexpr):
    # Triton's idiom: the divisor is loaded with other= and the store is masked.
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask, other=0)
    y = metile.load(Y + offs, mask=mask, other=OTHER)
    metile.store(Q + offs, x // y, mask=mask)
    metile.store(R + offs, x % y, mask=mask)


@metile.kernel
def guarded_divide(X, Y, Q, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    y = metile.load(Y + offs)
    metile.store(Q + offs, metile.where(y != 0, x // y, -1))


@metile.kernel
def row_of(Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    rows = offs // N
    metile.store(Out + offs, rows)


@metile.kernel
def sum_of_quotients(X, Y, Out, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    total = metile.sum(x // y)
    metile.store(Out, total)


@metile.kernel
def divide_by_literal_zero(X, Q, N, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    metile.store(Q + offs, x // 0, mask=offs < N)


@metile.kernel
def shift(X, S, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs)
    shifted = x << S
    metile.store(Out + offs, shifted)
    metile.store(Out + offs + BLOCK, x >> S)


@metile.kernel
def busy_grid(Out, BLOCK: metile.constexpr):
    # Every program sums a few tiles: a huge grid of these runs for minutes.
    pid = metile.program_id(0)
    offs = metile.arange(0, BLOCK)
    acc = metile.zeros((BLOCK,), metile.int32)
    for i in metile.tile_range(0, 4):
        acc = acc + offs * i + pid
    metile.store(Out + offs, acc, mask=pid == 0)


@metile.kernel
def busy_loop(Out, N, BLOCK: metile.constexpr):
    # One program looping N times.
    offs = metile.arange(0, BLOCK)
    acc = metile.zeros((BLOCK,), metile.int32)
    for i in metile.tile_range(0, N):
        acc = acc + offs + i
    metile.store(Out + offs, acc)
