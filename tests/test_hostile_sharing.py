"""Values read many times over: offsets, masks, loaded values, `dot` operands and
accumulators rebuilt as `x = (x + x) - x` and `m = m & m` forty times. Each level reads
the previous value several times, so a compiler walk that follows every read visits 3^40
values; every backend must compile these in a moment and compute the plain kernel's
results."""

import numpy as np
import pytest

import metile
from metile import _frontend, _metile

LEVELS = 40


@metile.kernel
def add_chain(X, Y, Out, N, BLOCK: metile.constexpr, LEVELS: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    for _ in metile.static_range(LEVELS):
        offs = (offs + offs) - offs
    m = offs < N
    for _ in metile.static_range(LEVELS):
        m = m & m
    v = metile.load(X + offs, mask=m, other=0.0) + metile.load(Y + offs, mask=m, other=0.0)
    for _ in metile.static_range(LEVELS):
        v = (v + v) - v
    metile.store(Out + offs, v, mask=m)


@metile.kernel
def row_sum_chain(X, Out, N, BLOCK: metile.constexpr, LEVELS: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    for _ in metile.static_range(LEVELS):
        cols = (cols + cols) - cols
    m = cols < N
    for _ in metile.static_range(LEVELS):
        m = m & m
    x = metile.load(X + row * N + cols, mask=m, other=0.0)
    metile.store(Out + row, metile.sum(x, axis=0))


@metile.kernel
def dot_chain(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr,
              LEVELS: metile.constexpr):
    acc = metile.zeros((BM, BN), dtype="f32")
    for k in metile.tile_range(0, K, BK):
        a = metile.tile_load(A, metile.program_id(0) * BM, k, K, (BM, BK), bounds=(M, K))
        b = metile.tile_load(B, k, metile.program_id(1) * BN, N, (BK, BN), bounds=(K, N))
        for _ in metile.static_range(LEVELS):
            a = (a + a) - a
        acc = metile.dot(a, b, acc)
    for _ in metile.static_range(LEVELS):
        acc = (acc + acc) - acc
    metile.tile_store(C, metile.program_id(0) * BM, metile.program_id(1) * BN, N, acc, (BM, BN), bounds=(M, N))


KERNELS = {
    "add": (add_chain, [("X", "ptr", "f32"), ("Y", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32")],
            {"BLOCK": 256}),
    "row sum": (row_sum_chain, [("X", "ptr", "f32"), ("Out", "ptr", "f32"), ("N", "scalar", "i32")], {"BLOCK": 256}),
    "dot": (dot_chain, [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32")]
            + [(n, "scalar", "i32", 16) for n in "MNK"], {"BM": 64, "BN": 64, "BK": 32}),
}


@pytest.mark.parametrize("name", list(KERNELS))
def test_every_target_compiles_long_shared_chains_in_a_moment(name):
    # Milliseconds each; a walk of every read would not end (the uniform mask test once took 35 s
    # at 12 levels and ran out of memory at 16).
    kernel, params, constexprs = KERNELS[name]
    traced = _frontend.specialize(kernel.fn, params, {**constexprs, "LEVELS": LEVELS}, {"threads_per_group": 128})
    for arch in ("sm_80", "sm_90"):
        assert "__global__" in _metile.compile_cuda(traced, num_sgs=4, arch=arch)["cuda"]
    assert "kernel void" in _metile.compile_msl(traced, num_sgs=4)["msl"]


def test_shared_chains_compute_the_plain_kernels_results(device, rng):
    x = rng.standard_normal(1000).astype(np.float32)
    y = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros(1000, np.float32)
    add_chain[(metile.cdiv(1000, 256),)](x, y, out, 1000, BLOCK=256, LEVELS=LEVELS)
    np.testing.assert_allclose(out, x + y, rtol=1e-6, atol=1e-6)
    rows = rng.standard_normal((5, 200)).astype(np.float32)
    sums = np.zeros(5, np.float32)
    row_sum_chain[(5,)](rows, sums, 200, BLOCK=256, LEVELS=LEVELS)
    np.testing.assert_allclose(sums, rows.sum(axis=1), rtol=1e-5, atol=1e-4)


def test_a_shared_chain_around_a_product(device, rng):
    M, N, K = 70, 50, 40
    a = (rng.standard_normal((M, K)) / 4).astype(np.float16)
    b = (rng.standard_normal((K, N)) / 4).astype(np.float16)
    c = np.full((M, N), np.nan, np.float32)
    bm, bn, bk = (64, 64, 32) if device == "cuda" else (32, 32, 16)
    dot_chain[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BM=bm, BN=bn, BK=bk, LEVELS=LEVELS)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)
