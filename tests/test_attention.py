"""`metile.testing.reference_kernels.attention` and `attention_backward` against a
float64 numpy attention and its derived gradients, on every backend: head dims 64,
128 and 256, causal or not, f16/bf16 (fp8 e4m3 forward), sequence lengths that
are not multiples of the blocks (and shorter than one block), several heads.

Errors are measured as max |out - ref| / max |ref| and bounded by what the
dtype allows: the inputs are exact in the reference, so what remains is the
rounding of P (to the input dtype for the P.V product) and of the output."""

import re

import numpy as np
import pytest
from fp8_reference import fp8_tensor_cores

import metile
from metile.testing.reference_kernels import attention, attention_backward

try:
    import ml_dtypes
except ImportError:  # f16 cases still run
    ml_dtypes = None


def _np_dtype(name):
    if name == "f16":
        return np.float16
    if ml_dtypes is None:
        pytest.skip("bf16 and fp8 numpy arrays need ml_dtypes")
    return {"bf16": ml_dtypes.bfloat16, "f8e4m3": ml_dtypes.float8_e4m3fn}[name]

# Worst relative error allowed (of the largest reference value): about four times the worst
# measured on cpu and msl-emu, and far below what a wrong mask, scale or rescaling gives.
FORWARD_TOLERANCE = {"f16": 2e-3, "bf16": 1.5e-2, "f8e4m3": 8e-2}
BACKWARD_TOLERANCE = {"f16": 6e-3, "bf16": 4e-2}


def _inputs(rng, shape, dtype, count=3):
    return tuple(rng.standard_normal(shape).astype(_np_dtype(dtype)) for _ in range(count))


def _reference(q, k, v, causal, sm_scale, do=None):
    """o and M = log2(sum exp2(s * log2(e))) in float64; with `do`, also dq, dk, dv:
    P = softmax(S), dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)),
    dQ = dS K * scale, dK = dS^T Q * scale."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("zhmd,zhnd->zhmn", q, k) * sm_scale
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    row_max = s.max(-1, keepdims=True)
    e = np.exp(s - row_max)
    total = e.sum(-1, keepdims=True)
    p = e / total
    o = p @ v
    lse2 = (np.log(total[..., 0]) + row_max[..., 0]) / np.log(2)
    if do is None:
        return o, lse2
    do = do.astype(np.float64)
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    return o, lse2, ds @ k * sm_scale, np.swapaxes(ds, -1, -2) @ q * sm_scale, dv


def _assert_close(name, got, want, tolerance):
    got = np.asarray(got).astype(np.float64)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, want {want.shape}"
    scale = np.abs(want).max() or 1.0  # one key: dQ and dK are exactly 0
    error = np.abs(got - want).max() / scale
    assert error <= tolerance, f"{name}: relative error {error:.2e} > {tolerance:.0e}"


def _check_forward(rng, Z, H, N_CTX, HEAD_DIM, causal, dtype, out_dtype=None):
    q, k, v = _inputs(rng, (Z, H, N_CTX, HEAD_DIM), dtype)
    sm_scale = 1.3 / np.sqrt(HEAD_DIM)
    o, M = attention(q, k, v, causal, sm_scale, out_dtype=out_dtype)
    want_o, want_m = _reference(q, k, v, causal, sm_scale)
    expected = out_dtype or ("f16" if dtype == "f8e4m3" else dtype)
    assert o.dtype == _np_dtype(expected) and M.dtype == np.float32
    _assert_close("o", o, want_o, FORWARD_TOLERANCE[dtype])
    # fp8 scores summed on fp8 tensor cores keep about 14 bits, so M moves by
    # about |s| * 2**-13 (up to 1.6e-3 measured on an H100); everywhere else
    # they are f32 sums.
    atol = 4e-3 if dtype == "f8e4m3" and fp8_tensor_cores(metile.get_device()) else 2e-5
    np.testing.assert_allclose(M, want_m, rtol=1e-5, atol=atol)


# Each head dim with a length that leaves a ragged last block of queries and of keys
# under the blocks of every target (the launcher's defaults).
RAGGED = {64: 77, 128: 70, 256: 37}


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("HEAD_DIM", [64, 128, 256])
def test_forward(device, rng, HEAD_DIM, causal, dtype):
    _check_forward(rng, 1, 2, RAGGED[HEAD_DIM], HEAD_DIM, causal, dtype)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("HEAD_DIM", [64, 128, 256])
def test_forward_fp8(device, rng, HEAD_DIM, causal):
    _check_forward(rng, 1, 2, RAGGED[HEAD_DIM], HEAD_DIM, causal, "f8e4m3")


def test_forward_fp8_to_bf16(device, rng):
    _check_forward(rng, 2, 1, 45, 64, True, "f8e4m3", out_dtype=metile.bfloat16)


@pytest.mark.parametrize("Z, H, N_CTX", [(1, 1, 1), (2, 3, 5), (3, 2, 16), (1, 5, 64), (2, 2, 65)])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_sequence_lengths_and_heads(device, rng, Z, H, N_CTX, causal):
    _check_forward(rng, Z, H, N_CTX, 64, causal, "f16")


@pytest.mark.parametrize("BLOCK_M, BLOCK_N", [(16, 16), (32, 16), (64, 32)])
def test_forward_block_shapes(device, rng, BLOCK_M, BLOCK_N):
    q, k, v = _inputs(rng, (1, 2, 53, 64), "f16")
    o, M = attention(q, k, v, True, 0.2, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    want_o, want_m = _reference(q, k, v, True, 0.2)
    _assert_close("o", o, want_o, FORWARD_TOLERANCE["f16"])
    np.testing.assert_allclose(M, want_m, rtol=1e-5, atol=2e-5)


def test_forward_of_strided_views(device, rng):
    # (Z, N_CTX, H, HEAD_DIM) storage, as models keep it, seen as (Z, H, N_CTX, HEAD_DIM).
    q, k, v = (x.transpose(0, 2, 1, 3) for x in _inputs(rng, (2, 19, 3, 64), "f16"))
    o, M = attention(q, k, v, False, 0.125)
    want_o, want_m = _reference(q, k, v, False, 0.125)
    _assert_close("o", o, want_o, FORWARD_TOLERANCE["f16"])
    np.testing.assert_allclose(M, want_m, rtol=1e-5, atol=2e-5)


def test_empty_inputs(device):
    for shape in ((1, 1, 0, 64), (0, 2, 5, 64)):
        q = np.zeros(shape, np.float16)
        o, M = attention(q, q, q, True, 1.0)
        grads = attention_backward(q, q, q, o, M, q, True, 1.0)
        assert o.shape == shape and M.shape == shape[:3] and all(g.shape == shape for g in grads)


def _check_backward(rng, Z, H, N_CTX, HEAD_DIM, causal, dtype):
    q, k, v, do = _inputs(rng, (Z, H, N_CTX, HEAD_DIM), dtype, count=4)
    sm_scale = 1.3 / np.sqrt(HEAD_DIM)
    o, M = attention(q, k, v, causal, sm_scale)
    dq, dk, dv = attention_backward(q, k, v, o, M, do, causal, sm_scale)
    _, _, want_dq, want_dk, want_dv = _reference(q, k, v, causal, sm_scale, do)
    for name, got, want in (("dq", dq, want_dq), ("dk", dk, want_dk), ("dv", dv, want_dv)):
        assert got.dtype == _np_dtype(dtype), name
        _assert_close(name, got, want, BACKWARD_TOLERANCE[dtype])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("HEAD_DIM, N_CTX", [(64, 77), (128, 40)])
def test_backward(device, rng, HEAD_DIM, N_CTX, causal):
    _check_backward(rng, 1, 2, N_CTX, HEAD_DIM, causal, "f16")


@pytest.mark.parametrize("HEAD_DIM", [16, 32])
def test_narrow_heads_forward_and_backward(device, rng, HEAD_DIM):
    _check_forward(rng, 2, 1, 45, HEAD_DIM, True, "f16")
    _check_backward(rng, 2, 1, 45, HEAD_DIM, True, "f16")


def test_backward_bf16(device, rng):
    _check_backward(rng, 2, 1, 50, 64, True, "bf16")


@pytest.mark.parametrize("N_CTX", [1, 7, 32])
def test_backward_short_sequences(device, rng, N_CTX):
    _check_backward(rng, 2, 2, N_CTX, 64, True, "f16")


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("HEAD_DIM", [64, 128, 256])
def test_forward_long(device, rng, HEAD_DIM, causal):
    _check_forward(rng, 2, 2, 333, HEAD_DIM, causal, "f16")


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("HEAD_DIM", [64, 128])
def test_backward_long(device, rng, HEAD_DIM, causal):
    _check_backward(rng, 2, 2, 301, HEAD_DIM, causal, "f16")


def test_the_kernels_helpers_are_rewritten_so_their_loops_compile():
    # Helpers of metile's own modules run as plain Python, except those of the module of the
    # kernel being traced: the attention helpers' loops over run-time bounds must compile.
    from metile._frontend import rewrite, specialize
    from metile.testing import reference_attention, reference_kernels

    assert not rewrite._is_user_function(reference_attention._attn_fwd_inner)
    with rewrite.kernel_package(reference_attention.attention_fwd.fn):
        assert rewrite._is_user_function(reference_attention._attn_fwd_inner)
        assert not rewrite._is_user_function(reference_kernels._gelu)
    params = [("Q", "ptr", "f16"), ("K", "ptr", "f16"), ("V", "ptr", "f16"), ("Out", "ptr", "f16"),
              ("M", "ptr", "f32"), ("sm_scale", "scalar", "f32"), ("N_CTX", "scalar", "i32")]
    for causal in (False, True):
        ir = specialize(reference_attention.attention_fwd.fn, params,
                        {"HEAD_DIM": 64, "BLOCK_M": 32, "BLOCK_N": 16, "CAUSAL": causal}, {}).text
        assert len(re.findall(r"= for ", ir)) == 2, ir


@pytest.mark.parametrize("arch", ["apple", "apple10"])
@pytest.mark.parametrize("HEAD_DIM", [64, 128, 256])
def test_apple_runs_both_products_on_matrix_atoms(HEAD_DIM, arch):
    # The launcher's Apple blocks leave threadgroup memory for both products' staging: each
    # source line with a `dot` issues simdgroup_matrix (apple) or matmul2d (apple10) ops.
    from metile import _metile
    from metile._frontend import specialize
    from metile.testing import reference_attention

    BLOCK_M, BLOCK_N = reference_attention.FORWARD_BLOCKS["apple"][HEAD_DIM]
    params = [("Q", "ptr", "f16"), ("K", "ptr", "f16"), ("V", "ptr", "f16"), ("Out", "ptr", "f16"),
              ("M", "ptr", "f32"), ("sm_scale", "scalar", "f32"), ("N_CTX", "scalar", "i32")]
    traced = specialize(reference_attention.attention_fwd.fn, params,
                        {"HEAD_DIM": HEAD_DIM, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "CAUSAL": True}, {})
    gpu_ir = _metile.compile_msl(traced, arch=arch)["gpu_ir"]
    atom_lines = {line.rsplit(":", 1)[-1] for line in gpu_ir.splitlines()
                  if re.search(r"= mma\.(simdgroup8x8|matmul2d)", line)}
    assert len(atom_lines) == 2, atom_lines


@pytest.mark.parametrize("HEAD_DIM, BLOCK_N", [(64, 64), (128, 128)])
def test_hopper_reads_p_from_registers(HEAD_DIM, BLOCK_N):
    # On sm_90 the second product takes P as wgmma's register A (four packed pairs per k16 step)
    # instead of staging it; with the switch off it is staged. cuda runs check the results.
    from metile import _metile
    from metile._frontend import specialize
    from metile.testing import reference_attention

    params = [("Q", "ptr", "f16"), ("K", "ptr", "f16"), ("V", "ptr", "f16"), ("Out", "ptr", "f16"),
              ("M", "ptr", "f32"), ("sm_scale", "scalar", "f32"), ("N_CTX", "scalar", "i32")]
    traced = specialize(reference_attention.attention_fwd.fn, params,
                        {"HEAD_DIM": HEAD_DIM, "BLOCK_M": 128, "BLOCK_N": BLOCK_N, "CAUSAL": False},
                        {"threads_per_group": 256})
    register_a = re.compile(r"k16\.f32\.f16\.f16 \{[^}]*\}, \{%\d+, %\d+, %\d+, %\d+\}")
    src = _metile.compile_cuda(traced, num_sgs=8, arch="sm_90")["cuda"]
    assert len(register_a.findall(src)) == 2 * BLOCK_N // 16  # the unmasked and the masked key loop
    assert "metile_pack2(" in src
    staged = _metile.compile_cuda(traced, num_sgs=8, arch="sm_90", wgmma_register_a=False)["cuda"]
    assert not register_a.search(staged)


@pytest.mark.parametrize("HEAD_DIM, BLOCK_M, BLOCK_N, sgs", [(256, 64, 64, 4), (256, 128, 64, 8), (128, 256, 128, 8)])
def test_hopper_k_v_ring_leaves_room_for_q(HEAD_DIM, BLOCK_M, BLOCK_N, sgs):
    # Large blocks: the K/V ring's stages must leave threadgroup memory for q's staging (these
    # compiled before the ring and must still).
    from metile import _metile
    from metile._frontend import specialize
    from metile.testing import reference_attention

    params = [("Q", "ptr", "f16"), ("K", "ptr", "f16"), ("V", "ptr", "f16"), ("Out", "ptr", "f16"),
              ("M", "ptr", "f32"), ("sm_scale", "scalar", "f32"), ("N_CTX", "scalar", "i32", 16)]
    for causal in (False, True):
        traced = specialize(reference_attention.attention_fwd.fn, params,
                            {"HEAD_DIM": HEAD_DIM, "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "CAUSAL": causal},
                            {"threads_per_group": 32 * sgs})
        assert "wgmma.mma_async" in _metile.compile_cuda(traced, num_sgs=sgs, arch="sm_90")["cuda"]


@pytest.mark.parametrize("model, dtype, blocks", [
    ("NVIDIA H100 80GB HBM3 (sm_90, cuda:0)", "float16", (128, 64)),
    ("NVIDIA H100 80GB HBM3 (sm_90, cuda:0)", "bfloat16", (128, 64)),
    ("NVIDIA H100 80GB HBM3 (sm_90, cuda:0)", "float8e4nv", (64, 64)),
    ("NVIDIA A100-SXM4-80GB (sm_80, cuda:0)", "float16", (64, 64)),
    ("NVIDIA GeForce RTX 3090 (sm_86, cuda:1)", "float16", (64, 64)),
])
def test_hd256_takes_wider_blocks_on_hopper(monkeypatch, model, dtype, blocks):
    # The launcher's default for hd256 on cuda follows the GPU's shared memory: sm_90 fits
    # (128, 64) beside the K/V ring, the others keep (64, 64); fp8 keeps it everywhere.
    from metile.testing import reference_attention as ra

    monkeypatch.setattr(ra.metile, "get_device", lambda: "cuda")
    monkeypatch.setattr(ra._metile, "device_model", lambda: model)
    assert ra._forward_blocks(256, getattr(metile, dtype)) == blocks
    assert ra._forward_blocks(128, getattr(metile, dtype)) == ra.FORWARD_BLOCKS["cuda"][128]


# ------------------------------------------------------------ refusals


def test_head_dim_outside_the_supported_ones_is_refused():
    q = np.zeros((1, 1, 8, 48), np.float16)
    with pytest.raises(ValueError, match=r"attention: HEAD_DIM must be one of \[16, 32, 64, 128, 256\], got 48"):
        attention(q, q, q, False, 1.0)


def test_rank_other_than_four_is_refused():
    q = np.zeros((8, 64), np.float16)
    with pytest.raises(ValueError, match=r"attention: q must be \(Z, H, N_CTX, HEAD_DIM\), got shape \(8, 64\)"):
        attention(q, q, q, False, 1.0)


def test_float32_inputs_are_refused():
    q = np.zeros((1, 1, 8, 64), np.float32)
    with pytest.raises(TypeError, match="attention: q must be one of f16, bf16, f8e4m3; got f32"):
        attention(q, q, q, False, 1.0)


def test_mismatched_operands_are_refused():
    q = np.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(ValueError, match=r"attention: k has shape \(1, 1, 9, 64\), q has \(1, 1, 8, 64\)"):
        attention(q, np.zeros((1, 1, 9, 64), np.float16), q, False, 1.0)
    with pytest.raises(TypeError, match="attention: v is bf16, q is f16"):
        attention(q, q, q.astype(_np_dtype("bf16")), False, 1.0)


def test_fp8_output_is_refused():
    q = np.zeros((1, 1, 8, 64), _np_dtype("f8e4m3"))
    with pytest.raises(TypeError, match="attention: out_dtype must be one of f16, bf16; got 'f8e4m3'"):
        attention(q, q, q, False, 1.0, out_dtype=metile.float8e4nv)


def test_backward_of_fp8_is_refused():
    q = np.zeros((1, 1, 8, 64), _np_dtype("f8e4m3"))
    m = np.zeros((1, 1, 8), np.float32)
    with pytest.raises(TypeError, match="attention_backward: q must be one of f16, bf16; got f8e4m3"):
        attention_backward(q, q, q, q, m, q, False, 1.0)


def test_backward_needs_the_forward_log_sum_exp():
    q = np.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(ValueError, match=r"attention_backward: M must be the forward's \(Z, H, N_CTX\) float32 "
                                         r"log-sum-exp, got \(1, 1, 7\) f32"):
        attention_backward(q, q, q, q, np.zeros((1, 1, 7), np.float32), q, False, 1.0)


def test_blocks_that_do_not_divide_are_refused(device):
    q = np.zeros((1, 1, 8, 64), np.float16)
    with pytest.raises(metile.CompilationError, match="BLOCK_M must be a multiple of BLOCK_N"):
        attention(q, q, q, False, 1.0, BLOCK_M=16, BLOCK_N=32)


def test_backward_blocks_must_pair_keys_and_queries(device):
    q = np.zeros((1, 1, 8, 64), np.float16)
    m = np.zeros((1, 1, 8), np.float32)
    with pytest.raises(metile.CompilationError, match="a program's key block and query block must be the same rows"):
        attention_backward(q, q, q, q, m, q, False, 1.0, blocks=(16, 32, 16, 16))
