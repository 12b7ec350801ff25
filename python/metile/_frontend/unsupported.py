"""Python a kernel cannot use, refused with a `metile.CompilationError` that names
the construct and the kernel line, instead of misbehaving while it is traced.

Statically, before the first trace: statements with no meaning in a compiled
kernel (`try`, generators, coroutines, `global`/`nonlocal`). While tracing: a
`with` on anything but `metile.simdgroup_role` (the rewrite checks each context
expression), a `TypeError` that Python raises in the kernel's own code (calling
something that is not callable, an operator on values that do not support it)
and unbounded recursion of a helper, both turned into a CompilationError at the
user's line. Kernels calling kernels are refused by the kernel object itself.
"""

from __future__ import annotations

import ast
import linecache
import os
import traceback
from collections import Counter
from types import TracebackType

from metile._frontend.astwalk import walk
from metile._frontend.captures import _LIBRARY_DIRS
from metile._metile import CompilationError

_METILE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_NOT_TRACED = (
    "a kernel is traced once into a compiled program, and an exception handler would catch the "
    "tracer's compile errors, not faults of the running kernel"
)
_NO_GENERATORS = "a kernel is a plain function: generators and coroutines cannot be compiled"
_NO_OUTER_ASSIGNMENT = (
    "a kernel cannot assign variables outside itself (the assignment would happen once, when the "
    "kernel is traced, not when it runs); pass values in as arguments and write results with metile.store"
)
_REFUSED: dict[type, tuple[str, str]] = {
    ast.Try: ("try", _NOT_TRACED),
    ast.AsyncWith: ("async with", _NO_GENERATORS),
    ast.Yield: ("yield", _NO_GENERATORS),
    ast.YieldFrom: ("yield from", _NO_GENERATORS),
    ast.Await: ("await", _NO_GENERATORS),
    ast.AsyncFunctionDef: ("async def", _NO_GENERATORS),
    ast.AsyncFor: ("async for", _NO_GENERATORS),
    ast.Global: ("global", _NO_OUTER_ASSIGNMENT),
    ast.Nonlocal: ("nonlocal", _NO_OUTER_ASSIGNMENT),
}
if hasattr(ast, "TryStar"):
    _REFUSED[ast.TryStar] = ("try/except*", _NOT_TRACED)


def located(message: str, file: str, line: int) -> str:
    """`message`, then the file, line and source text (as the Rust side formats it)."""
    text = f'{message}\n  File "{file}", line {line}'
    source = linecache.getline(file, line).strip()
    return f"{text}\n    {source}" if source else text


def first_refused(tree: ast.AST) -> ast.AST | None:
    """The first construct of `_REFUSED` in `tree` (nested functions and lambdas included)."""
    found = [node for node in walk(tree) if type(node) in _REFUSED]
    return min(found, key=lambda n: (n.lineno, n.col_offset)) if found else None


def check_supported(kernel_def: ast.AST, name: str, file: str, first_line: int) -> None:
    """Refuses the first construct of `_REFUSED` in the kernel's source (nested
    functions and lambdas included); `first_line`: the file line of the source's line 1."""
    node = first_refused(kernel_def)
    if node is None:
        return
    construct, reason = _REFUSED[type(node)]
    line = first_line + node.lineno - 1
    raise CompilationError(located(f"kernel {name}: `{construct}` is not supported in a kernel: {reason}", file, line))


def _is_user_file(file: str) -> bool:
    return not os.path.abspath(file).startswith(_METILE_DIR) and not file.startswith(_LIBRARY_DIRS)


def _expression(frame: traceback.FrameSummary) -> str | None:
    """The source text of the expression the frame was running (Python 3.11+)."""
    col, end_col = getattr(frame, "colno", None), getattr(frame, "end_colno", None)
    if col is None or end_col is None or getattr(frame, "end_lineno", None) != frame.lineno:
        return None
    raw = linecache.getline(frame.filename, frame.lineno).encode()
    return raw[col:end_col].decode(errors="replace").strip() or None


def _user_frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(tb) if _is_user_file(f.filename)]


def traced_type_error(kernel: str, error: TypeError) -> Exception:
    """A CompilationError at the user's line for a TypeError raised while tracing
    (`error` itself when no user code is on its traceback, or the user raised it)."""
    frames = _user_frames(error.__traceback__)
    if not frames or (frames[-1].line or "").startswith("raise"):
        return error  # no user code involved, or the user's own `raise TypeError(...)`
    frame = frames[-1]
    expression = _expression(frame)
    what = f"`{expression}`" if expression else "this line"
    message = (
        f"kernel {kernel}: {what} is not supported while the kernel is traced: TypeError: {error}; "
        "a kernel computes with tiles, numbers and constexprs, and calls metile functions and "
        "Python helper functions"
    )
    return CompilationError(located(message, frame.filename, frame.lineno or 0))


def traced_recursion_error(kernel: str, error: RecursionError) -> Exception:
    """A CompilationError naming the function that recursed without end while tracing."""
    frames = _user_frames(error.__traceback__)
    if not frames:
        return error
    function, _ = Counter((f.filename, f.name) for f in frames).most_common(1)[0]
    lines = Counter(f.lineno for f in frames if (f.filename, f.name) == function)
    line = lines.most_common(1)[0][0] or 0
    message = (
        f"kernel {kernel}: `{function[1]}` calls itself without end while the kernel is traced "
        "(recursion): helpers run in Python when the kernel is traced, so a recursion must end at "
        "a depth fixed by constexprs and Python values"
    )
    return CompilationError(located(message, function[0], line))
