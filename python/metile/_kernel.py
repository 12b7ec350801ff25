"""The `@metile.kernel` decorator: reads the signature once and hands the
function to the Rust kernel object, which owns binding, caching and launch."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import overload

from metile import _frontend
from metile._metile import Kernel


@overload
def kernel(fn: Callable, /) -> Kernel: ...
@overload
def kernel(fn: None = None, /) -> Callable[[Callable], Kernel]: ...


def kernel(fn: Callable | None = None, /) -> Kernel | Callable[[Callable], Kernel]:
    """Marks `fn` as a meTile kernel; launch it with `fn[grid](*args, **constexprs)`."""
    if fn is None:
        return kernel
    if isinstance(fn, Kernel):
        return fn
    if not callable(fn):
        raise TypeError(f"@metile.kernel decorates a function, got {type(fn).__name__}")
    names, is_constexpr = _frontend.analyze_signature(fn)
    defaults = {
        name: p.default
        for name, p in inspect.signature(fn).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    return Kernel(
        fn,
        fn.__name__,
        names,
        is_constexpr,
        _frontend.specialize,
        defaults,
        _frontend.captures,
        _frontend.declared_dtypes(fn),
    )
