"""Which variables a rewritten loop or `if` must carry.

A loop body becomes a function of its carried variables: the names assigned in
the body that are live at the loop head (read in the body before being assigned
there) or live after the loop. An `if` on a run-time value becomes two branch
functions that return the names assigned in a branch and live after the `if`.
Carrying too much is not harmless (a carried name needs a value before the
loop), so this is a real backward liveness analysis over the kernel's AST.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from metile._frontend.astwalk import child_nodes, walk

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def stored_names(nodes: list[ast.AST] | ast.AST) -> set[str]:
    """Names bound by `nodes` in the current scope (nested scopes excluded)."""
    found: set[str] = set()
    stack = list(nodes) if isinstance(nodes, list) else [nodes]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            stack.extend(node.decorator_list)
            continue
        elif isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            # Only a walrus inside a comprehension binds in this scope.
            found.update(n.target.id for n in walk(node) if isinstance(n, ast.NamedExpr))
            continue
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((a.asname or a.name).split(".")[0] for a in node.names)
        stack.extend(child_nodes(node))
    return found


def loaded_names(node: ast.AST | None) -> set[str]:
    """Names `node` reads from the current scope, including the free variables
    of nested functions and comprehensions (they read them when they run)."""
    if node is None:
        return set()
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) else set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        args = node.args
        params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        params.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
        body = node.body if isinstance(node.body, list) else [node.body]
        inner = set().union(*(loaded_names(s) for s in body)) - params - stored_names(body)
        outer = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        outer += getattr(node, "decorator_list", [])
        return inner | set().union(*(loaded_names(d) for d in outer))
    if isinstance(node, _COMPREHENSIONS):
        first_iter = loaded_names(node.generators[0].iter)
        targets = set().union(*(stored_names(g.target) for g in node.generators))
        parts: list[ast.AST] = [g.iter for g in node.generators[1:]]
        parts += [cond for g in node.generators for cond in g.ifs]
        parts += [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return first_iter | (set().union(*(loaded_names(p) for p in parts)) - targets)
    return set().union(*(loaded_names(child) for child in child_nodes(node)))


def has_escape(body: list[ast.stmt], loop_level: bool) -> bool:
    """Whether `body` contains `return`, or `break`/`continue` that leave it
    (`loop_level`: those of nested loops stay inside and do not count)."""
    stack: list[tuple[ast.AST, bool]] = [(s, loop_level) for s in body]
    while stack:
        node, counts = stack.pop()
        if isinstance(node, ast.Return):
            return True
        if isinstance(node, (ast.Break, ast.Continue)) and counts:
            return True
        if isinstance(node, _SCOPES):
            continue
        inner_loop = isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        for child in child_nodes(node):
            if isinstance(child, ast.expr):
                continue  # no statement sits inside an expression
            in_loop_body = inner_loop and child not in getattr(node, "orelse", [])
            stack.append((child, counts and not in_loop_body))
    return False


class _Names:
    """`loaded_names` and `stored_names` of the nodes of one tree, each computed
    once: the fixed points of loops and the carried-name queries ask again for
    the same statements. Keyed by identity, so it lives only as long as one
    analysis of a tree that does not change meanwhile."""

    def __init__(self) -> None:
        self._loads: dict[int, frozenset[str]] = {}
        self._stores: dict[int, frozenset[str]] = {}
        # The keys' objects, kept alive so that their ids are not reused.
        self._keep: list[object] = []

    def loads(self, node: ast.AST | None) -> frozenset[str]:
        found = self._loads.get(id(node))
        if found is None:
            found = self._loads[id(node)] = frozenset(loaded_names(node))
            self._keep.append(node)
        return found

    def stores(self, nodes: list[ast.AST] | ast.AST) -> frozenset[str]:
        if isinstance(nodes, list):
            return frozenset().union(*map(self.stores, nodes))
        found = self._stores.get(id(nodes))
        if found is None:
            found = self._stores[id(nodes)] = self._stores_of(nodes)
            self._keep.append(nodes)
        return found

    def _stores_of(self, node: ast.AST) -> frozenset[str]:
        """`stored_names(node)` from its children's, so that a statement nested in
        several loops is walked once, not once per loop."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return frozenset((node.name,)).union(*map(self.stores, node.decorator_list))
        if isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            return frozenset(stored_names(node))
        own: set[str] = set()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            own.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            own.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            own.update((a.asname or a.name).split(".")[0] for a in node.names)
        return frozenset(own.union(*map(self.stores, child_nodes(node))))


class Liveness:
    """Backward liveness over statement lists; records what is live after
    every statement (`live_out[id(stmt)]`)."""

    def __init__(self, names: _Names | None = None) -> None:
        self.live_out: dict[int, frozenset[str]] = {}
        # For `break` and `continue`: what is live after the loop and at its head.
        self._loops: list[tuple[set[str], set[str]]] = []
        self._names = names if names is not None else _Names()

    def block(self, body: list[ast.stmt], live_after: set[str]) -> set[str]:
        live = set(live_after)
        for stmt in reversed(body):
            self.live_out[id(stmt)] = frozenset(live)
            live = self._stmt(stmt, live)
        return live

    def _loop_body(self, body: list[ast.stmt], after: set[str], head: set[str]) -> set[str]:
        self._loops.append((after, head))
        try:
            return self.block(body, head)
        finally:
            self._loops.pop()

    def _stmt(self, s: ast.stmt, out: set[str]) -> set[str]:
        # A walrus (`if (y := f(x)) > 0:`) binds before the code that follows it.
        if isinstance(s, ast.If):
            branches = self.block(s.body, out) | self.block(s.orelse, out)
            return self._names.loads(s.test) | (branches - self._names.stores(s.test))
        if isinstance(s, (ast.For, ast.AsyncFor)):
            exits = self.block(s.orelse, out)
            targets = self._names.stores(s.target)
            head = set(exits)
            while True:
                body_in = self._loop_body(s.body, out, head)
                new_head = exits | (body_in - targets) | self._names.loads(s.target)
                if new_head == head:
                    return self._names.loads(s.iter) | (head - self._names.stores(s.iter))
                head = new_head
        if isinstance(s, ast.While):
            exits = self.block(s.orelse, out)
            test, bound = self._names.loads(s.test), self._names.stores(s.test)
            head = test | (exits - bound)
            while True:
                new_head = test | ((exits | self._loop_body(s.body, out, head)) - bound)
                if new_head == head:
                    return head
                head = new_head
        if isinstance(s, (ast.With, ast.AsyncWith)):
            bound = self._names.stores([i.optional_vars for i in s.items if i.optional_vars is not None])
            items = set().union(*(self._names.loads(i.context_expr) for i in s.items))
            return items | (self.block(s.body, out) - bound)
        if isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
            final_in = self.block(s.finalbody, out)
            handlers: set[str] = set()
            for h in s.handlers:
                handlers |= self._names.loads(h.type) | (self.block(h.body, final_in) - {h.name or ""})
            else_in = self.block(s.orelse, final_in)
            return self.block(s.body, else_in | handlers) | handlers | final_in
        if isinstance(s, ast.Return):
            return self._names.loads(s.value)
        if isinstance(s, ast.Break):
            return set(self._loops[-1][0]) if self._loops else set(out)
        if isinstance(s, ast.Continue):
            return set(self._loops[-1][1]) if self._loops else set(out)
        if isinstance(s, (ast.Assign, ast.AnnAssign, ast.Delete, ast.Import, ast.ImportFrom)):
            if isinstance(s, ast.AnnAssign) and s.value is None:
                return out | self._names.loads(s.target)
            targets = s.targets if isinstance(s, (ast.Assign, ast.Delete)) else [getattr(s, "target", None)]
            targets = [t for t in targets if t is not None]
            value = getattr(s, "value", None)
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                kills = self._names.stores(s)
            else:
                kills = self._names.stores(targets) | (self._names.stores(value) if value is not None else set())
            return (out - kills) | self._names.loads(value) | set().union(*(self._names.loads(t) for t in targets))
        if isinstance(s, ast.AugAssign):
            return out | self._names.loads(s.value) | self._names.loads(s.target) | self._names.stores(s.target)
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return (out - {s.name}) | self._names.loads(s)
        if type(s).__name__ == "Match":
            cases = [self.block(c.body, out) for c in s.cases]  # type: ignore[attr-defined]
            return out | self._names.loads(s) | set().union(*cases)
        return (out - self._names.stores(s)) | self._names.loads(s)


@dataclass(frozen=True)
class Carried:
    """The variables a rewritten construct passes in (`params`) and gets back
    (`results`); for loops they are the same names."""

    params: tuple[str, ...]
    results: tuple[str, ...]


def _upward_exposed(body: list[ast.stmt], names: _Names) -> set[str]:
    """Names read in `body` before any assignment in it."""
    return Liveness(names).block(body, set())


def carried_names(function: ast.FunctionDef) -> dict[int, Carried]:
    """`Carried` for every `for`, `while` and `if` of `function` (outside nested
    functions), keyed by `id(node)`."""
    known = _Names()
    liveness = Liveness(known)
    liveness.block(function.body, set())
    result: dict[int, Carried] = {}
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES):
            continue
        # Statements only sit in statements (and handlers, cases), never in expressions.
        stack.extend(c for c in child_nodes(node) if not isinstance(c, ast.expr))
        live_after = liveness.live_out.get(id(node))
        if live_after is None:
            continue
        if isinstance(node, ast.For):
            assigned = known.stores(node.body) - known.stores(node.target)
            wanted = _upward_exposed(node.body, known) | live_after
            names = tuple(sorted(assigned & wanted))
            result[id(node)] = Carried(names, names)
        elif isinstance(node, ast.While):
            # The condition runs at the head of every iteration: what it reads is live there.
            assigned = known.stores(node.body)
            wanted = known.loads(node.test) | _upward_exposed(node.body, known) | live_after
            names = tuple(sorted(assigned & wanted))
            result[id(node)] = Carried(names, names)
        elif isinstance(node, ast.If):
            assigned = known.stores(node.body) | known.stores(node.orelse)
            exposed = _upward_exposed(node.body, known) | _upward_exposed(node.orelse, known)
            params = tuple(sorted(assigned & (exposed | live_after)))
            results = tuple(sorted(assigned & live_after))
            result[id(node)] = Carried(params, results)
    return result
