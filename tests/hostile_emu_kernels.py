"""Kernels for tests/test_hostile_emu.py, imported by its isolated processes (meTile reads a
kernel's source from its file)."""

import metile


@metile.kernel
def shifted_copy(X, Out, N, LOAD_SHIFT, STORE_SHIFT, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    x = metile.load(X + offs + LOAD_SHIFT)
    metile.store(Out + offs + STORE_SHIFT, x, mask=offs < N)


@metile.kernel
def shared_shift(Out, SHIFT):
    tid = metile.thread_id()
    tile = metile.shared(256, "f32")
    metile.store(tile + tid, 1.0)
    metile.barrier()
    metile.store(Out + tid, metile.load(tile + tid + SHIFT))


def expect_index_error(launch):
    try:
        launch()
    except IndexError as e:
        print("IndexError:", str(e))
    else:
        raise SystemExit("no IndexError")
