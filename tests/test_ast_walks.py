"""The frontend's tree walks (`_frontend/astwalk.py`) give what `ast`'s own give, in the same
order, on the sources of real kernels: a difference would move an op's line or change a
rewrite."""

import ast
import importlib
import inspect
import textwrap

import pytest

from metile.testing import reference_kernels

astwalk = importlib.import_module("metile._frontend.astwalk")
tutorials = importlib.import_module("test_tutorials")

SOURCES = [
    reference_kernels.softmax.fn,
    reference_kernels.layernorm.fn,
    reference_kernels.gemm_epilogue.fn,
    tutorials.matmul_kernel.fn,
    tutorials._attn_fwd_inner,
    astwalk.fix_missing_locations,
    astwalk.NodeTransformer.generic_visit,
]


def _tree(fn):
    return ast.parse(textwrap.dedent(inspect.getsource(fn)))


def _dump(node):
    return ast.dump(node, include_attributes=True)


@pytest.mark.parametrize("fn", SOURCES, ids=lambda f: f.__name__)
def test_walk_and_children_are_asts(fn):
    tree = _tree(fn)
    assert list(astwalk.walk(tree)) == list(ast.walk(tree))
    for node in ast.walk(tree):
        assert astwalk.child_nodes(node) == list(ast.iter_child_nodes(node))


def _strip_some_positions(tree):
    """Removes the positions of every third node, and ends of every fifth (None),
    as generated nodes lack them."""
    for i, node in enumerate(ast.walk(tree)):
        if i % 3 == 1:
            for attr in ("lineno", "col_offset", "end_lineno", "end_col_offset"):
                if hasattr(node, attr):
                    delattr(node, attr)
        elif i % 5 == 2 and hasattr(node, "end_lineno"):
            node.end_lineno = None
            node.end_col_offset = None
    return tree


@pytest.mark.parametrize("fn", SOURCES, ids=lambda f: f.__name__)
def test_fix_missing_locations_is_asts(fn):
    ours = astwalk.fix_missing_locations(_strip_some_positions(_tree(fn)))
    theirs = ast.fix_missing_locations(_strip_some_positions(_tree(fn)))
    assert _dump(ours) == _dump(theirs)


def _transformer(base):
    """The same transformer on either base: it replaces, removes and splices."""

    class Transformer(base):
        def visit_Name(self, node):
            if node.id.startswith("BLOCK"):
                return ast.copy_location(ast.Constant(value=node.id), node)
            return node

        def visit_Pass(self, node):
            return None

        def visit_Expr(self, node):
            self.generic_visit(node)
            return [node, ast.copy_location(ast.Pass(), node)]

        def visit_Assign(self, node):
            self.generic_visit(node)
            if isinstance(node.value, ast.Constant):
                return None
            return node

    return Transformer


@pytest.mark.parametrize("fn", SOURCES, ids=lambda f: f.__name__)
def test_node_transformer_is_asts(fn):
    ours = _transformer(astwalk.NodeTransformer)().visit(_tree(fn))
    theirs = _transformer(ast.NodeTransformer)().visit(_tree(fn))
    assert _dump(ours) == _dump(theirs)


liveness = importlib.import_module("metile._frontend.liveness")

NAME_SOURCES = [
    *SOURCES,
    liveness.Liveness._stmt,
    importlib.import_module("metile._frontend.rewrite")._rewritten_module,
]


@pytest.mark.parametrize("fn", NAME_SOURCES, ids=lambda f: f.__name__)
def test_stored_names_computed_once_per_node_are_the_walks(fn):
    tree = _tree(fn)
    names = liveness._Names()
    for node in ast.walk(tree):
        assert names.stores(node) == liveness.stored_names(node)
        for field in ("body", "orelse", "targets", "decorator_list"):
            nodes = getattr(node, field, None)
            if isinstance(nodes, list):
                assert names.stores(nodes) == liveness.stored_names(nodes)


def test_stored_names_of_every_binding_construct():
    source = textwrap.dedent(
        """
        def f(a):
            x = 1
            y: int = 2
            z += 3
            del w
            for i, (j, k) in pairs:
                pass
            with open(p) as handle:
                pass
            try:
                pass
            except ValueError as error:
                pass
            import os.path
            from math import sqrt as root
            squares = [q * q for q in range(3) if (kept := q)]
            adder = lambda v: (inner := v)
            if (seen := check()):
                pass

            @decorate(made := 1)
            def nested():
                hidden = 1

            class Thing:
                attribute = 1
        """
    )
    body = ast.parse(source).body[0].body
    names = liveness._Names()
    assert names.stores(body) == liveness.stored_names(body)
    assert names.stores(body) == {
        "x", "y", "z", "w", "i", "j", "k", "handle", "error", "os", "root", "squares", "kept", "adder",
        "inner", "seen", "made", "nested", "Thing",
    }
