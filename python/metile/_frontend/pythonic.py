"""Python's own operators and builtins on traced values: what the control-flow
rewrite calls for `and`, `or`, `not`, `x if c else y`, `assert`, and the
builtins `min`, `max` and `print` (docs/semantics.md, "Python on traced values").

On Python values (constexprs, ints, lists) each keeps Python's semantics,
short-circuit included, so trace-time logic is untouched. On a traced value
the run-time answer is computed instead: both sides are evaluated (a compiled
program has no short-circuit; as in Triton, guard loads with their mask).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from types import BuiltinFunctionType
from typing import Any

from metile import _metile

_Tile = _metile.Tile


def bool_and(first: Any, rest: Callable[[], Any]) -> Any:
    """`first and rest()`: Python's on a Python `first`; on a traced one, the
    element-wise logical and of both (a bool tile)."""
    if not isinstance(first, _Tile):
        return rest() if first else first
    return _metile.logical_and(first, rest())


def bool_or(first: Any, rest: Callable[[], Any]) -> Any:
    """`first or rest()`, as `bool_and`."""
    if not isinstance(first, _Tile):
        return first if first else rest()
    return _metile.logical_or(first, rest())


def bool_not(value: Any) -> Any:
    """`not value`; on a traced value, the element-wise logical not."""
    if isinstance(value, _Tile):
        return _metile.logical_not(value)
    return not value


def conditional(cond: Any, then: Callable[[], Any], otherwise: Callable[[], Any]) -> Any:
    """`then() if cond else otherwise()`; on a traced `cond`, `metile.where(cond,
    then(), otherwise())` with both sides evaluated."""
    if not isinstance(cond, _Tile):
        return then() if cond else otherwise()
    return _metile.where(cond, then(), otherwise())


def checked(cond: Any, message: Callable[[], Any] | None) -> Any:
    """The test of a rewritten `assert cond, message`: a traced `cond` becomes a
    `device_assert` (and the statement then passes); a Python one is returned
    for the `assert` statement itself to check."""
    if not isinstance(cond, _Tile):
        return cond
    text = message() if message is not None else ""
    _metile.device_assert(cond, text if isinstance(text, str) else str(text))
    return True


def _extreme(name: str, combine: Callable[[Any, Any], Any], builtin: Callable) -> Callable:
    def pick(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and isinstance(args[0], _Tile):
            raise TypeError(f"{name}() of one tile would iterate over it; reduce it with metile.{name}(x)")
        values = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
        if kwargs or not values or not any(isinstance(v, _Tile) for v in values):
            return builtin(*args, **kwargs)
        result = values[0]
        for value in values[1:]:
            result = combine(result, value)
        return result

    pick.__name__ = name
    pick.__doc__ = f"Python's {name}; on traced values, metile.{combine.__name__} of them, left to right."
    return pick


def _print(*args: Any, **kwargs: Any) -> None:
    """Python's print; with a traced value among the arguments, `device_print`
    (a leading string is the prefix), as Triton maps `print` in a kernel."""
    if not any(isinstance(a, _Tile) for a in args):
        builtins.print(*args, **kwargs)
        return
    if isinstance(args[0], str):
        _metile.device_print(args[0], *args[1:])
    else:
        _metile.device_print("", *args)


_SUBSTITUTES: dict[Any, Callable] = {
    builtins.min: _extreme("min", _metile.minimum, builtins.min),
    builtins.max: _extreme("max", _metile.maximum, builtins.max),
    builtins.print: _print,
}


def builtin_substitute(fn: Any) -> Any:
    """What a call of `fn` in a kernel calls: the traced version of `min`,
    `max` and `print`, else `fn` itself."""
    if type(fn) is BuiltinFunctionType:
        return _SUBSTITUTES.get(fn, fn)
    return fn
