"""meTile kernels as PyTorch operators inside `torch.compile(fullgraph=True)`.

Two operators: an RMSNorm and a linear layer whose GEMM applies its bias and a
GELU in the epilogue, both with autograd formulas, used by a small
`nn.Module` that is compiled with no graph break and checked against eager
PyTorch. Runs on the CPU (`cpu` or `msl-emu`) and on CUDA tensors (`cuda`):

    python examples/torch_custom_op.py            # cpu tensors
    python examples/torch_custom_op.py cuda       # cuda tensors
"""

from __future__ import annotations

import math
import sys

import torch

import metile
import metile.torch

_GELU_C = math.sqrt(2.0 / math.pi)


@metile.kernel
def rmsnorm_kernel(X, W, Out, N, eps, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    sq = 0.0
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        x = metile.load(X + row * N + cols, mask=cols < N)
        sq = sq + x * x
    rms = metile.sqrt(metile.sum(sq) / N + eps)
    for i in metile.tile_range(0, N, BLOCK):
        cols = i + metile.arange(0, BLOCK)
        mask = cols < N
        x = metile.load(X + row * N + cols, mask=mask)
        w = metile.load(W + cols, mask=mask)
        metile.store(Out + row * N + cols, x / rms * w, mask=mask)


@metile.kernel
def linear_gelu_kernel(A, B, Bias, C, M, N, K, BLOCK_M: metile.constexpr, BLOCK_N: metile.constexpr,
                       BLOCK_K: metile.constexpr):
    rows = metile.program_id(0) * BLOCK_M + metile.arange(0, BLOCK_M)
    cols = metile.program_id(1) * BLOCK_N + metile.arange(0, BLOCK_N)
    acc = metile.zeros((BLOCK_M, BLOCK_N), dtype="f32")
    for k in metile.tile_range(0, K, BLOCK_K):
        ks = k + metile.arange(0, BLOCK_K)
        a = metile.load(A + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K),
                        other=0.0)
        b = metile.load(B + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N),
                        other=0.0)
        acc = metile.dot(a, b, acc)
    # The epilogue: bias and GELU (tanh form) on the accumulator, before the store.
    acc = acc + metile.load(Bias + cols, mask=cols < N, other=0.0)[None, :]
    acc = 0.5 * acc * (1.0 + metile.tanh(_GELU_C * (acc + 0.044715 * acc * acc * acc)))
    metile.store(C + rows[:, None] * N + cols[None, :], acc,
                 mask=(rows[:, None] < M) & (cols[None, :] < N))


def _rmsnorm_backward(ctx, grad):
    x, w = ctx.saved_tensors
    inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
    gw = grad * w
    grad_x = inv * gw - x * inv.pow(3) * (gw * x).mean(-1, keepdim=True)
    grad_w = (grad * x * inv).sum(0)
    return grad_x, grad_w, None


def _rmsnorm_setup(ctx, inputs, output):
    x, w, eps = inputs
    ctx.save_for_backward(x, w)
    ctx.eps = eps


@metile.torch.custom_op("metile_examples::rmsnorm", mutates_args=(), outputs="x",
                        backward=_rmsnorm_backward, setup_context=_rmsnorm_setup)
def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x, w = x.contiguous(), w.contiguous()
    out = torch.empty_like(x)
    rows, n = x.shape
    rmsnorm_kernel[(rows,)](x, w, out, n, eps, BLOCK=min(1024, next_pow2(n)))
    return out


def _gelu_grad(pre):
    inner = _GELU_C * (pre + 0.044715 * pre.pow(3))
    t = torch.tanh(inner)
    return 0.5 * (1 + t) + 0.5 * pre * (1 - t * t) * _GELU_C * (1 + 3 * 0.044715 * pre * pre)


def _linear_gelu_backward(ctx, grad):
    x, w, b = ctx.saved_tensors
    grad_pre = grad * _gelu_grad(x @ w + b)
    return grad_pre @ w.T, x.T @ grad_pre, grad_pre.sum(0)


def _linear_gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


@metile.torch.custom_op("metile_examples::linear_gelu", mutates_args=(),
                        outputs=lambda x, w, b: x.new_empty(x.shape[0], w.shape[1]),
                        backward=_linear_gelu_backward, setup_context=_linear_gelu_setup)
def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
    (m, k), n = x.shape, w.shape[1]
    out = x.new_empty(m, n)
    blocks = 32
    linear_gelu_kernel[(metile.cdiv(m, blocks), metile.cdiv(n, blocks))](
        x, w, b, out, m, n, k, BLOCK_M=blocks, BLOCK_N=blocks, BLOCK_K=32)
    return out


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class Block(torch.nn.Module):
    """RMSNorm, then a linear layer with a GELU, then a residual add (plain torch)."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.norm_weight = torch.nn.Parameter(torch.ones(width) + 0.1 * torch.randn(width))
        self.w = torch.nn.Parameter(torch.randn(width, hidden) / math.sqrt(width))
        self.b = torch.nn.Parameter(0.1 * torch.randn(hidden))
        self.out = torch.nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = rmsnorm(x, self.norm_weight, 1e-6)
        return x + self.out(linear_gelu(h, self.w, self.b))

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same block in eager PyTorch ops."""
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight
        return x + self.out(torch.nn.functional.gelu(h @ self.w + self.b, approximate="tanh"))


def main(device: str = "cpu") -> None:
    torch.manual_seed(0)
    block = Block(96, 200).to(device)
    x = torch.randn(37, 96, device=device)
    compiled = torch.compile(block, fullgraph=True)
    got, want = compiled(x), block.reference(x)
    error = (got - want).abs().max().item()
    print(f"compiled block on {device} (metile device {metile.get_device()}): max error {error:.2e}")
    assert error < 1e-4, error
    got.sum().backward()
    print("gradients:", {name: tuple(p.grad.shape) for name, p in block.named_parameters()})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
