"""`ast`'s tree walks, without its generators: the frontend walks every node of a
kernel several times on its first trace, and `ast.walk`, `ast.iter_child_nodes`,
`ast.fix_missing_locations` and `ast.NodeTransformer` spend most of their time in
generator frames and per-node attribute name building. Each function here does what
its `ast` namesake does, in the same order, with the same result."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

_FIELDS: dict[type, tuple[str, ...]] = {}
_AST = ast.AST


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """`list(ast.iter_child_nodes(node))`."""
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = _FIELDS[type(node)] = node._fields
    children: list[ast.AST] = []
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, list):
            children.extend(v for v in value if isinstance(v, _AST))
        elif isinstance(value, _AST):
            children.append(value)
    return children


def walk(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk(node)`: `node`, then its descendants breadth first."""
    pending = [node]
    index = 0
    while index < len(pending):
        current = pending[index]
        index += 1
        pending.extend(child_nodes(current))
        yield current


_POSITIONS: dict[type, tuple[bool, bool, bool, bool]] = {}


def _positions(kind: type) -> tuple[bool, bool, bool, bool]:
    has = _POSITIONS.get(kind)
    if has is None:
        attributes = kind._attributes
        has = _POSITIONS[kind] = (
            "lineno" in attributes,
            "end_lineno" in attributes,
            "col_offset" in attributes,
            "end_col_offset" in attributes,
        )
    return has


def fix_missing_locations(node: ast.AST) -> ast.AST:
    """`ast.fix_missing_locations(node)`: a node without a position takes its parent's."""

    def fix(node: ast.AST, lineno: int, col_offset: int, end_lineno: int, end_col_offset: int) -> None:
        has_lineno, has_end_lineno, has_col_offset, has_end_col_offset = _positions(type(node))
        if has_lineno:
            if not hasattr(node, "lineno"):
                node.lineno = lineno
            else:
                lineno = node.lineno
        if has_end_lineno:
            if getattr(node, "end_lineno", None) is None:
                node.end_lineno = end_lineno
            else:
                end_lineno = node.end_lineno
        if has_col_offset:
            if not hasattr(node, "col_offset"):
                node.col_offset = col_offset
            else:
                col_offset = node.col_offset
        if has_end_col_offset:
            if getattr(node, "end_col_offset", None) is None:
                node.end_col_offset = end_col_offset
            else:
                end_col_offset = node.end_col_offset
        for child in child_nodes(node):
            fix(child, lineno, col_offset, end_lineno, end_col_offset)

    fix(node, 1, 0, 1, 0)
    return node


class NodeTransformer:
    """`ast.NodeTransformer`: `visit_<Class>` methods replace nodes (None removes
    one, a list splices several into a list field); `generic_visit` visits the
    children of the others."""

    def __init__(self) -> None:
        self._visitors: dict[type, Callable[[ast.AST], object]] = {}

    def visit(self, node: ast.AST) -> object:
        visitor = self._visitors.get(type(node))
        if visitor is None:
            visitor = self._visitors[type(node)] = getattr(self, "visit_" + type(node).__name__, self.generic_visit)
        return visitor(node)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        fields = _FIELDS.get(type(node))
        if fields is None:
            fields = _FIELDS[type(node)] = node._fields
        for name in fields:
            old = getattr(node, name, None)
            if isinstance(old, list):
                new: list[object] = []
                for value in old:
                    if isinstance(value, _AST):
                        value = self.visit(value)
                        if value is None:
                            continue
                        if not isinstance(value, _AST):
                            new.extend(value)  # type: ignore[arg-type]
                            continue
                    new.append(value)
                old[:] = new
            elif isinstance(old, _AST):
                replaced = self.visit(old)
                if replaced is None:
                    delattr(node, name)
                else:
                    setattr(node, name, replaced)
        return node
