"""Block pointers (`make_block_ptr`, `advance`, `load`/`store` with
`boundary_check` and `padding_option`) and tensor descriptors
(`make_tensor_descriptor`, `.load`/`.store`), as Triton spells them, on every
backend at ragged sizes, against numpy; and their error paths."""

import inspect

import numpy as np
import pytest

import metile
from metile import _frontend, _metile


def line_of(kernel, text):
    lines, first = inspect.getsourcelines(kernel.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


# ------------------------------------------------------------ block pointers


@metile.kernel
def scale_blocks(X, Y, M, N, stride_xm, stride_ym, BM: metile.constexpr, BN: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    x_block = metile.make_block_ptr(base=X, shape=(M, N), strides=(stride_xm, 1),
                                    offsets=(pid_m * BM, pid_n * BN), block_shape=(BM, BN), order=(1, 0))
    y_block = metile.make_block_ptr(Y, (M, N), (stride_ym, 1), (pid_m * BM, pid_n * BN), (BM, BN), (1, 0))
    x = metile.load(x_block, boundary_check=(0, 1), padding_option="zero", eviction_policy="evict_last")
    metile.store(y_block, x * 2.0 + 1.0, boundary_check=(0, 1), cache_modifier=".cg", eviction_policy="evict_first")


@pytest.mark.parametrize("m, n", [(37, 45), (5, 3), (64, 32)])
def test_block_pointer_load_store_at_ragged_sizes(device, rng, m, n):
    x = rng.standard_normal((m, n)).astype(np.float32)
    y = np.full((m + 3, n), -7.0, np.float32)  # rows past M must stay untouched
    scale_blocks[(metile.cdiv(m, 16), metile.cdiv(n, 32))](x, y, m, n, n, n, BM=16, BN=32)
    np.testing.assert_allclose(y[:m], x * 2 + 1, rtol=1e-6)
    assert (y[m:] == -7.0).all()


@metile.kernel
def blocked_matmul(A, B, C, M, N, K, stride_am, stride_bk, stride_cm,
                   BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    a_block = metile.make_block_ptr(base=A, shape=(M, K), strides=(stride_am, 1), offsets=(pid_m * BM, 0),
                                    block_shape=(BM, BK), order=(1, 0))
    b_block = metile.make_block_ptr(base=B, shape=(K, N), strides=(stride_bk, 1), offsets=(0, pid_n * BN),
                                    block_shape=(BK, BN), order=(1, 0))
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for _ in range(0, K, BK):
        a = metile.load(a_block, boundary_check=(0, 1))
        b = metile.load(b_block, boundary_check=(0, 1))
        acc += metile.dot(a, b)
        a_block = metile.advance(a_block, (0, BK))
        b_block = b_block.advance((BK, 0))
    c_block = metile.make_block_ptr(base=C, shape=(M, N), strides=(stride_cm, 1), offsets=(pid_m * BM, pid_n * BN),
                                    block_shape=(BM, BN), order=(1, 0))
    metile.store(c_block, acc, boundary_check=(0, 1))


@pytest.mark.parametrize("m, n, k", [(45, 37, 70), (16, 16, 16), (3, 70, 9)])
def test_block_pointers_advance_in_a_compiled_loop(device, rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    blocked_matmul[(metile.cdiv(m, 32), metile.cdiv(n, 32))](a, b, c, m, n, k, k, n, n, BM=32, BN=32, BK=16)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@metile.kernel
def padded_rows(X, Y, N, ROWS: metile.constexpr, BN: metile.constexpr, PAD: metile.constexpr):
    # Reads a (ROWS, BN) block at row -1 of an (ROWS, N) matrix: row 0 of the
    # block and the columns past N are outside and read as the padding.
    src = metile.make_block_ptr(X, (ROWS, N), (N, 1), (-1, 0), (ROWS, BN), (1, 0))
    dst = metile.make_block_ptr(Y, (ROWS, BN), (BN, 1), (0, 0), (ROWS, BN), (1, 0))
    metile.store(dst, metile.load(src, boundary_check=(0, 1), padding_option=PAD))


@pytest.mark.parametrize("padding", ["zero", "nan", ""])
def test_padding_options_fill_the_outside(device, rng, padding):
    n = 5
    x = rng.standard_normal((4, n)).astype(np.float32)
    y = np.full((4, 8), 3.0, np.float32)
    padded_rows[(1,)](x, y, n, ROWS=4, BN=8, PAD=padding)
    fill = np.nan if padding == "nan" else 0.0
    expected = np.full((4, 8), fill, np.float32)
    expected[1:, :n] = x[:3]
    np.testing.assert_array_equal(y, expected)


@metile.kernel
def only_rows_checked(X, Y, M, N: metile.constexpr):
    # Axis 1 is exactly the tensor's width, so only axis 0 needs a check.
    src = metile.make_block_ptr(X, (M, N), (N, 1), (metile.program_id(0) * 8, 0), (8, N), (1, 0))
    dst = metile.make_block_ptr(Y, (M, N), (N, 1), (metile.program_id(0) * 8, 0), (8, N), (1, 0))
    metile.store(dst, metile.load(src, boundary_check=0) + 1, boundary_check=(0,))


def test_boundary_check_on_one_axis(device, rng):
    x = rng.integers(-50, 50, (13, 16)).astype(np.int32)
    y = np.zeros_like(x)
    only_rows_checked[(2,)](x, y, 13, N=16)
    np.testing.assert_array_equal(y, x + 1)


@metile.kernel
def advance_on_condition(X, Y, N, B: metile.constexpr):
    pid = metile.program_id(0)
    block = metile.make_block_ptr(X, (N,), (1,), (0,), (B,), (0,))
    if pid % 2 == 1:
        block = metile.advance(block, (B,))
    out = metile.make_block_ptr(Y + pid * B, (B,), (1,), (0,), (B,), (0,))
    metile.store(out, metile.load(block, boundary_check=(0,), padding_option="zero"))


def test_block_pointer_carried_out_of_a_runtime_if(device, rng):
    n = 11
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros((4, 8), np.float32)
    advance_on_condition[(4,)](x, y, n, B=8)
    padded = np.zeros(16, np.float32)
    padded[:n] = x
    for pid in range(4):
        np.testing.assert_array_equal(y[pid], padded[8:] if pid % 2 else padded[:8])


# ------------------------------------------------------- tensor descriptors


@metile.kernel
def descriptor_copy(X, Y, M, N, BM: metile.constexpr, BN: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    x_desc = metile.make_tensor_descriptor(X, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    y_desc = metile.make_tensor_descriptor(Y, [M, N], [N, 1], [BM, BN])
    # Blocks start half a block early: the rows and columns before 0 read as zeros
    # and their writes are dropped, as TMA does.
    off_m = pid_m * BM - BM // 2
    off_n = pid_n * BN - BN // 2
    tile = x_desc.load([off_m, off_n])
    y_desc.store([off_m, off_n], tile + 1.0)


@pytest.mark.parametrize("m, n", [(19, 23), (4, 40)])
def test_tensor_descriptor_reads_zeros_and_drops_writes_outside(device, rng, m, n):
    x = rng.standard_normal((m, n)).astype(np.float32)
    y = np.zeros((m, n), np.float32)
    grid = (metile.cdiv(m, 8) + 1, metile.cdiv(n, 16) + 1)
    descriptor_copy[grid](x, y, m, n, BM=8, BN=16)
    np.testing.assert_allclose(y, x + 1, rtol=1e-6)


@metile.kernel
def descriptor_in_loop(X, Out, M, N, BM: metile.constexpr, BN: metile.constexpr):
    # Row sums of an (M, N) matrix, walking its columns block by block.
    desc = metile.make_tensor_descriptor(X, [M, N], [N, 1], [BM, BN])
    row = metile.program_id(0) * BM
    acc = metile.zeros((BM,), dtype=metile.float32)
    for col in range(0, N, BN):
        acc += metile.sum(desc.load([row, col]), axis=1)
    out = metile.make_tensor_descriptor(Out, [M], [1], [BM])
    out.store([row], acc)


def test_tensor_descriptor_used_in_a_compiled_loop(device, rng):
    m, n = 21, 50
    x = rng.standard_normal((m, n)).astype(np.float32)
    out = np.zeros(m, np.float32)
    descriptor_in_loop[(metile.cdiv(m, 8),)](x, out, m, n, BM=8, BN=16)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)


@metile.kernel
def descriptor_gemm(A, B, C, M, N, K, BM: metile.constexpr, BN: metile.constexpr, BK: metile.constexpr):
    pid_m = metile.program_id(0)
    pid_n = metile.program_id(1)
    a_desc = metile.make_tensor_descriptor(A, [M, K], [K, 1], [BM, BK])
    b_desc = metile.make_tensor_descriptor(B, [K, N], [N, 1], [BK, BN])
    acc = metile.zeros((BM, BN), dtype=metile.float32)
    for k in metile.tile_range(0, K, BK):
        acc = metile.dot(a_desc.load([pid_m * BM, k]), b_desc.load([k, pid_n * BN]), acc)
    metile.make_tensor_descriptor(C, [M, N], [N, 1], [BM, BN]).store([pid_m * BM, pid_n * BN], acc)


def test_descriptor_gemm(device, rng):
    m, n, k = 70, 45, 100
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    descriptor_gemm[(metile.cdiv(m, 32), metile.cdiv(n, 32))](a, b, c, m, n, k, BM=32, BN=32, BK=32)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_descriptor_and_block_pointer_loads_take_the_matrix_paths():
    f16_gemm = [("A", "ptr", "f16"), ("B", "ptr", "f16"), ("C", "ptr", "f32"),
                ("M", "scalar", "i32"), ("N", "scalar", "i32"), ("K", "scalar", "i32")]
    traced = _frontend.specialize(descriptor_gemm.fn, f16_gemm, {"BM": 128, "BN": 128, "BK": 64}, {})
    hopper = _metile.compile_cuda(traced, arch="sm_90", num_sgs=8)["cuda"]
    # The loads' `index >= 0` checks do not keep the tensor memory accelerator away.
    assert "A_tma0" in hopper and "B_tma1" in hopper and "wgmma" in hopper
    strides = [("stride_am", "scalar", "i32"), ("stride_bk", "scalar", "i32"), ("stride_cm", "scalar", "i32")]
    traced = _frontend.specialize(blocked_matmul.fn, f16_gemm + strides, {"BM": 64, "BN": 64, "BK": 32}, {})
    assert "simdgroup_multiply_accumulate" in _metile.compile_msl(traced).get("msl")
    assert "mma" in _metile.compile_cuda(traced, arch="sm_80")["cuda"]


# -------------------------------------------------------------- error paths


@metile.kernel
def bad_block_op(X, N, WHAT: metile.constexpr):
    block = metile.make_block_ptr(X, (N, N), (N, 1), (0, 0), (4, 4), (1, 0))
    if WHAT == "advance_rank":
        metile.advance(block, (4,))
    elif WHAT == "axis_range":
        metile.load(block, boundary_check=(0, 2))
    elif WHAT == "padding":
        metile.load(block, boundary_check=(0,), padding_option="inf")
    elif WHAT == "shared_base":
        metile.make_block_ptr(metile.shared(16), (4, 4), (4, 1), (0, 0), (4, 4), (1, 0))
    elif WHAT == "mask":
        metile.load(block, mask=metile.arange(0, 4) < N)
    elif WHAT == "store_mask":
        metile.store(block, 1.0, mask=metile.arange(0, 4) < N)
    elif WHAT == "offsets_rank":
        metile.make_block_ptr(X, (N, N), (N, 1), (0,), (4, 4), (1, 0))
    elif WHAT == "block_shape":
        metile.make_block_ptr(X, (N, N), (N, 1), (0, 0), (4, 3), (1, 0))
    elif WHAT == "order":
        metile.make_block_ptr(X, (N, N), (N, 1), (0, 0), (4, 4), (1, 1))
    elif WHAT == "not_pointer":
        metile.make_block_ptr(N, (N, N), (N, 1), (0, 0), (4, 4), (1, 0))
    elif WHAT == "pointer_tile":
        metile.make_block_ptr(X + metile.arange(0, 4), (N, N), (N, 1), (0, 0), (4, 4), (1, 0))
    elif WHAT == "float_offset":
        metile.make_block_ptr(X, (N, N), (N, 1), (0.5, 0), (4, 4), (1, 0))
    elif WHAT == "advance_tile":
        metile.advance(metile.arange(0, 4), (4,))
    elif WHAT == "check_on_pointer":
        metile.load(X + metile.arange(0, 4), boundary_check=(0,))
    elif WHAT == "desc_last_stride":
        metile.make_tensor_descriptor(X, [N, N], [1, N], [4, 4])
    elif WHAT == "desc_offsets":
        metile.make_tensor_descriptor(X, [N, N], [N, 1], [4, 4]).load([0])
    elif WHAT == "desc_store_shape":
        metile.make_tensor_descriptor(X, [N, N], [N, 1], [4, 4]).store([0, 0], metile.zeros((4,), metile.float32))
    elif WHAT == "desc_rank":
        metile.make_tensor_descriptor(X, [N, N], [N], [4, 4])
    elif WHAT == "eviction":
        metile.load(X + metile.arange(0, 4), eviction_policy="evict_sometimes")
    elif WHAT == "cache":
        metile.store(X + metile.arange(0, 4), 1.0, cache_modifier=".zz")
    elif WHAT == "shape_not_seq":
        metile.make_block_ptr(X, N, (N, 1), (0, 0), (4, 4), (1, 0))
    elif WHAT == "tile_stride":
        metile.make_block_ptr(X, (N, N), (N, metile.arange(0, 4)), (0, 0), (4, 4), (1, 0))
    elif WHAT == "block_rank":
        metile.make_block_ptr(X, (N, N), (N, 1), (0, 0), (4,), (1, 0))
    elif WHAT == "check_type":
        metile.load(block, boundary_check=("0",))
    elif WHAT == "rank0":
        metile.make_block_ptr(X, (), (), (), (), ())
    elif WHAT == "desc_rank6":
        metile.make_tensor_descriptor(X, [N] * 6, [1] * 6, [2] * 6)
    elif WHAT == "store_check_on_pointer":
        metile.store(X + metile.arange(0, 4), 1.0, boundary_check=(0,))
    elif WHAT == "created_in_loop":
        for _ in range(0, N):
            fresh = metile.make_block_ptr(X, (N, N), (N, 1), (0, 0), (2, 2), (1, 0))
        metile.load(fresh)
    elif WHAT == "if_kind":
        if metile.program_id(0) == 0:
            block = metile.make_block_ptr(X, (N, N), (N, 1), (0, 0), (2, 2), (1, 0))
        metile.load(block)
    elif WHAT == "loop_kind":
        for _ in range(0, N):
            block = metile.make_block_ptr(X, (N, N), (N, 1), (0, 0), (2, 2), (1, 0))
        metile.load(block)


@metile.kernel
def nan_padding_on_ints(X, N):
    block = metile.make_block_ptr(X, (N,), (1,), (0,), (4,), (0,))
    metile.load(block, boundary_check=(0,), padding_option="nan")


@pytest.mark.parametrize("what, message", [
    ("advance_rank", r"advance got 1 offsets for a block pointer of rank 2"),
    ("axis_range", r"boundary_check axis 2 is out of range for a block of rank 2 \(0 to 1\)"),
    ("padding", r"padding_option must be \"zero\", \"nan\" or \"\" \(zero\), got 'inf'"),
    ("shared_base", r"make_block_ptr's base points into shared memory \(metile.shared\)"),
    ("mask", r"load through a block pointer takes boundary_check and padding_option, not mask or other"),
    ("store_mask", r"store through a block pointer takes boundary_check, not mask"),
    ("offsets_rank", r"make_block_ptr's offsets has 1 entries but shape has 2"),
    ("block_shape", r"make_block_ptr's block_shape must be powers of two known when the kernel is compiled, "
                    r"got \(4, 3\)"),
    ("order", r"make_block_ptr's order must be a permutation of the axes 0..1, got \(1, 1\)"),
    ("not_pointer", r"make_block_ptr's base must be a pointer"),
    ("pointer_tile", r"make_block_ptr's base must be one pointer, not a tile of pointers of shape \(4,\)"),
    ("float_offset", r"make_block_ptr's offsets must be an int or an integer scalar, got 0.5"),
    ("advance_tile", r"advance needs a block pointer \(from metile.make_block_ptr\)"),
    ("check_on_pointer", r"boundary_check and padding_option apply to block pointers"),
    ("desc_last_stride", r"make_tensor_descriptor's last stride must be the constant 1"),
    ("desc_offsets", r"TensorDescriptor.load got 1 offsets for a descriptor of rank 2"),
    ("desc_store_shape", r"TensorDescriptor.store: the value has shape \(4,\) but the block is \(4, 4\)"),
    ("desc_rank", r"make_tensor_descriptor's strides has 1 entries but shape has 2"),
    ("eviction", r"eviction_policy must be one of \('', 'evict_first', 'evict_last'\), got 'evict_sometimes'"),
    ("cache", r"cache_modifier must be one of \('', '.ca', '.cg', '.cv', '.wb', '.cs', '.wt'\), got '.zz'"),
    ("shape_not_seq", r"make_block_ptr's shape must be a tuple or list with one entry per axis, got <metile tile"),
    ("tile_stride", r"make_block_ptr's strides must be an integer scalar, got a tile of shape \(4,\) and dtype i32"),
    ("block_rank", r"make_block_ptr's block_shape has 1 entries but the tensor has rank 2"),
    ("check_type", r"boundary_check must list axes \(ints\), got \('0',\)"),
    ("rank0", r"make_block_ptr needs a tensor of rank 1 or more, got shape=\(\)"),
    ("desc_rank6", r"make_tensor_descriptor needs a tensor of rank 1 to 5, got 6"),
    ("store_check_on_pointer", r"boundary_check applies to block pointers \(metile.make_block_ptr\); use mask="),
    ("created_in_loop", r"`fresh` is assigned inside this loop and used after it .* but has no value before the loop"),
    ("if_kind", r"`block` is a BlockPointer before an `if` on a run-time condition and must stay one of the same "
                r"block shape and dtype"),
    ("loop_kind", r"`block` is a BlockPointer before the loop and must stay one of the same block shape"),
])
def test_block_op_errors_name_the_line(what, message):
    with pytest.raises(metile.CompilationError, match=message) as e:
        bad_block_op[(1,)](np.zeros(64, np.float32), 8, WHAT=what)
    if what not in ("loop_kind", "created_in_loop", "if_kind"):  # those name the loop's or the if's line
        case = 'WHAT == "' + what + '"'
        assert f"line {line_of(bad_block_op, case) + 1}" in str(e.value)


def test_nan_padding_needs_floats():
    with pytest.raises(metile.CompilationError, match=r'padding_option="nan" needs a floating-point tensor, '
                                                      r"but this one holds i32"):
        nan_padding_on_ints[(1,)](np.zeros(4, np.int32), 4)
