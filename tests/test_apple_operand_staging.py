"""How Apple's matrix-atom `dot`s stage their operands in threadgroup memory, counted on msl-emu
(`metile.testing.emu_profile`: deterministic counts of the emitted MSL, not timings).

`dot(q, k.T)` stages `k` as it is loaded (rows of K, vector stores) and reads its fragments
transposed (`simdgroup_load(.., true)` on the 8x8 matrices), where staging `k.T` took one store
per element, many-way bank conflicted (the `k_major_b` switch, on for Apple targets)."""

import math
import re

import numpy as np
import pytest

import metile
from metile import _frontend, _metile
from metile.testing import emu_profile
from metile.testing.reference_attention import FORWARD_BLOCKS, attention_fwd

ATTENTION_PARAMS = [("Q", "ptr", "f16"), ("K", "ptr", "f16"), ("V", "ptr", "f16"), ("Out", "ptr", "f16"),
                    ("M", "ptr", "f32"), ("sm_scale", "scalar", "f32"), ("N_CTX", "scalar", "i32")]


@metile.kernel
def scores(Q, K, Out, N, D: metile.constexpr, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr):
    """Out = Q K^T (Q: M x D, K: N x D), one BLOCK_M x BLOCK_N tile per program; ragged in M and N."""
    offs_m = metile.program_id(0) * BLOCK_M + metile.arange(0, BLOCK_M)
    offs_n = metile.program_id(1) * BLOCK_N + metile.arange(0, BLOCK_N)
    offs_d = metile.arange(0, D)
    q = metile.load(Q + offs_m[:, None] * D + offs_d[None, :], mask=(offs_m < N)[:, None], other=0.0)
    k = metile.load(K + offs_n[:, None] * D + offs_d[None, :], mask=(offs_n < N)[:, None], other=0.0)
    s = metile.dot(q, k.T)
    metile.store(Out + offs_m[:, None] * N + offs_n[None, :], s, mask=(offs_m < N)[:, None] & (offs_n < N)[None, :])


def _attention_msl(head_dim, arch="apple", **passes):
    block_m, block_n = FORWARD_BLOCKS["apple"][head_dim]
    traced = _frontend.specialize(attention_fwd.fn, ATTENTION_PARAMS,
                                  {"HEAD_DIM": head_dim, "BLOCK_M": block_m, "BLOCK_N": block_n, "CAUSAL": False},
                                  {})
    return _metile.compile_msl(traced, arch=arch, **passes)


def _line_of(source, text):
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_k_is_staged_as_loaded_and_read_with_transposed_simdgroup_loads(head_dim):
    import inspect

    from metile.testing import reference_attention

    qk_line = f"reference_attention.py:{_line_of(inspect.getsource(reference_attention), 'qk = metile.dot(q, k.T)')}"
    out = _attention_msl(head_dim)
    # B's 8x8 matrices of q @ k.T come from rows of k with transposed loads, the origin left 0.
    loads = re.findall(r"simdgroup_load\(\w+, tg\d+ \+ \w+, (\d+), ulong2\(0\), (true|false)\);", out["msl"])
    assert loads and all(transposed == "true" for _, transposed in loads)
    # The stores that stage k for it are vectors: no element-by-element store at that line.
    stores = [line for line in out["gpu_ir"].splitlines() if re.search(r"^\s*store\b", line) and qk_line in line]
    assert stores and all(re.match(r"\s*store\.v\d", line) for line in stores), stores
    # Switched off, k.T is staged element by element, and no matrix is loaded.
    old = _attention_msl(head_dim, k_major_b=False)
    assert "simdgroup_load" not in old["msl"]
    assert any(re.match(r"\s*store %", line) for line in old["gpu_ir"].splitlines() if qk_line in line)


def test_matmul2d_reads_a_k_major_b_element_by_element():
    # matmul2d's cooperative tensors are filled element by element, from k's rows here too.
    out = _attention_msl(64, arch="apple10")
    assert "simdgroup_load" not in out["msl"] and ".run(" in out["msl"]
    old = _attention_msl(64, arch="apple10", k_major_b=False)
    assert out["msl"] != old["msl"]


@pytest.fixture
def emu():
    if not metile.device_available("msl-emu"):
        pytest.skip("no msl-emu device here")
    previous = metile.get_device()
    metile.set_device("msl-emu")
    yield
    metile.set_device(previous)


def _profile_attention(rng, head_dim, arch, n_ctx=128, **passes):
    shape = (1, 1, n_ctx, head_dim)
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
    o = np.zeros(shape, np.float16)
    lse = np.zeros(shape[:3], np.float32)
    block_m, block_n = FORWARD_BLOCKS["apple"][head_dim]
    scale = 1.0 / math.sqrt(head_dim)
    with emu_profile() as profile:
        attention_fwd[(metile.cdiv(n_ctx, block_m), 1)](q, k, v, o, lse, scale, n_ctx, HEAD_DIM=head_dim,
                                                       BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=False,
                                                       arch=arch, **passes)
    qf, kf, vf = (x[0, 0].astype(np.float32) for x in (q, k, v))
    s = qf @ kf.T * scale
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(o[0, 0].astype(np.float32), (p / p.sum(-1, keepdims=True)) @ vf, atol=3e-2,
                               rtol=3e-2)
    return profile.total("attention_fwd")


# Staging k.T element by element took 1.6-4.2 times the least wavefronts its threadgroup
# accesses need (docs/metal.md); staged as loaded, every access is within 10% of the least.
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("arch", ["apple", "apple10"])
def test_attention_threadgroup_accesses_are_free_of_bank_conflicts(emu, rng, head_dim, arch):
    total = _profile_attention(rng, head_dim, arch)
    assert total["bank_conflict_excess"] < 1.1, total["bank_conflict_excess"]
    old = _profile_attention(rng, head_dim, arch, k_major_b=False)
    assert old["bank_conflict_excess"] > 1.5, old["bank_conflict_excess"]
    wavefronts = lambda t: t["threadgroup_load_wavefronts"] + t["threadgroup_store_wavefronts"]  # noqa: E731
    assert wavefronts(total) < 0.7 * wavefronts(old)


@pytest.mark.parametrize("arch", ["apple", "apple10"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("k_major_b", [True, False])
@pytest.mark.parametrize("N, D, blocks", [(64, 64, (32, 32)), (45, 32, (32, 16)), (100, 16, (16, 32))])
def test_scores_agree_with_numpy_either_way(device, rng, arch, dtype, k_major_b, N, D, blocks):
    if device != "msl-emu" and arch != "apple":
        pytest.skip("arch is an Apple target option")
    # Small integers: every product and sum is exact, on every path.
    q = rng.integers(-4, 5, (N, D)).astype(dtype)
    k = rng.integers(-4, 5, (N, D)).astype(dtype)
    out = np.full((N, N), np.nan, np.float32)
    options = {"arch": arch, "k_major_b": k_major_b} if device == "msl-emu" else {}
    grid = (metile.cdiv(N, blocks[0]), metile.cdiv(N, blocks[1]))
    scores[grid](q, k, out, N, D=D, BLOCK_M=blocks[0], BLOCK_N=blocks[1], **options)
    np.testing.assert_array_equal(out, q.astype(np.float32) @ k.astype(np.float32).T)
