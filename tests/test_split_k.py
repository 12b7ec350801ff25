"""split_k: a GEMM's K loop shared by several programs per output tile (a partial
kernel and a finishing kernel, docs/gemm.md), against numpy and the unsplit
launch on every backend; and the kernels it refuses, with the reason and line."""

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


def _bf16(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def _operand(rng, shape, dtype):
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "f16":
        return x.astype(np.float16)
    return _bf16(x) if dtype == "bf16" else x


@metile.kernel
def gemm(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr, BLOCK_K: metile.constexpr,
         DT: metile.constexpr = "f32"):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K)).to(DT)
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N)).to(DT)
        acc = metile.dot(a, b, acc)
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, acc, (BLOCK_M, BLOCK_N), bounds=(M, N))


def _gemm(rng, M, N, K, dtype, blocks, **options):
    a, b = _operand(rng, (M, K), dtype), _operand(rng, (K, N), dtype)
    bm, bn, bk = blocks

    def run(**opts):
        c = np.full((M, N), np.nan, np.float32)
        gemm[(metile.cdiv(M, bm), metile.cdiv(N, bn))](a, b, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                                        DT=dtype, **opts)
        return c

    return run(**options), run(), a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("splits", [1, 2, 3, 4])
def test_split_gemm_agrees_with_the_unsplit_one(device, rng, dtype, splits):
    # 83 = 5 full K steps of 16 and a ragged one; 67 x 45 leaves ragged edge tiles.
    K = 83
    split, whole, want = _gemm(rng, 67, 45, K, dtype, (32, 32, 16), split_k=splits)
    tol = 1e-4 if dtype == "f32" else 2e-3
    np.testing.assert_allclose(split, want, rtol=tol, atol=tol * np.sqrt(K))
    # Only the order of the f32 sums differs from the unsplit kernel.
    np.testing.assert_allclose(split, whole, rtol=1e-5, atol=1e-5 * np.sqrt(K))


def test_more_splits_than_k_iterations(device, rng):
    # Two K iterations over five splits: three shares are empty and add zeros.
    split, whole, want = _gemm(rng, 20, 24, 20, "f32", (16, 16, 16), split_k=5)
    np.testing.assert_allclose(split, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(split, whole, rtol=1e-5, atol=1e-5)


def test_split_k_with_every_l2_order_and_prefetch_setting(device, rng):
    for opts in ({"l2_order": True}, {"l2_order": False}, {"prefetch": True}, {"prefetch": False}):
        split, whole, want = _gemm(rng, 150, 40, 64, "f16", (16, 16, 16), split_k=3, **opts)
        np.testing.assert_allclose(split, want, rtol=2e-3, atol=2e-2)


@metile.kernel
def gemm_accumulate(A, B, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                    BLOCK_K: metile.constexpr, STEP_FROM_K: metile.constexpr = False):
    """Triton-style: pointer increments carried by the loop, masked loads, and C += A @ B.
    With STEP_FROM_K, B's step is computed from the induction variable, so a split cannot
    jump to its first iteration in closed form and runs the increments up to it."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    rm = pid_m * BLOCK_M + metile.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    rk = metile.arange(0, BLOCK_K)
    a_ptrs = A + rm[:, None] * K + rk[None, :]
    b_ptrs = B + rk[:, None] * N + rn[None, :]
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    acc = metile.load(C + rm[:, None] * N + rn[None, :], mask=c_mask, other=0.0)
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.load(a_ptrs, mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = metile.load(b_ptrs, mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = metile.dot(a, b, acc)
        a_ptrs += BLOCK_K
        if STEP_FROM_K:
            b_ptrs += (k - k + BLOCK_K) * N
        else:
            b_ptrs += BLOCK_K * N
    metile.store(C + rm[:, None] * N + rn[None, :], acc, mask=c_mask)


@pytest.mark.parametrize("splits, step_from_k", [(2, False), (3, False), (7, False), (3, True)])
def test_triton_style_gemm_with_pointer_increments_and_an_initial_accumulator(device, rng, splits, step_from_k):
    M, N, K = 33, 20, 70
    a, b = _operand(rng, (M, K), "f32"), _operand(rng, (K, N), "f32")
    c0 = rng.standard_normal((M, N)).astype(np.float32)
    c = c0.copy()
    gemm_accumulate[(metile.cdiv(M, 16), metile.cdiv(N, 16))](a, b, c, M, N, K, BLOCK_M=16, BLOCK_N=16, BLOCK_K=8,
                                                               STEP_FROM_K=step_from_k, split_k=splits)
    np.testing.assert_allclose(c, c0 + a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(K))


@metile.kernel
def gemm_bias_relu(A, B, Bias, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                   BLOCK_K: metile.constexpr):
    """A fused epilogue after the loop: bias, ReLU and a cast to f16."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    rn = pid_n * BLOCK_N + metile.arange(0, BLOCK_N)
    bias = metile.load(Bias + rn, mask=rn < N, other=0.0)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        a = metile.tile_load(A, pid_m * BLOCK_M, k, K, (BLOCK_M, BLOCK_K), bounds=(M, K))
        b = metile.tile_load(B, k, pid_n * BLOCK_N, N, (BLOCK_K, BLOCK_N), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    y = metile.maximum(acc + bias[None, :], 0.0).to("f16")
    metile.tile_store(C, pid_m * BLOCK_M, pid_n * BLOCK_N, N, y, (BLOCK_M, BLOCK_N), bounds=(M, N))


def test_fused_epilogue_runs_once_on_the_summed_tile(device, rng):
    M, N, K = 45, 70, 96
    a, b = _operand(rng, (M, K), "f16"), _operand(rng, (K, N), "f16")
    bias = rng.standard_normal(N).astype(np.float32)
    c = np.full((M, N), np.nan, np.float16)
    gemm_bias_relu[(metile.cdiv(M, 32), metile.cdiv(N, 32))](a, b, bias, c, M, N, K, BLOCK_M=32, BLOCK_N=32,
                                                              BLOCK_K=16, split_k=4)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0.0)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=5e-3, atol=5e-3)


@metile.kernel
def batched_gemm(A, B, C, M, N, K, NB, BLOCK: metile.constexpr):
    """One GEMM per program_id(2); num_programs(2) must read the launched batch count."""
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    batch = metile.program_id(2)
    acc = metile.zeros((BLOCK, BLOCK), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK):
        a = metile.tile_load(A + batch * M * K, pid_m * BLOCK, k, K, (BLOCK, BLOCK), bounds=(M, K))
        b = metile.tile_load(B + batch * K * N, k, pid_n * BLOCK, N, (BLOCK, BLOCK), bounds=(K, N))
        acc = metile.dot(a, b, acc)
    acc = acc + (metile.num_programs(2) - NB)
    metile.tile_store(C + batch * M * N, pid_m * BLOCK, pid_n * BLOCK, N, acc, (BLOCK, BLOCK), bounds=(M, N))


def test_program_id_2_reads_the_users_grid_in_a_split_launch(device, rng):
    nb, M, N, K = 3, 20, 18, 40
    a, b = _operand(rng, (nb, M, K), "f32"), _operand(rng, (nb, K, N), "f32")
    c = np.full((nb, M, N), np.nan, np.float32)
    batched_gemm[(metile.cdiv(M, 16), metile.cdiv(N, 16), nb)](a, b, c, M, N, K, nb, BLOCK=16, split_k=3)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_split_k_enters_the_specialisation_key(rng):
    metile.set_device("cpu")
    a = np.ones((16, 32), np.float32)
    b = np.ones((32, 16), np.float32)
    c = np.zeros((16, 16), np.float32)
    before = gemm.cache_info()["specializations"]
    for s in (2, 3, 2):
        gemm[(1, 1)](a, b, c, 16, 16, 32, BLOCK_M=16, BLOCK_N=16, BLOCK_K=8, split_k=s)
        assert (c == 32).all()
    assert gemm.cache_info()["specializations"] == before + 2
    launcher = gemm[(1, 1)].configure(BLOCK_M=16, BLOCK_N=16, BLOCK_K=8, split_k=2)
    launcher(a, b, c, 16, 16, 32)
    with pytest.raises(TypeError, match="multiple values for the launch option split_k"):
        launcher(a, b, c, 16, 16, 32, split_k=3)


def test_autotune_searches_split_k(device, rng):
    configs = [metile.Config(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, split_k=s) for s in (1, 2, 4)]
    tuned = metile.autotune(configs, key=["K"], warmup=0, rep=1, verbose=False)(gemm)
    M, N, K = 16, 16, 128
    a, b = _operand(rng, (M, K), "f32"), _operand(rng, (K, N), "f32")
    c = np.full((M, N), np.nan, np.float32)
    tuned[(1, 1)](a, b, c, M, N, K)
    assert tuned.best_config in configs and len(tuned.timings) == 3
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_pointer_increments_jump_to_each_split_in_closed_form():
    params = [("A", "ptr", "f32"), ("B", "ptr", "f32"), ("C", "ptr", "f32"), ("M", "scalar", "i32"),
              ("N", "scalar", "i32"), ("K", "scalar", "i32")]

    def loops(step_from_k):
        traced = _frontend.specialize(gemm_accumulate.fn, params, {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 8,
                                                                   "STEP_FROM_K": step_from_k}, {})
        return _metile.split_k(traced, 4)[0].text.count(" = for ")

    assert loops(False) == 1
    assert loops(True) == 2  # the increments run up to the split's first iteration


def test_the_two_kernels_can_be_inspected():
    params = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32"), ("M", "scalar", "i32"),
              ("N", "scalar", "i32"), ("K", "scalar", "i32")]
    traced = _frontend.specialize(gemm.fn, params, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "DT": "f16"}, {})
    partial, finish = _metile.split_k(traced, 4)
    assert "split_k_workspace" in partial.text and "tile_store [64,64]" in partial.text
    assert "dot" not in finish.text and "tile_load [64,64]" in finish.text
    cuda = _metile.compile_cuda(partial, arch="sm_90")["cuda"]
    assert "wgmma.mma_async" in cuda and "blockIdx" in cuda
    assert "simdgroup_multiply_accumulate" in _metile.compile_msl(partial)["msl"]
    _metile.compile_cuda(finish, arch="sm_90")
    _metile.compile_msl(finish)


# ------------------------------------------------------------------ refusals


@metile.kernel
def gemm_store_in_loop(A, B, C, K, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK, BLOCK), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK):
        acc = metile.dot(metile.tile_load(A, 0, k, K, (BLOCK, BLOCK)), metile.tile_load(B, k, 0, BLOCK, (BLOCK, BLOCK)),
                         acc)
        metile.tile_store(C, 0, 0, BLOCK, acc, (BLOCK, BLOCK))  # the line the error shows


@metile.kernel
def gemm_scaled_in_loop(A, B, C, K, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK, BLOCK), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK):
        acc = metile.dot(metile.tile_load(A, 0, k, K, (BLOCK, BLOCK)), metile.tile_load(B, k, 0, BLOCK, (BLOCK, BLOCK)),
                         acc)
        acc = acc * 0.5  # not a sum of products any more
    metile.tile_store(C, 0, 0, BLOCK, acc, (BLOCK, BLOCK))


@metile.kernel
def gemm_count_used_after(A, B, C, K, BLOCK: metile.constexpr):
    acc = metile.zeros((BLOCK, BLOCK), dtype="f32")
    steps = 0
    for k in metile.tile_range(0, K, BLOCK):
        acc = metile.dot(metile.tile_load(A, 0, k, K, (BLOCK, BLOCK)), metile.tile_load(B, k, 0, BLOCK, (BLOCK, BLOCK)),
                         acc)
        steps = steps + 1
    metile.tile_store(C, 0, 0, BLOCK, acc * steps, (BLOCK, BLOCK))  # steps: a carried value used after


@metile.kernel
def gemm_store_before(A, B, C, K, BLOCK: metile.constexpr):
    metile.tile_store(C, 0, 0, BLOCK, metile.zeros((BLOCK, BLOCK), dtype="f32"), (BLOCK, BLOCK))  # before the loop
    acc = metile.zeros((BLOCK, BLOCK), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK):
        acc = metile.dot(metile.tile_load(A, 0, k, K, (BLOCK, BLOCK)), metile.tile_load(B, k, 0, BLOCK, (BLOCK, BLOCK)),
                         acc)
    metile.tile_store(C, 0, 0, BLOCK, acc, (BLOCK, BLOCK))


@metile.kernel
def one_dot(A, B, C, BLOCK: metile.constexpr):
    acc = metile.dot(metile.tile_load(A, 0, 0, BLOCK, (BLOCK, BLOCK)), metile.tile_load(B, 0, 0, BLOCK, (BLOCK, BLOCK)))
    metile.tile_store(C, 0, 0, BLOCK, acc, (BLOCK, BLOCK))


@metile.kernel
def add(X, Y, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs, mask=offs < N) + metile.load(Y + offs, mask=offs < N),
                 mask=offs < N)


@pytest.mark.parametrize("kernel, reason, line", [
    (gemm_store_in_loop, r"the K loop contains `tile_store`", "# the line the error shows"),
    (gemm_scaled_in_loop, r"the accumulator flows into `mul`", "# not a sum of products any more"),
    (gemm_count_used_after, r"a value the K loop carries besides the accumulator is used after the loop",
     "# steps: a carried value used after"),
    (gemm_store_before, r"`tile_store` runs before the K loop", "# before the loop"),
    (one_dot, r"this dot does not accumulate into a loop-carried value of a top-level loop", "acc = metile.dot("),
], ids=["store-in-loop", "acc-scaled", "carried-used-after", "store-before", "no-loop"])
def test_kernels_split_k_cannot_split_are_refused_with_the_line(kernel, reason, line):
    metile.set_device("cpu")
    x = np.zeros((16, 16), np.float32)
    args = (x, x, x) if kernel is one_dot else (x, x, x, 16)
    with pytest.raises(metile.CompilationError, match=r"split_k=2 cannot split kernel " + kernel.__name__) as e:
        kernel[(1,)](*args, BLOCK=16, split_k=2)
    assert reason.replace("\\", "") in str(e.value) and line in str(e.value)


def test_a_kernel_without_a_k_loop_is_refused():
    metile.set_device("cpu")
    x = np.zeros(16, np.float32)
    with pytest.raises(metile.CompilationError,
                       match="split_k=3 cannot split kernel add: no top-level loop accumulates"):
        add[(1,)](x, x, x, 16, BLOCK=16, split_k=3)
    add[(1,)](x, x, x, 16, BLOCK=16, split_k=1)  # 1 is no split: any kernel


@pytest.mark.parametrize("value, error, message", [
    (0, ValueError, "split_k must be from 1 \\(no split\\) to 65535, got 0"),
    (-2, ValueError, "got -2"),
    (70000, ValueError, "got 70000"),
    (2.0, TypeError, "split_k is the number of programs .* must be an int, got 2.0"),
    (True, TypeError, "must be an int, got True"),
    ("2", TypeError, "must be an int, got '2'"),
])
def test_bad_split_k_values_are_refused(value, error, message):
    x = np.zeros((16, 16), np.float32)
    with pytest.raises(error, match=message):
        gemm[(1, 1)](x, x, x, 16, 16, 16, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, split_k=value)
    with pytest.raises(error, match=message):
        metile.Config(BLOCK_M=16, split_k=value)
    with pytest.raises(error, match=message):
        _metile.split_k(_frontend.specialize(add.fn, [("X", "ptr", "f32"), ("Y", "ptr", "f32"),
                                                      ("Out", "ptr", "f32"), ("N", "scalar", "i32")],
                                             {"BLOCK": 16}, {}), value)


def test_split_launches_beyond_the_grid_or_workspace_limits_are_refused():
    metile.set_device("cpu")
    x = np.zeros((16, 16), np.float32)
    with pytest.raises(ValueError, match="split_k=60000 runs 60000 programs per output tile along grid axis 2"):
        batched_gemm[(1, 1, 40000)](x, x, x, 16, 16, 16, 1, BLOCK=16, split_k=60000)
    with pytest.raises(ValueError, match="needs 4294967296 f32 partial sums"):
        gemm[(1024, 1024)](x, x, x, 16, 16, 16, BLOCK_M=64, BLOCK_N=32, BLOCK_K=16, split_k=2)
    assert dict(metile.Config(BLOCK_M=16, split_k=4)) == {"BLOCK_M": 16, "split_k": 4}
