"""The control-flow rewrite: a kernel's `for` loops and `if` statements become
calls of the tracing helpers with their bodies as nested functions of the
carried variables, so one Python run of the kernel can emit Tile IR regions.

    for k in metile.tile_range(0, K, BK):        def __mt_body_1(k, acc):
        acc = metile.dot(a, b, acc)         →        acc = metile.dot(a, b, acc)
                                                     return (acc,)
                                                 (acc,) = __mt_for(metile.tile_range(0, K, BK),
                                                                   __mt_body_1, (acc,), ('acc',))

Whether a loop unrolls (Python values) or becomes an IR loop is decided when
the helper runs. Constructs that cannot become regions (`while`, an `if` with
`return`/`break`/`continue`, `x if c else y`) get a check that their condition
is a Python value.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from types import CodeType

from metile import _metile
from metile._frontend.liveness import Carried, carried_names, has_escape
from metile._frontend.unsupported import check_supported

FOR = "__mt_for"
IF = "__mt_if"
STATIC_CONDITION = "__mt_static_condition"
LOOP_RANGE = "__mt_range"
PYTHON_LOOP = "__mt_python_loop"
UNDEFINED = "__mt_UNDEFINED"
CONTEXT = "__mt_context"
# What the generated code calls each helper; they reach it as closure variables.
HELPERS = {
    FOR: _metile.trace_for,
    IF: _metile.trace_if,
    STATIC_CONDITION: _metile.static_condition,
    LOOP_RANGE: _metile.loop_range,
    PYTHON_LOOP: _metile.python_loop,
    UNDEFINED: _metile.UNDEFINED,
    CONTEXT: _metile.kernel_context,
}
_FACTORY = "__mt_factory"
_KERNEL = "__mt_kernel"


def _name(id_: str) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Load())


def _names_tuple(names: tuple[str, ...], ctx: ast.expr_context) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Name(id=n, ctx=ctx) for n in names], ctx=ctx)


def _strings_tuple(names: tuple[str, ...]) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Constant(value=n) for n in names], ctx=ast.Load())


def _locate(nodes: list[ast.stmt], at: ast.stmt, keyword_len: int) -> list[ast.stmt]:
    """Gives generated nodes the position of the statement they replace (its
    keyword), so tracebacks and op locations name the user's line."""
    for stmt in nodes:
        for node in ast.walk(stmt):
            if "lineno" in node._attributes and getattr(node, "lineno", None) is None:
                node.lineno = at.lineno
                node.end_lineno = at.lineno
                node.col_offset = at.col_offset
                node.end_col_offset = at.col_offset + keyword_len
    return nodes


class _Rewriter(ast.NodeTransformer):
    def __init__(self, carried: dict[int, Carried]) -> None:
        self._carried = carried
        self._counter = 0

    def _fresh(self, stem: str) -> str:
        self._counter += 1
        return f"__mt_{stem}_{self._counter}"

    # Nested functions and classes run as plain Python helpers: left alone.
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node

    def _static_condition(self, test: ast.expr, construct: str) -> ast.Call:
        return ast.Call(func=_name(STATIC_CONDITION), args=[test, ast.Constant(value=construct)], keywords=[])

    def _capture(self, names: tuple[str, ...]) -> tuple[list[ast.stmt], ast.Tuple]:
        """Statements reading each name's current value (UNDEFINED if unbound)."""
        stmts: list[ast.stmt] = []
        temps = []
        for n in names:
            temp = self._fresh(f"init_{n}")
            temps.append(temp)
            store = ast.Assign(targets=[ast.Name(id=temp, ctx=ast.Store())], value=_name(n))
            fallback = ast.Assign(targets=[ast.Name(id=temp, ctx=ast.Store())], value=_name(UNDEFINED))
            handler = ast.ExceptHandler(type=_name("NameError"), name=None, body=[fallback])
            stmts.append(ast.Try(body=[store], handlers=[handler], orelse=[], finalbody=[]))
        return stmts, ast.Tuple(elts=[_name(t) for t in temps], ctx=ast.Load())

    def _function(
        self, name: str, params: list[str], body: list[ast.stmt], results: tuple[str, ...]
    ) -> ast.FunctionDef:
        args = ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg=p) for p in params],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        )
        ret = ast.Return(value=_names_tuple(results, ast.Load()))
        fn = ast.FunctionDef(name=name, args=args, body=[*body, ret], decorator_list=[], returns=None)
        if "type_params" in ast.FunctionDef._fields:
            fn.type_params = []
        return fn

    def _assign_results(self, results: tuple[str, ...], call: ast.Call) -> ast.stmt:
        if not results:
            return ast.Expr(value=call)
        return ast.Assign(targets=[_names_tuple(results, ast.Store())], value=call)

    def visit_For(self, node: ast.For) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        it = node.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range":
            node.iter = ast.Call(func=_name(LOOP_RANGE), args=[it.func, *it.args], keywords=it.keywords)
            ast.copy_location(node.iter, it)
        carried = self._carried.get(id(node))
        if carried is None or node.orelse or has_escape(node.body, loop_level=True):
            # Stays a Python loop; a run-time range is refused with the reason.
            node.iter = ast.copy_location(
                ast.Call(func=_name(PYTHON_LOOP), args=[node.iter], keywords=[]), node.iter
            )
            return node
        body = list(node.body)
        if isinstance(node.target, ast.Name):
            target = node.target.id
        else:
            target = self._fresh("iv")
            body.insert(0, ast.Assign(targets=[node.target], value=_name(target)))
        names = carried.params
        fn_name = self._fresh("body")
        func = self._function(fn_name, [target, *names], body, names)
        captures, inits = self._capture(names)
        call = ast.Call(
            func=_name(FOR),
            args=[node.iter, _name(fn_name), inits, _strings_tuple(names)],
            keywords=[],
        )
        return _locate([func, *captures, self._assign_results(names, call)], node, len("for"))

    def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        carried = self._carried.get(id(node))
        if carried is None or has_escape([*node.body, *node.orelse], loop_level=True):
            node.test = ast.copy_location(self._static_condition(node.test, "if"), node.test)
            return node
        then_name, else_name = self._fresh("then"), self._fresh("else")
        params = list(carried.params)
        then_fn = self._function(then_name, params, node.body, carried.results)
        else_fn = self._function(else_name, params, node.orelse or [ast.Pass()], carried.results)
        captures, inits = self._capture(carried.params)
        call = ast.Call(
            func=_name(IF),
            args=[
                node.test,
                _name(then_name),
                _name(else_name),
                inits,
                _strings_tuple(carried.results),
                _strings_tuple(carried.params),
            ],
            keywords=[],
        )
        return _locate(
            [then_fn, else_fn, *captures, self._assign_results(carried.results, call)], node, len("if")
        )

    def visit_While(self, node: ast.While) -> ast.AST:
        self.generic_visit(node)
        node.test = ast.copy_location(self._static_condition(node.test, "while"), node.test)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        node.test = ast.copy_location(self._static_condition(node.test, "ifexp"), node.test)
        return node


class _CheckedContexts(ast.NodeTransformer):
    """`with EXPR:` becomes `with __mt_context(EXPR):`, which refuses any context
    manager but metile.simdgroup_role (nested functions and lambdas included)."""

    def visit_With(self, node: ast.With) -> ast.AST:
        self.generic_visit(node)
        for item in node.items:
            item.context_expr = ast.copy_location(
                ast.Call(func=_name(CONTEXT), args=[item.context_expr], keywords=[]), item.context_expr
            )
        return node


def _shift_columns(tree: ast.AST, indent: int) -> None:
    """Undoes `textwrap.dedent` in column offsets (tracebacks underline with them)."""
    if indent:
        for node in ast.walk(tree):
            for attr in ("col_offset", "end_col_offset"):
                if getattr(node, attr, None) is not None:
                    setattr(node, attr, getattr(node, attr) + indent)


def _strip_annotations(fn: ast.FunctionDef) -> None:
    """Annotations are read from the original function; the rewritten one must
    not evaluate them (they may name things only a type checker sees)."""
    args = fn.args
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if a is not None:
            a.annotation = None
    fn.returns = None


def _renamed_kernel(factory: CodeType, fn: Callable) -> CodeType:
    """The factory's code with the kernel's code named as the user's function
    (tracebacks show it), though the def inside the factory is `_KERNEL`."""
    names = {"co_name": fn.__name__}
    if hasattr(factory, "co_qualname"):
        names["co_qualname"] = fn.__qualname__
    consts = tuple(
        c.replace(**names) if isinstance(c, CodeType) and c.co_name == _KERNEL else c for c in factory.co_consts
    )
    return factory.replace(co_consts=consts)


def rewrite(fn: Callable) -> Callable[..., Callable]:
    """A factory `(*free_variable_values) -> rewritten kernel function`.

    The rewritten def is compiled with the kernel's own file name and line
    numbers and runs with the kernel's globals. It sits inside the factory so
    that the helpers and the kernel's free variables (kernels defined inside a
    function) are closure variables of it.
    """
    code: CodeType = fn.__code__
    lines, _ = inspect.getsourcelines(fn)
    source = "".join(lines)
    dedented = textwrap.dedent(source)
    first = next((ln for ln in lines if ln.strip()), "")
    indent = len(first) - len(first.lstrip()) if dedented != source else 0

    module = ast.parse(dedented)
    defs = [s for s in module.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1:
        raise TypeError(f"kernel {fn.__name__}: expected the source of one plain `def`, found something else")
    check_supported(defs[0], fn.__name__, code.co_filename, code.co_firstlineno)
    kernel_def = defs[0]
    kernel_def.decorator_list = []
    # Under its own name inside the factory, the kernel would see itself as a
    # closure variable: a call of the kernel by name would recurse in Python
    # instead of reaching the kernel object, which refuses it.
    kernel_def.name = _KERNEL
    _strip_annotations(kernel_def)
    _CheckedContexts().visit(kernel_def)
    carried = carried_names(kernel_def)
    _Rewriter(carried).generic_visit(kernel_def)

    params = [ast.arg(arg=name) for name in (*HELPERS, *code.co_freevars)]
    factory = ast.FunctionDef(
        name=_FACTORY,
        args=ast.arguments(
            posonlyargs=[], args=params, vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
        ),
        body=[kernel_def, ast.Return(value=_name(kernel_def.name))],
        decorator_list=[],
        returns=None,
    )
    if "type_params" in ast.FunctionDef._fields:
        factory.type_params = []
    ast.copy_location(factory, kernel_def)
    tree = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(tree)
    _shift_columns(tree, indent)
    ast.increment_lineno(tree, code.co_firstlineno - 1)
    compiled = compile(tree, code.co_filename, "exec", dont_inherit=True)
    namespace: dict[str, object] = {}
    exec(compiled, fn.__globals__, namespace)  # noqa: S102 - the kernel's own rewritten source
    factory = namespace[_FACTORY]
    factory.__code__ = _renamed_kernel(factory.__code__, fn)
    helpers = tuple(HELPERS.values())
    return lambda *cells: factory(*helpers, *cells)  # type: ignore[operator]
