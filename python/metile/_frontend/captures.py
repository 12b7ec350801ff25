"""The globals and closure variables a kernel reads: part of its specialisation.

A kernel that reads `SCALE` (a module global or a closure variable) bakes its
value in when it is traced, so the value is part of the specialisation key like
a constexpr: the kernel object reads every captured value on each launch and
compiles again when one changed (docs/README.md, "The specialisation key").

This module finds the captured names once per kernel (and again after each
trace, since a helper may have been replaced): the free names of the kernel's
body, `module.NAME` and `Class.NAME` paths read through them, and the same for
the helper functions the kernel calls (user code only: functions of the
standard library and of installed packages other than the kernel's own are
keyed by identity but not read). The metile namespace is not a value. Which
values are allowed, and how each is keyed, is decided per launch in Rust
(`value_key.rs`).
"""

from __future__ import annotations

import ast
import inspect
import sysconfig
import textwrap
import types
from collections.abc import Callable
from dataclasses import dataclass

from metile._frontend.astwalk import walk
from metile._frontend.liveness import loaded_names, stored_names
from metile._frontend.source import source_def

_ABSENT = object()
_LIBRARY_DIRS = tuple(
    sorted({p for k in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_paths().get(k))})
)


@dataclass(frozen=True)
class _Use:
    """A free name read by a function, with the attribute path read from it."""

    name: str
    attrs: tuple[str, ...]
    line: int


# Per code object (kept alive so its id is not reused): the file and the uses.
_USES: dict[int, tuple[types.CodeType, str, list[_Use]]] = {}


def _scope_node(fn: types.FunctionType) -> tuple[ast.AST, int] | None:
    """The def (or lambda) of `fn` in its source, and the line its source starts at."""
    try:
        node, _, start = source_def(fn, 1)
        if node is not None and node.name == fn.__name__:
            return node, start
        lines, start = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == fn.__name__:
            return node, start
        if isinstance(node, ast.Lambda) and fn.__name__ == "<lambda>":
            return node, start
    return None


def _free_names(node: ast.AST) -> set[str]:
    """Names the body reads that it does not bind: globals, closure variables, builtins.
    Decorators, defaults and annotations are evaluated once, at definition."""
    args = node.args  # type: ignore[attr-defined]
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    params.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    body = node.body if isinstance(node.body, list) else [node.body]  # type: ignore[attr-defined]
    return set().union(*(loaded_names(s) for s in body)) - params - stored_names(body)


def _uses(fn: types.FunctionType) -> tuple[str, list[_Use]]:
    code = fn.__code__
    entry = _USES.get(id(code))
    if entry is not None and entry[0] is code:
        return entry[1], entry[2]
    uses: dict[tuple[str, tuple[str, ...]], int] = {}
    found = _scope_node(fn)
    if found is not None:
        node, start = found
        free = _free_names(node)
        body = node.body if isinstance(node.body, list) else [node.body]  # type: ignore[attr-defined]
        for stmt in body:
            for sub in walk(stmt):
                path: list[str] = []
                base = sub
                while isinstance(base, ast.Attribute):
                    path.append(base.attr)
                    base = base.value
                if not isinstance(base, ast.Name) or base.id not in free or not isinstance(base.ctx, ast.Load):
                    continue
                use = (base.id, tuple(reversed(path)))
                line = start + sub.lineno - 1
                uses[use] = min(uses.get(use, line), line)
    result = [_Use(name, attrs, line) for (name, attrs), line in sorted(uses.items(), key=lambda u: (u[1], u[0]))]
    _USES[id(code)] = (code, code.co_filename, result)
    return code.co_filename, result


def _is_metile(value: object) -> bool:
    """The metile package, its modules and what they define (dtype names aside, which are strings)."""
    if isinstance(value, types.ModuleType):
        return value.__name__ == "metile" or value.__name__.startswith("metile.")
    module = getattr(value, "__module__", None) if callable(value) else None
    return isinstance(module, str) and (module == "metile" or module.startswith("metile."))


def _is_namespace(value: object) -> bool:
    """What `NAME.attr` is read through: a module or a class (an Enum's members included)."""
    return isinstance(value, (types.ModuleType, type))


def _helper_to_follow(value: object, kernel_package: str) -> bool:
    """A plain Python function of user code (or of the kernel's own package)."""
    if not isinstance(value, types.FunctionType) or _is_metile(value):
        return False
    if not value.__code__.co_filename.startswith(_LIBRARY_DIRS):
        return True
    return (getattr(value, "__module__", "") or "").split(".")[0] == kernel_package


def _source(fn: types.FunctionType, name: str) -> tuple[object, object]:
    """Where `fn` finds `name` (its closure cell or its globals) and the value there now."""
    code = fn.__code__
    if name in code.co_freevars and fn.__closure__ is not None:
        cell = fn.__closure__[code.co_freevars.index(name)]
        try:
            return cell, cell.cell_contents
        except ValueError:  # an empty cell: assigned later in the enclosing function
            return cell, _ABSENT
    return fn.__globals__, fn.__globals__.get(name, _ABSENT)


def captures(fn: Callable) -> list[tuple]:
    """`(label, container, name, attrs, file, line)` for every global and closure
    variable `fn` (a kernel's Python function) and its helpers read; container is
    a globals dict or a closure cell, attrs the attribute path read after the name."""
    if not isinstance(fn, types.FunctionType):
        return []
    kernel_package = (getattr(fn, "__module__", "") or "").split(".")[0]
    result: list[tuple] = []
    seen_captures: set[tuple[int, str, tuple[str, ...]]] = set()
    seen_functions = {id(fn.__code__)}
    pending = [fn]
    while pending:
        function = pending.pop(0)
        file, uses = _uses(function)
        for use in uses:
            container, value = _source(function, use.name)
            if _is_metile(value):
                continue
            attrs: list[str] = []
            for attr in use.attrs:
                if value is _ABSENT or not _is_namespace(value) or _is_metile(value):
                    break
                value = getattr(value, attr, _ABSENT)
                attrs.append(attr)
            if _is_metile(value):
                continue
            for depth in range(len(attrs) + 1):
                path = tuple(attrs[:depth])
                if (id(container), use.name, path) not in seen_captures:
                    seen_captures.add((id(container), use.name, path))
                    label = ".".join((use.name, *path))
                    result.append((label, container, use.name, path, file, use.line))
            if _helper_to_follow(value, kernel_package) and id(value.__code__) not in seen_functions:
                seen_functions.add(id(value.__code__))
                pending.append(value)
    return result
