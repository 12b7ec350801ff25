"""metile.testing.emu_profile: what meTile kernels do on msl-emu, counted while they run, on
kernels whose counts are known by hand (strided threadgroup copies with no, 2-way and 32-way
bank conflicts, a broadcast read, the seed GEMM's matrix products and device traffic)."""

import numpy as np
import pytest

import metile
from metile.testing import emu_profile
from metile.testing.reference_kernels import gemm

pytestmark = pytest.mark.skipif(not metile.device_available("msl-emu"), reason="no msl-emu device here")


@pytest.fixture
def emu():
    previous = metile.get_device()
    metile.set_device("msl-emu")
    yield
    metile.set_device(previous)


@metile.kernel
def strided_copy(X, Out, STRIDE: metile.constexpr, READ_STRIDE: metile.constexpr):
    """Thread t writes word t * STRIDE of threadgroup memory, then reads word (t % 2) * READ_STRIDE
    (READ_STRIDE 0: every thread word 0) or, READ_STRIDE < 0, its own word back."""
    pid = metile.program_id(0)
    tid = metile.thread_id()
    tile = metile.shared(128 * STRIDE, "f32")
    metile.store(tile + tid * STRIDE, metile.load(X + pid * 128 + tid))
    metile.barrier()
    if READ_STRIDE < 0:
        value = metile.load(tile + tid * STRIDE)
    else:
        value = metile.load(tile + (tid % 2) * READ_STRIDE)
    metile.store(Out + pid * 128 + tid, value)


def _run_strided(stride, read_stride, groups=3):
    x = np.arange(128 * groups, dtype=np.float32)
    out = np.zeros_like(x)
    with emu_profile() as profile:
        strided_copy[(groups,)](x, out, STRIDE=stride, READ_STRIDE=read_stride)
    assert len(profile.launches) == 1
    return x, out, profile.launches[0]


# Word t * stride: 1 and 33 spread a simdgroup's 32 lanes over the 32 banks, 2 puts two
# words in each of 16 banks, 32 all 32 words in bank 0.
@pytest.mark.parametrize("stride, degree", [(1, 1), (2, 2), (32, 32), (33, 1)])
def test_strided_threadgroup_accesses_have_the_bank_conflicts_counted_by_hand(emu, stride, degree):
    groups = 3
    x, out, launch = _run_strided(stride, -1, groups)
    np.testing.assert_array_equal(out, x)
    assert launch["kernel"] == "strided_copy"
    assert launch["grid"] == (groups, 1, 1)
    assert launch["threads_per_threadgroup"] == 128
    assert launch["threadgroup_memory_bytes"] == 128 * stride * 4
    assert (launch["threadgroups"], launch["threads"]) == (groups, 128 * groups)
    # One strided load per thread, 4 simdgroups: 4 instructions of `degree` wavefronts a group.
    assert (launch["threadgroup_loads"], launch["threadgroup_load_bytes"]) == (128 * groups, 512 * groups)
    assert launch["threadgroup_load_instructions"] == 4 * groups
    assert launch["threadgroup_load_wavefronts"] == 4 * degree * groups
    # The emitted code zero-fills shared memory first (stride stores of consecutive words per
    # thread, conflict-free), then the strided store.
    assert launch["threadgroup_stores"] == 128 * (stride + 1) * groups
    assert launch["threadgroup_store_instructions"] == 4 * (stride + 1) * groups
    assert launch["threadgroup_store_wavefronts"] == 4 * (stride + degree) * groups
    assert (launch["device_loads"], launch["device_load_bytes"]) == (128 * groups, 512 * groups)
    assert (launch["device_stores"], launch["device_store_bytes"]) == (128 * groups, 512 * groups)
    # A barrier before and after the fill, and the kernel's own.
    assert launch["threadgroup_barriers"] == 3 * groups
    assert launch["divergent_intervals"] == launch["unpaired_threadgroup_accesses"] == 0
    assert launch["simdgroup_mma"] == launch["matmul2d_runs"] == 0
    # By site: the zero fill, the strided store and the strided load, at their kernel lines.
    sites = {(site["source"], site["store"]): site for site in launch["threadgroup_sites"]}
    line = strided_copy.fn.__code__.co_firstlineno
    store = sites[(f"test_emu_profile.py:{line + 7}", True)]
    load = sites[(f"test_emu_profile.py:{line + 10}", False)]
    assert (store["instructions"], store["wavefronts"], store["min_wavefronts"]) == (
        4 * groups, 4 * degree * groups, 4 * groups)
    assert (load["instructions"], load["wavefronts"]) == (4 * groups, 4 * degree * groups)
    fill = [site for site in launch["threadgroup_sites"] if site is not store and site is not load]
    assert sum(site["wavefronts"] for site in fill) == 4 * stride * groups
    assert all(site["store"] for site in fill)
    wavefronts = 4 * (stride + 2 * degree) * groups
    assert launch["bank_conflict_ratio"] == pytest.approx(wavefronts / (4 * (stride + 2) * groups))


def test_a_broadcast_read_costs_one_wavefront(emu):
    groups = 2
    x, out, launch = _run_strided(1, 0, groups)
    np.testing.assert_array_equal(out, np.repeat(x[::128], 128))
    assert launch["threadgroup_load_wavefronts"] == launch["threadgroup_load_instructions"] == 4 * groups
    # Words 0 and 32 (bank 0) for even and odd threads: two words, two wavefronts, not 32.
    x, out, launch = _run_strided(32, 32, groups)
    np.testing.assert_array_equal(out, x.reshape(groups, 64, 2)[:, :1, :].repeat(64, 1).reshape(-1))
    assert launch["threadgroup_load_instructions"] == 4 * groups
    assert launch["threadgroup_load_wavefronts"] == 2 * 4 * groups


# The simdgroups each own part of the 32x32 tile: 16 8x8 atoms over 4, or 2 16x32 atoms over 2
# (more simdgroups than atoms would repeat products).
@pytest.mark.parametrize("dtype, arch, atom, sgs", [("float32", "apple", "simdgroup_mma", 4),
                                                    ("float16", "apple", "simdgroup_mma", 4),
                                                    ("float16", "apple10", "matmul2d_runs", 2)])
def test_gemm_matrix_products_and_device_traffic(emu, dtype, arch, atom, sgs):
    m, n, k, block = 64, 96, 80, (32, 32, 16)
    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (m, k)).astype(dtype)
    b = rng.integers(-3, 4, (k, n)).astype(dtype)
    c = np.zeros((m, n), np.float32)
    grid = (m // block[0], n // block[1])
    with emu_profile() as profile:
        gemm[grid](a, b, c, m, n, k, BLOCK_M=block[0], BLOCK_N=block[1], BLOCK_K=block[2], arch=arch,
                   num_sgs=sgs)
    np.testing.assert_array_equal(c, a.astype(np.float32) @ b.astype(np.float32))
    total = profile.total("gemm")
    assert total["launches"] == 1
    # One 8x8x8 product (simdgroup matrix) or 16x32x16 (matmul2d) per atom.
    atom_macs = 8 * 8 * 8 if atom == "simdgroup_mma" else 16 * 32 * 16
    assert total[atom] == m * n * k // atom_macs
    # Every program reads its rows of A and columns of B once, and writes its tile of C.
    size = np.dtype(dtype).itemsize
    programs = grid[0] * grid[1]
    assert total["device_load_bytes"] == programs * (block[0] * k + k * block[1]) * size
    assert total["device_store_bytes"] == m * n * 4
    assert total["threadgroups"] == programs
    # Two barriers per step of k.
    assert total["threadgroup_barriers"] == programs * 2 * (k // block[2])


def test_launches_outside_the_block_are_not_counted(emu):
    x = np.arange(128, dtype=np.float32)
    out = np.zeros_like(x)
    strided_copy[(1,)](x, out, STRIDE=1, READ_STRIDE=-1)
    with emu_profile() as profile:
        pass
    assert profile.launches == []
    with emu_profile() as profile:
        strided_copy[(1,)](x, out, STRIDE=1, READ_STRIDE=-1)
        strided_copy[(2,)](np.tile(x, 2), np.zeros(256, np.float32), STRIDE=2, READ_STRIDE=-1)
    assert [launch["grid"] for launch in profile.launches] == [(1, 1, 1), (2, 1, 1)]
    assert profile.total()["threadgroups"] == 3
    assert profile.total("nothing")["launches"] == 0


def test_profiling_needs_the_msl_emu_device():
    previous = metile.get_device()
    metile.set_device("cpu")
    try:
        with pytest.raises(ValueError, match=r"^emu_profile counts what kernels do on the msl-emu device; "
                                             r"the current device is cpu \(metile.set_device\('msl-emu'\) first\)$"):
            with emu_profile():
                pass
    finally:
        metile.set_device(previous)


def test_profiles_do_not_nest_and_an_exception_ends_one(emu):
    with pytest.raises(KeyError):
        with emu_profile():
            with pytest.raises(RuntimeError, match=r"^msl-emu launches are already being profiled "
                                                   r"\(profiles do not nest\)$"):
                with emu_profile():
                    pass
            raise KeyError("inside the block")
    with emu_profile() as profile:
        pass
    assert profile.launches == []
