"""A kernel's parameters: their names, in order, which are constexprs, and the
dtypes their annotations declare."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

from metile import language
from metile.language import constexpr

_DOTTED_CONSTEXPR = re.compile(r"^\s*(?:[A-Za-z_]\w*\s*\.\s*)*constexpr\s*$")


def _closure_vars(fn: Callable) -> dict[str, object]:
    cells = getattr(fn, "__closure__", None) or ()
    values: dict[str, object] = {}
    for name, cell in zip(fn.__code__.co_freevars, cells):
        try:
            values[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return values


def is_constexpr_annotation(annotation: object, fn: Callable) -> bool:
    """`metile.constexpr`, also as a string (`from __future__ import annotations`):
    evaluated in the kernel's namespace, or any dotted name ending in `constexpr`."""
    if annotation is constexpr or isinstance(annotation, constexpr):
        return True
    if not isinstance(annotation, str):
        return False
    try:
        value = eval(annotation, fn.__globals__, _closure_vars(fn))
    except Exception:  # noqa: BLE001 - an annotation may raise anything; fall back to its text
        value = None
    if value is constexpr:
        return True
    return bool(_DOTTED_CONSTEXPR.match(annotation))


def analyze_signature(fn: Callable) -> tuple[list[str], list[bool]]:
    """Parameter names in order and which are constexprs. Refuses `*args`,
    `**kwargs`, keyword-only parameters and defaults on run-time parameters."""
    if not inspect.isfunction(fn):
        raise TypeError(f"@metile.kernel decorates a Python function, got {type(fn).__name__}")
    names: list[str] = []
    flags: list[bool] = []
    for p in inspect.signature(fn).parameters.values():
        where = f"kernel {fn.__name__}: parameter '{p.name}'"
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{where}: kernels take a fixed list of parameters, not *args or **kwargs")
        if p.kind is p.KEYWORD_ONLY:
            raise TypeError(
                f"{where} is keyword-only; list it before any `*` (constexprs are passed by keyword anyway)"
            )
        is_constexpr = is_constexpr_annotation(p.annotation, fn)
        if p.default is not p.empty and not is_constexpr:
            raise TypeError(
                f"{where} has a default value; only metile.constexpr parameters may have defaults"
            )
        names.append(p.name)
        flags.append(is_constexpr)
    return names, flags


_DTYPE_NAMES = frozenset(
    getattr(language, name)
    for name in (
        "bool_",
        "int8",
        "uint8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float8e4nv",
        "float8e5",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    )
)


def declared_dtype(annotation: object, fn: Callable) -> str | None:
    """The dtype a run-time parameter's annotation declares (`X: metile.float8e4nv`):
    a dtype value, or the text of an expression naming one (`from __future__ import
    annotations`); None for anything else."""
    if isinstance(annotation, str) and annotation in _DTYPE_NAMES:
        return annotation
    if not isinstance(annotation, str):
        return None
    try:
        value = eval(annotation, fn.__globals__, _closure_vars(fn))
    except Exception:  # noqa: BLE001 - an annotation may raise anything; it then declares nothing
        return None
    return value if isinstance(value, str) and value in _DTYPE_NAMES else None


def declared_dtypes(fn: Callable) -> list[str | None]:
    """The declared dtype of each parameter, in order (None where there is none)."""
    return [
        None if is_constexpr_annotation(p.annotation, fn) else declared_dtype(p.annotation, fn)
        for p in inspect.signature(fn).parameters.values()
    ]
