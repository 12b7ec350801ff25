"""The tracing driver: one kernel specialisation from a Python function."""

from __future__ import annotations

import inspect
import os
import sys
import weakref
from collections.abc import Callable

from metile import _metile
from metile._frontend.rewrite import cached_factory, cell_values, kernel_package, rewrite
from metile._frontend.signature import analyze_signature
from metile._frontend.unsupported import traced_recursion_error, traced_type_error

_SIGNATURES: weakref.WeakKeyDictionary[Callable, tuple[list[str], list[bool]]] = weakref.WeakKeyDictionary()


def _rewrite_kernel(fn: Callable) -> Callable[..., Callable]:
    try:
        return rewrite(fn)
    except OSError as e:
        raise _metile.CompilationError(
            f"cannot read the source of kernel {fn.__name__} ({e}); kernels must be defined in a "
            "file (not typed at an interactive prompt or built with exec) so meTile can compile them"
        ) from None


# Kernels' rewrites, apart from helpers' (a kernel's source is checked, a helper's is not).
_KERNELS: dict = {}


def _factory(fn: Callable) -> Callable[..., Callable]:
    return cached_factory(fn, _rewrite_kernel, _KERNELS)


def _signature(fn: Callable) -> tuple[list[str], list[bool]]:
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = analyze_signature(fn)
    return sig


def debug_enabled(stage: str) -> bool:
    """Whether METILE_DEBUG (a comma list, or "all") asks to print `stage`."""
    wanted = os.environ.get("METILE_DEBUG")
    if not wanted:
        return False
    parts = {p.strip() for p in wanted.split(",")}
    return stage in parts or "all" in parts


def check_debug_names(wanted: str) -> None:
    """Refuses a METILE_DEBUG value that names something the compiler does not print
    (a misspelt stage would otherwise print nothing, silently)."""
    known = _metile.debug_names()
    for part in wanted.split(","):
        name = part.strip()
        if name and name not in known:
            raise ValueError(
                f"METILE_DEBUG names an unknown stage {name!r}; it takes a comma list of {', '.join(known)}"
            )


def _constexpr_value(fn: Callable, name: str, constexprs: dict[str, object]) -> object:
    if name in constexprs:
        return constexprs[name]
    default = inspect.signature(fn).parameters[name].default
    if default is inspect.Parameter.empty:
        raise TypeError(f"kernel {fn.__name__} is missing the constexpr '{name}'; pass it by keyword")
    return default


def specialize(
    fn: Callable,
    runtime_params: list[tuple],
    constexprs: dict[str, object],
    options: dict[str, object],
) -> _metile.TileFunction:
    """Traces one specialisation of `fn` into verified, optimised Tile IR.

    runtime_params: (name, "ptr" | "scalar" | "one", dtype[, divisibility]) for
    each non-constexpr parameter, in order (a scalar's divisibility: what every
    launch's value is a multiple of; "one": an integer equal to 1 at every
    launch, traced as the constant). constexprs: name -> Python value. options:
    "threads_per_group" (default 128) and "optimize" (default True).
    """
    wanted = os.environ.get("METILE_DEBUG")
    if wanted:
        check_debug_names(wanted)
    names, is_constexpr = _signature(fn)
    kernel = _factory(fn)(*cell_values(fn))
    runtime = iter(runtime_params)
    params: list[tuple[str, str, object]] = []
    for name, constant in zip(names, is_constexpr):
        if constant:
            params.append((name, "constexpr", _constexpr_value(fn, name, constexprs)))
            continue
        given = next(runtime, None)
        if given is None or given[0] != name:
            raise TypeError(f"kernel {fn.__name__}: expected run-time parameter '{name}', got {given!r}")
        params.append((name, *given[1:]))
    threads = options.get("threads_per_group", 128)
    optimize = options.get("optimize", True)
    try:
        with kernel_package(fn):
            func = _metile.trace_kernel(kernel, fn.__name__, params, threads, optimize, wanted)
    except RecursionError as e:
        raise traced_recursion_error(fn.__name__, e) from None
    except TypeError as e:
        converted = traced_type_error(fn.__name__, e)
        if converted is e:
            raise
        raise converted from e
    if wanted and debug_enabled("tile_ir"):
        print(f"// Tile IR of {fn.__name__}\n{func.text}", file=sys.stderr)
    return func
