"""The control-flow rewrite: a kernel's `for` loops and `if` statements become
calls of the tracing helpers with their bodies as nested functions of the
carried variables, so one Python run of the kernel can emit Tile IR regions.

    for k in metile.tile_range(0, K, BK):        def __mt_body_1(k, acc):
        acc = metile.dot(a, b, acc)         →        acc = metile.dot(a, b, acc)
                                                     return (acc,)
                                                 (acc,) = __mt_for(metile.tile_range(0, K, BK),
                                                                   __mt_body_1, (acc,), ('acc',))

Whether a loop unrolls (Python values) or becomes an IR loop is decided when
the helper runs; `while` loops become a condition function and a body function
the same way. Constructs that cannot become regions (a loop or an `if` with
`return`/`break`/`continue`) get a check that their condition is a Python value.

Expressions are rewritten too: `a and b`, `a or b`, `not a`, `x if c else y`
and `assert` call the helpers of `pythonic.py` (Python's semantics on Python
values, run-time ops on traced ones), and every call `f(...)` becomes
`__mt_call(f)(...)`: a user helper function runs rewritten (so its loops and
`if`s compile as the kernel's do; rewritten once per code object), the builtins
`min`, `max` and `print` get their traced versions, anything else is called as is.
"""

from __future__ import annotations

import ast
import os
import threading
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any

from metile import _metile
from metile._frontend import block as _block
from metile._frontend import code_cache, pythonic
from metile._frontend.astwalk import NodeTransformer, fix_missing_locations, walk
from metile._frontend.captures import _LIBRARY_DIRS
from metile._frontend.liveness import Carried, carried_names, has_escape
from metile._frontend.source import read_def
from metile._frontend.unsupported import check_supported, first_refused

FOR = "__mt_for"
IF = "__mt_if"
STATIC_CONDITION = "__mt_static_condition"
LOOP_RANGE = "__mt_range"
PYTHON_LOOP = "__mt_python_loop"
UNDEFINED = "__mt_UNDEFINED"
CONTEXT = "__mt_context"
WHILE = "__mt_while"
CALL = "__mt_call"
AND = "__mt_and"
OR = "__mt_or"
NOT = "__mt_not"
IFEXP = "__mt_ifexp"
ASSERT = "__mt_assert"


def call_target(fn: Any) -> Any:
    """What `fn(...)` in a kernel or helper calls (see the module docstring)."""
    if type(fn) is FunctionType:
        known = _METILE_FUNCTIONS.get(id(fn))
        if known is not None and known[0] is fn and known[1] is fn.__code__ and not _in_kernel_module(fn):
            return fn
        return _rewritten_helper(fn)
    return pythonic.builtin_substitute(fn)


# What the generated code calls each helper; they reach it as closure variables.
HELPERS = {
    FOR: _block.carried_for,
    IF: _block.carried_if,
    STATIC_CONDITION: _metile.static_condition,
    LOOP_RANGE: _metile.loop_range,
    PYTHON_LOOP: _metile.python_loop,
    UNDEFINED: _metile.UNDEFINED,
    CONTEXT: _metile.kernel_context,
    WHILE: _block.carried_while,
    CALL: call_target,
    AND: pythonic.bool_and,
    OR: pythonic.bool_or,
    NOT: pythonic.bool_not,
    IFEXP: pythonic.conditional,
    ASSERT: pythonic.checked,
}
_FACTORY = "__mt_factory"
_KERNEL = "__mt_kernel"


def _name(id_: str) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Load())


def _names_tuple(names: tuple[str, ...], ctx: ast.expr_context) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Name(id=n, ctx=ctx) for n in names], ctx=ctx)


def _strings_tuple(names: tuple[str, ...]) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Constant(value=n) for n in names], ctx=ast.Load())


def _call(helper: str, args: list[ast.expr], like: ast.AST) -> ast.Call:
    return ast.copy_location(ast.Call(func=_name(helper), args=args, keywords=[]), like)


def _thunk(expr: ast.expr) -> ast.Lambda:
    """`lambda: expr`, to evaluate `expr` only if Python's semantics would."""
    args = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])
    return ast.copy_location(ast.Lambda(args=args, body=expr), expr)


def _binds(expr: ast.AST | None) -> bool:
    """Whether `expr` assigns a name (a walrus), which it must not do inside a thunk."""
    return expr is not None and any(isinstance(n, ast.NamedExpr) for n in walk(expr))


def _locate(nodes: list[ast.stmt], at: ast.stmt, keyword_len: int) -> list[ast.stmt]:
    """Gives generated nodes the position of the statement they replace (its
    keyword), so tracebacks and op locations name the user's line."""
    for stmt in nodes:
        for node in walk(stmt):
            if "lineno" in node._attributes and getattr(node, "lineno", None) is None:
                node.lineno = at.lineno
                node.end_lineno = at.lineno
                node.col_offset = at.col_offset
                node.end_col_offset = at.col_offset + keyword_len
    return nodes


class _Rewriter(NodeTransformer):
    def __init__(self, carried: dict[int, Carried]) -> None:
        super().__init__()
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
        # A lambda is never rewritten when called (see `_rewritten_helper`): its
        # expression is rewritten in place.
        self.generic_visit(node)
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

    def visit_While(self, node: ast.While) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        carried = self._carried.get(id(node))
        if carried is None or node.orelse or has_escape(node.body, loop_level=True) or _binds(node.test):
            # Stays a Python loop; a run-time condition is refused with the reason.
            node.test = ast.copy_location(self._static_condition(node.test, "while"), node.test)
            return node
        names = carried.params
        cond_name, body_name = self._fresh("cond"), self._fresh("body")
        cond_fn = self._function(cond_name, list(names), [], ())
        cond_fn.body = [ast.Return(value=node.test)]
        body_fn = self._function(body_name, list(names), node.body, names)
        captures, inits = self._capture(names)
        call = ast.Call(
            func=_name(WHILE),
            args=[_name(cond_name), _name(body_name), inits, _strings_tuple(names)],
            keywords=[],
        )
        return _locate([cond_fn, body_fn, *captures, self._assign_results(names, call)], node, len("while"))

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        if _binds(node.body) or _binds(node.orelse):
            node.test = ast.copy_location(self._static_condition(node.test, "ifexp"), node.test)
            return node
        return _call(IFEXP, [node.test, _thunk(node.body), _thunk(node.orelse)], node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        if any(_binds(v) for v in node.values[1:]):
            return node
        helper = AND if isinstance(node.op, ast.And) else OR
        expr = node.values[-1]
        for value in reversed(node.values[:-1]):
            expr = _call(helper, [value, _thunk(expr)], node)
        return expr

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _call(NOT, [node.operand], node)
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        self.generic_visit(node)
        if _binds(node.msg):
            return node
        message = _thunk(node.msg) if node.msg is not None else ast.Constant(value=None)
        node.test = _call(ASSERT, [node.test, message], node.test)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        # `range(...)` of a `for` is recognised by name (see visit_For).
        if not (isinstance(func, ast.Name) and func.id == "range"):
            node.func = _call(CALL, [func], func)
        return node


class _CheckedContexts(NodeTransformer):
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
        for node in walk(tree):
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


def _read_def(
    fn: Callable, lines: tuple[list[str], int] | None
) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, int, bool]:
    """The def of `fn` parsed from its source (None if the source holds
    something else, e.g. a lambda), numbered from its code's first line; the
    indentation `dedent` removed; whether it is `lines`, checked (`source.read_def`)."""
    fn_def, indent, _, exact = read_def(fn, fn.__code__.co_firstlineno, lines)
    return fn_def, indent, exact


def _rewritten_module(fn: Callable, fn_def: ast.FunctionDef, indent: int) -> CodeType:
    """Rewrites `fn_def` (the source of `fn`) and compiles the module that
    defines the factory around it."""
    code: CodeType = fn.__code__
    fn_def.decorator_list = []
    # Under its own name inside the factory, the function would see itself as a
    # closure variable: a kernel calling itself by name would recurse in Python
    # instead of reaching the kernel object (which refuses it), and a helper
    # calling itself would skip `__mt_call`.
    fn_def.name = _KERNEL
    _strip_annotations(fn_def)
    if any(isinstance(n, ast.With) for n in walk(fn_def)):
        _CheckedContexts().visit(fn_def)
    carried = carried_names(fn_def)
    _Rewriter(carried).generic_visit(fn_def)

    params = [ast.arg(arg=name) for name in (*HELPERS, *code.co_freevars)]
    factory = ast.FunctionDef(
        name=_FACTORY,
        args=ast.arguments(
            posonlyargs=[], args=params, vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]
        ),
        body=[fn_def, ast.Return(value=_name(fn_def.name))],
        decorator_list=[],
        returns=None,
    )
    if "type_params" in ast.FunctionDef._fields:
        factory.type_params = []
    ast.copy_location(factory, fn_def)
    tree = ast.Module(body=[factory], type_ignores=[])
    fix_missing_locations(tree)
    _shift_columns(tree, indent)
    return compile(tree, code.co_filename, "exec", dont_inherit=True)


def _factory_of(fn: Callable, module: CodeType) -> Callable[..., Callable]:
    """The factory `module` (from `_rewritten_module`) defines, run with `fn`'s globals."""
    namespace: dict[str, object] = {}
    exec(module, fn.__globals__, namespace)  # noqa: S102 - the function's own rewritten source
    factory = namespace[_FACTORY]
    factory.__code__ = _renamed_kernel(factory.__code__, fn)
    helpers = tuple(HELPERS.values())
    return lambda *cells: factory(*helpers, *cells)  # type: ignore[operator]


def rewrite(fn: Callable) -> Callable[..., Callable]:
    """A factory `(*free_variable_values) -> rewritten kernel function`.

    The rewritten def is compiled with the kernel's own file name and line
    numbers and runs with the kernel's globals. It sits inside the factory so
    that the helpers and the kernel's free variables (kernels defined inside a
    function) are closure variables of it. A rewrite an earlier process stored
    (`code_cache`) is used as it is.
    """
    code: CodeType = fn.__code__
    cache = code_cache.key(fn, "kernel")
    module = code_cache.load(cache[0]) if cache is not None else None
    if module is None:
        kernel_def, indent, exact = _read_def(fn, cache[1] if cache is not None else None)
        if kernel_def is None:
            raise TypeError(f"kernel {fn.__name__}: expected the source of one plain `def`, found something else")
        # The tree's line numbers are the file's (see `_read_def`).
        check_supported(kernel_def, fn.__name__, code.co_filename, 1)
        module = _rewritten_module(fn, kernel_def, indent)
        if cache is not None and exact:
            code_cache.store(cache[0], module)
    return _factory_of(fn, module)


# ------------------------------------------------------------------ helpers

# The rewrite of each helper's code, by identity (see `cached_factory`).
_HELPERS: dict[int, tuple[CodeType, dict, Callable[..., Callable] | None]] = {}
_METILE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_tracing = threading.local()


def cached_factory(fn: Callable, make: Callable[[Callable], Callable[..., Callable] | None], cache: dict) -> Any:
    """`make(fn)`, once per code object and globals. `cache` holds (code,
    globals, factory) by the code's id, keeping both alive so their ids are not
    reused (equal code objects from a reloaded module must not share a factory
    bound to the old globals)."""
    code = fn.__code__
    entry = cache.get(id(code))
    if entry is not None and entry[0] is code and entry[1] is fn.__globals__:
        return entry[2]
    factory = make(fn)
    cache[id(code)] = (code, fn.__globals__, factory)
    return factory


def cell_values(fn: Callable) -> list[object]:
    """The current values of `fn`'s closure cells (UNDEFINED for an empty one)."""
    values = []
    for cell in fn.__closure__ or ():
        try:
            values.append(cell.cell_contents)
        except ValueError:  # assigned later in the enclosing function
            values.append(_metile.UNDEFINED)
    return values


class kernel_package:  # noqa: N801 - used like a function, in a `with`
    """While a kernel is traced: its module and top-level package, whose installed
    helper functions are rewritten like the user's own (see `_is_user_function`)."""

    def __init__(self, fn: Callable) -> None:
        self.module = getattr(fn, "__module__", "") or ""
        self.package = self.module.split(".")[0]

    def __enter__(self) -> None:
        self.saved = getattr(_tracing, "package", None), getattr(_tracing, "module", None)
        _tracing.package, _tracing.module = self.package, self.module

    def __exit__(self, *exc: object) -> None:
        _tracing.package, _tracing.module = self.saved


# Functions of metile's own package a kernel called (`metile.load`, ...): called as they are,
# whatever the kernel, so known by identity from the second call on, with the code each
# had then (a function given other code is looked at again); kept alive, so ids are not reused.
_METILE_FUNCTIONS: dict[int, tuple[FunctionType, CodeType]] = {}


def _is_metile_function(fn: FunctionType) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module == "metile" or module.startswith("metile.") or fn.__code__.co_filename.startswith(_METILE_DIR)


def _in_kernel_module(fn: FunctionType) -> bool:
    """Whether `fn` is defined in the module of the kernel being traced (whose
    helpers are rewritten even where that module is metile's own)."""
    module = getattr(fn, "__module__", None)
    return bool(module) and module == getattr(_tracing, "module", None)


def _is_user_function(fn: FunctionType) -> bool:
    """A function of user code (not metile's, not the standard library's, not
    an installed package's other than the kernel's own), or of the kernel's own
    module: metile's reference kernels call helpers written in the language too."""
    module = getattr(fn, "__module__", None) or ""
    if _in_kernel_module(fn):
        return True
    if _is_metile_function(fn):
        return False
    if not fn.__code__.co_filename.startswith(_LIBRARY_DIRS):
        return True
    return module.split(".")[0] == getattr(_tracing, "package", None)


def _helper_factory(fn: Callable) -> Callable[..., Callable] | None:
    cache = code_cache.key(fn, "helper")
    module = code_cache.load(cache[0]) if cache is not None else None
    if module is not None:
        return _factory_of(fn, module)
    try:
        fn_def, indent, exact = _read_def(fn, cache[1] if cache is not None else None)
    except (OSError, TypeError, SyntaxError):
        return None  # no source to read: the helper runs as it is
    if fn_def is None or fn_def.name != fn.__name__ or first_refused(fn_def) is not None:
        return None
    # Defaults were evaluated once, when the helper was defined: they are copied
    # from it, not evaluated again.
    fn_def.args.defaults = []
    fn_def.args.kw_defaults = [None] * len(fn_def.args.kwonlyargs)
    module = _rewritten_module(fn, fn_def, indent)
    if cache is not None and exact:
        code_cache.store(cache[0], module)
    return _factory_of(fn, module)


def _rewritten_helper(fn: FunctionType) -> Callable:
    """`fn` rewritten as a kernel is (or `fn` itself: a lambda, a function of a
    library, one whose source cannot be read or that holds a construct a kernel
    refuses, such as `try`, runs as plain Python)."""
    if _is_metile_function(fn) and not _in_kernel_module(fn):
        _METILE_FUNCTIONS[id(fn)] = (fn, fn.__code__)
        return fn
    if fn.__name__ == "<lambda>" or not _is_user_function(fn):
        return fn
    factory = cached_factory(fn, _helper_factory, _HELPERS)
    if factory is None:
        return fn
    rewritten = factory(*cell_values(fn))
    rewritten.__defaults__ = fn.__defaults__
    rewritten.__kwdefaults__ = fn.__kwdefaults__
    return rewritten
