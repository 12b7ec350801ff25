"""Host overhead of a meTile kernel called as a torch operator (`metile.torch.custom_op`)
beside the same kernel launched directly, and beside a Triton kernel wrapped with
`torch.library.triton_op` (where Triton and a GPU are present), in one process.

    python benchmarks/torch_custom_op.py            # cuda tensors where there is a GPU, else cpu
    python benchmarks/torch_custom_op.py --device cpu

Each row is the best of 5 batches of the mean host time per call of a tiny add
(one program), after warming up; on cuda the calls only enqueue work, so this is
what a call costs the Python thread. "torch.compile" rows call the operator from
a function compiled with `fullgraph=True`. Nothing is asserted.
"""

import argparse
import time

import torch

import metile
import metile.torch
from metile.testing import reference_kernels as rk

N = 1024


@metile.torch.custom_op("metile_bench::add", mutates_args=(), outputs="x")
def metile_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    rk.add[(1,)](x, y, out, x.numel(), BLOCK=N)
    return out


def _triton_add():
    """`torch.library.triton_op` around a Triton add, or None without Triton."""
    try:
        import triton
        import triton.language as tl
        from torch.library import triton_op, wrap_triton
    except ImportError:
        return None

    @triton.jit
    def add_kernel(X, Y, Out, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < N
        tl.store(Out + offs, tl.load(X + offs, mask=mask) + tl.load(Y + offs, mask=mask), mask=mask)

    @triton_op("metile_bench::triton_add", mutates_args=())
    def triton_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        wrap_triton(add_kernel)[(1,)](x, y, out, x.numel(), BLOCK=N)
        return out

    return triton_add


def _host_us(call, sync, reps=2000):
    for _ in range(100):
        call()
    sync()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            call()
        elapsed = time.perf_counter() - start
        sync()
        best = min(best, elapsed / reps * 1e6)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        default="cuda" if torch.cuda.is_available() and metile.device_available("cuda") else "cpu")
    args = parser.parse_args()
    device = args.device
    if device == "cuda":
        metile.set_device("cuda")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    x = torch.randn(N, device=device)
    y = torch.randn(N, device=device)
    out = torch.empty_like(x)
    torch.testing.assert_close(metile_add(x, y), x + y)

    calls = {
        "meTile kernel, direct launch": lambda: rk.add[(1,)](x, y, out, N, BLOCK=N),
        "meTile custom_op, eager": lambda: metile_add(x, y),
        "meTile custom_op, torch.compile": torch.compile(lambda: metile_add(x, y), fullgraph=True),
        "torch.add(out=)": lambda: torch.add(x, y, out=out),
    }
    triton_add = _triton_add() if device == "cuda" else None
    if triton_add is not None:
        torch.testing.assert_close(triton_add(x, y), x + y)
        calls["Triton triton_op, eager"] = lambda: triton_add(x, y)
        calls["Triton triton_op, torch.compile"] = torch.compile(lambda: triton_add(x, y), fullgraph=True)
    else:
        print("(no Triton rows: Triton and a CUDA GPU are needed)")
    reps = 2000 if device == "cuda" else 200
    print(f"host time per call, tiny add of {N} f32, torch {device} tensors, metile device {metile.get_device()}")
    print("| call | µs per call |")
    print("|---|---|")
    for name, call in calls.items():
        print(f"| {name} | {_host_us(call, sync, reps):.1f} |")


if __name__ == "__main__":
    main()
