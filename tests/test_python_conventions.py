"""meTile as a Python package: `metile.__version__`, the type stubs of the native module kept
in step with it, the `py.typed` marker, and `metile.MetileWarning` for every warning."""

from __future__ import annotations

import ast
import inspect
import os
import re
from pathlib import Path

import pytest
from isolated import assert_ok, run_isolated

import metile
from metile import _metile

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = Path(metile.__file__).resolve().parent
STUB = PACKAGE / "_metile.pyi"

# Members every class has, or that the stubs need not spell out.
IMPLICIT_MEMBERS = {"__doc__", "__module__", "__new__", "__hash__", "__weakref__", "__repr__", "__str__", "__dict__"}


def _pyproject_section(name: str) -> str:
    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(rf"^\[{re.escape(name)}\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    assert match, f"pyproject.toml has no [{name}]"
    return match.group(1)


def _stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text())


def _stub_names(tree: ast.Module) -> dict[str, ast.AST]:
    """The module-level names the stub declares, type aliases and stub-only (`_`) types left out."""
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("_"):
            continue
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            is_alias = isinstance(node.annotation, ast.Name) and node.annotation.id == "TypeAlias"
            if not is_alias:
                names[node.target.id] = node
    return names


def _class_members(node: ast.ClassDef) -> set[str]:
    return {
        item.name if isinstance(item, ast.FunctionDef) else item.target.id
        for item in node.body
        if isinstance(item, ast.FunctionDef) or (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))
    }


def test_version_is_the_distributions():
    project = _pyproject_section("project")
    declared = re.search(r'^version = "([^"]+)"', project, re.M).group(1)
    assert metile.__version__ == declared
    with pytest.raises(AttributeError, match="module 'metile' has no attribute 'no_such_name'"):
        metile.no_such_name  # noqa: B018


def test_stubs_and_marker_are_installed_with_the_package():
    assert STUB.is_file(), f"{STUB} is not installed: maturin must ship python/metile/_metile.pyi"
    assert (PACKAGE / "py.typed").is_file(), "the py.typed marker is not installed"


def test_every_name_of_the_native_module_has_a_stub_and_no_stub_is_stale():
    stubbed = set(_stub_names(_stub_tree()))
    actual = {name for name in dir(_metile) if not name.startswith("__")}
    assert actual - stubbed == set(), "names of metile._metile without a stub in _metile.pyi"
    assert stubbed - actual == set(), "stubs in _metile.pyi for names metile._metile does not have"


def test_every_class_member_has_a_stub():
    for name, node in _stub_names(_stub_tree()).items():
        runtime = getattr(_metile, name)
        if not isinstance(node, ast.ClassDef) or issubclass(runtime, BaseException) or not runtime.__dict__:
            continue
        actual = {m for m in vars(runtime) if m not in IMPLICIT_MEMBERS and not m.startswith("__") or m in {
            "__call__", "__getitem__", "__iter__", "__len__", "__enter__", "__exit__"}}
        stubbed = _class_members(node) - {"__init__"}
        assert actual - stubbed == set(), f"members of {name} without a stub"
        assert {m for m in stubbed if not m.startswith("__")} - actual == set(), f"stale stubs in {name}"


def _parameter_names(node: ast.FunctionDef) -> list[str]:
    args = node.args
    names = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        names.append("*" + args.vararg.arg)
    names += [a.arg for a in args.kwonlyargs]
    if args.kwarg:
        names.append("**" + args.kwarg.arg)
    return names


def _runtime_parameter_names(fn) -> list[str] | None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    prefix = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    return [prefix.get(p.kind, "") + p.name for p in signature.parameters.values()]


def test_function_stubs_have_the_functions_parameters():
    checked = 0
    for name, node in _stub_names(_stub_tree()).items():
        if not isinstance(node, ast.FunctionDef):
            continue
        runtime = _runtime_parameter_names(getattr(_metile, name))
        if runtime is None:
            continue
        assert _parameter_names(node) == runtime, f"metile._metile.{name}: stub and module disagree"
        checked += 1
    assert checked > 90


def test_language_names_are_typed_through_the_stubs():
    # Each `metile.X` a kernel uses is the native function, so the stub types it.
    stubbed = set(_stub_names(_stub_tree()))
    natives = [name for name in metile.language.__all__ if getattr(metile, name) is getattr(_metile, name, None)]
    assert len(natives) > 70 and set(natives) <= stubbed


def test_warnings_have_their_own_category():
    assert issubclass(metile.MetileWarning, RuntimeWarning)
    assert metile.MetileWarning is _metile.MetileWarning
    assert "MetileWarning" in metile.__all__


def test_a_refused_cache_folder_warns_with_the_category_at_the_callers_line(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # other users could plant code here: refused
    code = """\
import warnings
from metile import _metile
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _metile.autotune_cache_dir()
for w in caught:
    print(w.category.__name__, w.filename, w.lineno, w.message)
"""
    out = assert_ok(run_isolated(code, env={"METILE_CACHE_DIR": str(shared)}))
    assert f"MetileWarning <string> 5 not using the disk cache in {shared}" in out, out


def test_filters_on_the_category_silence_meTile(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    code = """
import warnings
import metile
warnings.simplefilter("error")
warnings.filterwarnings("ignore", category=metile.MetileWarning)
from metile import _metile
print("cache dir", _metile.autotune_cache_dir())
"""
    out = assert_ok(run_isolated(code, env={"METILE_CACHE_DIR": str(shared)}))
    assert "cache dir None" in out, out


def test_no_warning_goes_to_stderr_when_warnings_are_ignored(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    code = """
import warnings
warnings.simplefilter("ignore")
from metile import _metile
_metile.autotune_cache_dir()
"""
    outcome = run_isolated(code, env={"METILE_CACHE_DIR": str(shared)})
    assert_ok(outcome)
    assert outcome.stderr == ""


def test_the_emu_extra_and_setup_ask_for_the_same_ziglang():
    extras = _pyproject_section("project.optional-dependencies")
    emu = re.search(r'^emu = \["([^"]+)"\]', extras, re.M)
    assert emu, extras
    script = (ROOT / "scripts" / "emu_compiler.sh").read_text()
    assert f'ZIGLANG_REQUIREMENT="{emu.group(1)}"' in script
