"""The def of a function, parsed from its source file.

`inspect.getsourcelines` finds a function's block by tokenizing its file from
the def on; the first call in a process also compiles tokenize's regular
expressions and maps every loaded module to its file, milliseconds that the
first trace of a kernel paid. The lines the function spans are known without
tokenizing: its code object's first line (the first decorator's, or the def's)
and the last line any of its instructions (or those of the code nested in it)
comes from, followed by the lines indented deeper than the def (statements that
compiled to nothing, such as the body of an `if False:`). That guess is
checked, not trusted: it must parse to exactly one def of the function's name
starting on its first line, or `inspect` reads the source as before.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import textwrap
from collections.abc import Callable
from types import CodeType, FunctionType

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


def _last_line(code: CodeType) -> int:
    """The last source line of `code`'s instructions and of the code nested in it."""
    last = code.co_firstlineno
    for _, end, _, _ in code.co_positions():
        if end is not None and end > last:
            last = end
    for const in code.co_consts:
        if isinstance(const, CodeType):
            last = max(last, _last_line(const))
    return last


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block(fn: FunctionType) -> tuple[list[str], int] | None:
    """The lines of `fn`'s def (decorators included) and the first one's number,
    found from its code object; None where that cannot be done."""
    code = fn.__code__
    if not hasattr(code, "co_positions") or fn.__name__ == "<lambda>" or hasattr(fn, "__wrapped__"):
        return None
    filename = code.co_filename
    linecache.checkcache(filename)
    lines = linecache.getlines(filename, fn.__globals__)
    first = code.co_firstlineno - 1
    if not lines or first >= len(lines):
        return None
    head = lines[first].lstrip()
    if not head.startswith(("@", "def ", "async ")):
        return None
    end = min(_last_line(code), len(lines))
    outer = _indent(lines[first])
    while end < len(lines):
        line = lines[end]
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and _indent(line) <= outer:
            break
        end += 1
    return lines[first:end], first + 1


def _parse(lines: list[str], first_line: int) -> tuple[ast.Module, int]:
    """The module `lines` parse to once dedented, numbered from `first_line` on
    (blank lines before it cost the parser nothing, where renumbering the tree
    afterwards is a walk over it), and the indentation removed."""
    source = "".join(lines)
    dedented = textwrap.dedent(source)
    first = next((ln for ln in lines if ln.strip()), "")
    indent = _indent(first) if dedented != source else 0
    return ast.parse("\n" * (first_line - 1) + dedented), indent


def _checked_def(fn: FunctionType, lines: list[str], first_line: int) -> tuple[FunctionNode, int] | None:
    try:
        module, indent = _parse(lines, first_line)
    except SyntaxError:
        return None
    if len(module.body) != 1 or not isinstance(module.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    node = module.body[0]
    starts = [d.lineno for d in node.decorator_list] + [node.lineno]
    if node.name != fn.__name__ or min(starts) != first_line:
        return None
    return node, indent


def block(fn: Callable) -> tuple[list[str], int] | None:
    """The lines of `fn`'s def as its code object places them (decorators
    included) and the first one's number, unchecked; None where that cannot be
    done (no file, a lambda, Python before 3.11)."""
    return _block(fn) if isinstance(fn, FunctionType) else None


def read_def(
    fn: Callable, first_line: int | None = None, lines: tuple[list[str], int] | None = None
) -> tuple[FunctionNode | None, int, int, bool]:
    """`source_def`, with whether the def is `lines` (default: `block(fn)`)
    checked, rather than what `inspect` read."""
    found = lines if lines is not None else block(fn)
    if found is not None and isinstance(fn, FunctionType):
        checked = _checked_def(fn, found[0], first_line or found[1])
        if checked is not None:
            return checked[0], checked[1], found[1], True
    source, start = inspect.getsourcelines(fn)
    module, indent = _parse(source, first_line or start)
    defs = [s for s in module.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return (defs[0] if len(defs) == 1 else None), indent, start, False


def source_def(fn: Callable, first_line: int | None = None) -> tuple[FunctionNode | None, int, int]:
    """The def of `fn` parsed from its source (None if the source holds something
    else, e.g. a lambda), the indentation dedenting removed, and the line its
    source starts at in its file. The tree's line numbers count from
    `first_line` (default: that start, so they are the file's). Raises OSError,
    TypeError or SyntaxError as `inspect` and `ast.parse` do. Each call parses
    afresh: callers rewrite the tree."""
    node, indent, start, _ = read_def(fn, first_line)
    return node, indent, start
