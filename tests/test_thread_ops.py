"""Thread-level operations (thread_id, simd lanes, shuffles, shared memory,
barriers, simdgroup roles) against their documented semantics, on every backend."""

import numpy as np
import pytest

import metile


@metile.kernel
def shuffle_tree_sum(X, Out):
    tid = metile.thread_id()
    x = metile.load(X + metile.program_id(0) * 128 + tid)
    for mask in (16, 8, 4, 2, 1):
        x = x + metile.simd_shuffle_xor(x, mask)
    lane = metile.simd_lane_id()
    metile.store(Out + metile.program_id(0) * 4 + tid // 32, x, mask=lane == 0)


@metile.kernel
def broadcast_lane(X, Out, LANE: metile.constexpr):
    tid = metile.thread_id()
    x = metile.load(X + tid)
    metile.store(Out + tid, metile.simd_broadcast(x, LANE))


@metile.kernel
def shared_transpose(X, Out, SIDE: metile.constexpr):
    tid = metile.thread_id()
    r = tid // SIDE
    c = tid % SIDE
    tile = metile.shared(SIDE * SIDE, "f32")
    metile.store(tile + c * SIDE + r, metile.load(X + tid))
    metile.barrier()
    metile.store(Out + tid, metile.load(tile + tid))


@metile.kernel
def two_roles(A, B, Out1, Out2, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    with metile.simdgroup_role(role=0, num_roles=2):
        metile.store(Out1 + offs, metile.load(A + offs) * 2.0)
    with metile.simdgroup_role(role=1, num_roles=2):
        metile.store(Out2 + offs, metile.load(B + offs) + 1.0)


def test_shuffle_xor_tree_reduction(device, rng):
    x = rng.integers(-50, 50, 256).astype(np.float32)
    out = np.zeros(8, np.float32)
    shuffle_tree_sum[(2,)](x, out)
    np.testing.assert_array_equal(out, x.reshape(8, 32).sum(1))


@pytest.mark.parametrize("lane", [0, 5, 31])
def test_simd_broadcast(device, rng, lane):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.zeros_like(x)
    broadcast_lane[(1,)](x, out, LANE=lane)
    np.testing.assert_array_equal(out, np.repeat(x.reshape(4, 32)[:, lane], 32))


def test_shared_memory_transpose(device, rng):
    x = rng.standard_normal(256).astype(np.float32)
    out = np.zeros_like(x)
    shared_transpose[(1,)](x, out, SIDE=16, num_sgs=8)
    np.testing.assert_array_equal(out.reshape(16, 16), x.reshape(16, 16).T)


def test_two_roles_write_two_outputs(device, rng):
    a = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    o1, o2 = np.zeros_like(a), np.zeros_like(b)
    two_roles[(1,)](a, b, o1, o2, BLOCK=64)
    np.testing.assert_array_equal(o1, a * 2)
    np.testing.assert_array_equal(o2, b + 1)


def test_thread_values_have_one_element_per_thread():
    @metile.kernel
    def mixed(X):
        metile.store(X + metile.arange(0, 64), metile.thread_id())

    with pytest.raises(metile.CompilationError, match=r"\[64\] and \[128\]"):
        mixed[(1,)](np.zeros(64, np.int32))


@metile.kernel
def thread_ids_inside_a_role(Out):
    with metile.simdgroup_role(role=1, num_roles=2):
        metile.store(Out + metile.thread_id(), metile.thread_id())


def test_thread_level_stores_inside_a_role_are_refused_on_every_backend(device):
    with pytest.raises(metile.CompilationError) as info:
        thread_ids_inside_a_role[(1,)](np.zeros(128, np.int32))
    msg = str(info.value)
    assert "cannot compile `store`" in msg and "inside simdgroup_role" in msg
    assert "metile.store(Out + metile.thread_id(), metile.thread_id())" in msg


@metile.kernel
def producer_consumer(X, Out, BLOCK: metile.constexpr):
    staged = metile.shared(BLOCK, "f32")
    with metile.simdgroup_role(role=0, num_roles=2):
        offs = metile.arange(0, BLOCK)
        metile.store(staged + offs, metile.load(X + offs) * 3.0)
    metile.barrier()
    with metile.simdgroup_role(role=1, num_roles=2):
        offs = metile.arange(0, BLOCK)
        metile.store(Out + offs, metile.load(staged + offs) + 1.0)


def test_roles_hand_data_over_through_shared_memory(device, rng):
    x = rng.standard_normal(96).astype(np.float32)
    out = np.zeros_like(x)
    producer_consumer[(1,)](x, out, BLOCK=96)
    np.testing.assert_array_equal(out, x * np.float32(3) + np.float32(1))
