"""meTile kernels as PyTorch operators: `torch.library.custom_op` around a launcher.

    @metile.torch.custom_op("mylib::rmsnorm", mutates_args=(), outputs="x")
    def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rmsnorm_kernel[(x.shape[0],)](x, w, out, x.shape[1], eps, BLOCK=256)
        return out

The decorated function is the *launcher*: it allocates the outputs and launches
meTile kernels on the tensors it is given. The result is torch's own operator
object (`torch.library.CustomOpDef`): calling it dispatches through torch, so
it works under `torch.compile(fullgraph=True)` with no graph break (the
compiler sees the operator, not the launcher), `torch.library.opcheck` passes
on it, and `register_autograd` / `register_kernel` / `register_fake` are
torch's.

What this adds to `torch.library.custom_op`:

* the metile device follows the tensors: a launch on CUDA tensors runs on the
  `cuda` device, one on CPU tensors on the current host device (`cpu` or
  `msl-emu`, `cpu` while the current device is `cuda` or `metal`), whatever
  `metile.set_device` chose, and the previous device is current again after;
* a fake (meta) implementation, which `torch.compile` needs to trace shapes,
  derived from ``outputs=`` — the name of the input each output is shaped
  like (``"x"``, or a tuple of names for several outputs), or a function of
  the inputs that returns empty outputs — or given as ``fake=``; an operator
  that returns nothing (it only mutates its arguments) needs neither;
* ``launchers={"cuda": f}``: a launcher for one torch device type in place of
  the decorated one (other block sizes, another kernel), with the same device
  handling;
* ``backward=`` / ``setup_context=``: the autograd formula, registered with
  `register_autograd`.

This module imports torch; `import metile` does not import it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

import metile

__all__ = ["custom_op"]

_HOST_DEVICES = ("cpu", "msl-emu")


def _metile_device_for(device_type: str, current: str) -> str:
    """The metile device that runs a launch on tensors of torch `device_type`."""
    if device_type == "cuda":
        return "cuda"
    if device_type == "cpu":
        return current if current in _HOST_DEVICES else "cpu"
    raise ValueError(
        f"metile.torch: tensors on torch device type {device_type!r} cannot be passed to a meTile "
        "kernel; use 'cpu' or 'cuda' tensors"
    )


def _first_tensor(values: Iterable[Any]) -> torch.Tensor | None:
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, (list, tuple)):
            found = _first_tensor(value)
            if found is not None:
                return found
    return None


def _on_tensor_device(launcher: Callable[..., Any]) -> Callable[..., Any]:
    """`launcher`, run with the metile device that reads its tensors' memory."""

    @functools.wraps(launcher)
    def run(*args: Any, **kwargs: Any) -> Any:
        tensor = _first_tensor((*args, *kwargs.values()))
        current = metile.get_device()
        wanted = current if tensor is None else _metile_device_for(tensor.device.type, current)
        if wanted == current:
            return launcher(*args, **kwargs)
        metile.set_device(wanted)
        try:
            return launcher(*args, **kwargs)
        finally:
            metile.set_device(current)

    return run


def _fake_from_outputs(
    outputs: str | Sequence[str] | Callable[..., Any], signature: inspect.Signature, name: str
) -> Callable[..., Any]:
    """A fake implementation that allocates outputs as `outputs` declares."""
    if callable(outputs):
        return outputs
    names = (outputs,) if isinstance(outputs, str) else tuple(outputs)
    for like in names:
        if not isinstance(like, str) or like not in signature.parameters:
            raise ValueError(
                f"metile.torch.custom_op({name!r}): outputs= names the inputs the outputs are shaped like, "
                f"but {like!r} is not a parameter of the launcher (parameters: "
                f"{', '.join(signature.parameters)})"
            )

    def fake(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        made = tuple(torch.empty_like(bound.arguments[like]) for like in names)
        return made[0] if isinstance(outputs, str) else made

    return fake


def _returns_nothing(signature: inspect.Signature) -> bool:
    return signature.return_annotation in (None, "None")


def custom_op(
    name: str,
    launcher: Callable[..., Any] | None = None,
    /,
    *,
    mutates_args: str | Iterable[str],
    outputs: str | Sequence[str] | Callable[..., Any] | None = None,
    fake: Callable[..., Any] | None = None,
    launchers: Mapping[str, Callable[..., Any]] | None = None,
    backward: Callable[..., Any] | None = None,
    setup_context: Callable[..., Any] | None = None,
    device_types: str | Sequence[str] | None = None,
    schema: str | None = None,
) -> Any:
    """Registers `launcher` as the torch operator `name` ("namespace::op").

    Used as a decorator (``@custom_op("ns::op", mutates_args=())``) or called
    with the launcher. The launcher's type annotations give the operator's
    schema, as for `torch.library.custom_op` (or pass ``schema=``);
    ``mutates_args`` names the arguments it writes ("unknown" for any). See
    the module's documentation for ``outputs``, ``fake``, ``launchers``,
    ``backward`` and ``setup_context``. Returns torch's `CustomOpDef`.
    """
    if launcher is None:
        return functools.partial(
            custom_op,
            name,
            mutates_args=mutates_args,
            outputs=outputs,
            fake=fake,
            launchers=launchers,
            backward=backward,
            setup_context=setup_context,
            device_types=device_types,
            schema=schema,
        )
    if not callable(launcher):
        raise TypeError(f"metile.torch.custom_op({name!r}): the launcher must be a function, got {launcher!r}")
    if outputs is not None and fake is not None:
        raise ValueError(
            f"metile.torch.custom_op({name!r}): give outputs= (a fake implementation is derived from it) "
            "or fake=, not both"
        )
    if setup_context is not None and backward is None:
        raise ValueError(f"metile.torch.custom_op({name!r}): setup_context= needs backward=")
    signature = inspect.signature(launcher)
    if schema is None:
        schema = torch.library.infer_schema(launcher, mutates_args=mutates_args)
    op = torch.library.custom_op(
        name, _on_tensor_device(launcher), mutates_args=mutates_args, device_types=device_types, schema=schema
    )
    for device_type, per_device in (launchers or {}).items():
        op.register_kernel(device_type)(_on_tensor_device(per_device))
    if fake is None and outputs is not None:
        fake = _fake_from_outputs(outputs, signature, name)
    if fake is None and _returns_nothing(signature):

        def fake(*args: Any, **kwargs: Any) -> None:
            return None

    if fake is not None:
        op.register_fake(fake)
    if backward is not None:
        op.register_autograd(backward, setup_context=setup_context)
    return op
