"""Ahead-of-time artifacts: one specialisation of a kernel compiled for a target
without a GPU, written as its MSL or CUDA C++ source, a C header and a JSON
manifest, which `metile_runtime::aot::Artifact` loads and launches from Rust
without Python. `python -m metile compile` is the command line; docs/aot.md
describes the files.

    metile.aot.compile_kernel(add, "X:*fp32,Y:*fp32,Out:*fp32,N:i32,BLOCK:256",
                              target="apple", out_dir="add-apple", grid="cdiv(N,BLOCK)")
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from metile import _frontend, _metile

__all__ = ["AotError", "compile_kernel", "load_kernel", "parse_signature"]

_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


class AotError(ValueError):
    """Input that cannot make an artifact: a bad signature, a missing kernel, ..."""


def load_kernel(spec: str) -> object:
    """The kernel named by `FILE.py:NAME`, importing the file as a module."""
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise AotError(f"'{spec}' does not name a kernel; write FILE.py:KERNEL (add.py:add_kernel)")
    path = Path(path_text)
    if not path.is_file():
        raise AotError(f"there is no file {path_text}")
    module_name = f"_metile_aot_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise AotError(f"{path_text} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    # The kernel's own imports of its neighbours work as when it is run.
    sys.path.insert(0, str(path.resolve().parent))
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure is reported as such
        sys.modules.pop(module_name, None)
        raise AotError(f"importing {path_text} failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(str(path.resolve().parent))
    kernels = sorted(n for n, v in vars(module).items() if _kernel_of(v) is not None)
    if not hasattr(module, name):
        found = ", ".join(kernels) if kernels else "none"
        raise AotError(f"{path_text} defines no kernel named '{name}'; its kernels: {found}")
    obj = getattr(module, name)
    if _kernel_of(obj) is None:
        raise AotError(
            f"'{name}' in {path_text} is a {type(obj).__name__}, not a @metile.kernel function"
        )
    return obj


def _kernel_of(obj: object) -> _metile.Kernel | None:
    """The kernel of `obj`: itself, or the kernel an autotuner tunes."""
    if isinstance(obj, _metile.Kernel):
        return obj
    inner = getattr(obj, "kernel", None)
    if isinstance(inner, _metile.Kernel) and hasattr(obj, "configs"):
        return inner
    return None


def _split_entries(text: str) -> list[str]:
    """`text` split at commas outside quotes and brackets."""
    entries, depth, quote, start = [], 0, "", 0
    for i, c in enumerate(text):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    entries.append(text[start:])
    return [e.strip() for e in entries]


def _dtype_name(text: str) -> str | None:
    """The meTile name of a dtype spelled the meTile, numpy or Triton way."""
    names = {
        "bool": "bool", "i1": "bool", "int1": "bool",
        "i8": "i8", "int8": "i8", "u8": "u8", "uint8": "u8",
        "i16": "i16", "int16": "i16", "u16": "u16", "uint16": "u16",
        "i32": "i32", "int32": "i32", "u32": "u32", "uint32": "u32",
        "i64": "i64", "int64": "i64", "u64": "u64", "uint64": "u64",
        "fp8e4nv": "f8e4m3", "f8e4m3": "f8e4m3", "float8e4nv": "f8e4m3", "float8_e4m3fn": "f8e4m3",
        "fp8e5": "f8e5m2", "f8e5m2": "f8e5m2", "float8e5": "f8e5m2", "float8_e5m2": "f8e5m2",
        "fp16": "f16", "f16": "f16", "float16": "f16", "bf16": "bf16", "bfloat16": "bf16",
        "fp32": "f32", "f32": "f32", "float32": "f32", "fp64": "f64", "f64": "f64", "float64": "f64",
    }  # fmt: skip
    return names.get(text)


_TYPES_HELP = "a type: *fp32 (a pointer), i32, i32:16 (a multiple of 16), fp16, bf16, i64, ..."


def parse_signature(
    kernel_name: str, fn: Callable, text: str
) -> tuple[list[tuple], dict[str, object]]:
    """`NAME:SPEC,...` for `fn`'s parameters: run-time parameters get a type
    (`*fp32`, `i32`, `i32:16`), constexprs a Python literal (`256`, `True`,
    `'float16'`). Returns specialize's run-time parameter list and the constexprs."""
    names, is_constexpr = _frontend.analyze_signature(fn)
    signature = f"{kernel_name}({', '.join(names)})"
    given: dict[str, str] = {}
    for entry in _split_entries(text):
        if not entry:
            raise AotError(f"the signature '{text}' has an empty entry")
        name, sep, spec = entry.partition(":")
        name, spec = name.strip(), spec.strip()
        if not sep or not _IDENTIFIER.match(name):
            raise AotError(
                f"signature entry '{entry}' does not start with a parameter name; write NAME:TYPE for "
                f"run-time parameters (X:*fp32, N:i32) and NAME:VALUE for constexprs (BLOCK:256)"
            )
        if name not in names:
            raise AotError(f"the signature names '{name}', which is no parameter of {signature}")
        if name in given:
            raise AotError(f"the signature gives '{name}' twice")
        if not spec:
            raise AotError(f"signature entry '{entry}' gives no type or value for '{name}'")
        given[name] = spec
    runtime: list[tuple] = []
    constexprs: dict[str, object] = {}
    defaults = {n: p.default for n, p in inspect.signature(fn).parameters.items()}
    for name, constant in zip(names, is_constexpr):
        spec = given.get(name)
        if constant:
            if spec is None:
                if defaults[name] is inspect.Parameter.empty:
                    raise AotError(
                        f"the signature gives no value for the constexpr '{name}' of {signature} "
                        f"(write {name}:VALUE)"
                    )
                continue
            constexprs[name] = _constexpr_value(name, spec)
        elif spec is None:
            raise AotError(
                f"the signature gives no type for the run-time parameter '{name}' of {signature} "
                f"(write {name}:TYPE, with {_TYPES_HELP})"
            )
        else:
            runtime.append(_runtime_param(name, spec))
    return runtime, constexprs


def _runtime_param(name: str, spec: str) -> tuple:
    pointer = spec.startswith("*")
    dtype_text, _, hint = spec.lstrip("*").strip().partition(":")
    dtype = _dtype_name(dtype_text.strip())
    if dtype is None:
        if _looks_like_literal(spec):
            raise AotError(
                f"'{name}' is a run-time parameter: give its type, not a value ({_TYPES_HELP}); "
                f"declare it metile.constexpr to compile a value in"
            )
        raise AotError(f"unknown type '{spec}' for '{name}'; give {_TYPES_HELP}")
    if pointer:
        if hint:
            raise AotError(
                f"'{name}:{spec}': pointers take no hint; the artifact states the alignment every buffer "
                f"needs (buffer_alignment in its manifest), which the runtime checks"
            )
        return (name, "ptr", dtype)
    if not hint:
        return (name, "scalar", dtype)
    if not dtype.startswith(("i", "u")):
        raise AotError(f"'{name}:{spec}': only integer scalars take a multiple-of hint")
    try:
        multiple = int(hint)
    except ValueError:
        multiple = 0
    if multiple < 1:
        raise AotError(f"'{name}:{spec}': the hint after the type is a positive multiple (i32:16)")
    return (name, "scalar", dtype, multiple)


def _looks_like_literal(spec: str) -> bool:
    try:
        ast.literal_eval(spec)
    except (ValueError, SyntaxError):
        return False
    return True


def _constexpr_value(name: str, spec: str) -> object:
    try:
        return ast.literal_eval(spec)
    except (ValueError, SyntaxError):
        pass
    if _dtype_name(spec.lstrip("*").partition(":")[0]) is not None:
        raise AotError(f"'{name}' is a constexpr: give its value ({name}:256), not a type")
    raise AotError(
        f"the value '{spec}' of the constexpr '{name}' is not a Python literal "
        f"(a number, True or False, or a quoted string such as 'float16')"
    )


def compile_kernel(
    kernel: object,
    signature: str,
    target: str,
    out_dir: str | os.PathLike[str],
    grid: str | None = None,
    num_sgs: int | None = None,
    cubin: bool = True,
) -> dict[str, Path]:
    """Writes the artifact of `kernel` for `signature` and `target` ("apple",
    "apple10" or "sm_XY") into `out_dir`; returns the files written by name
    (the source, the header, `manifest.json`, and a cubin where NVRTC is installed)."""
    k = _kernel_of(kernel)
    if k is None:
        raise AotError(f"compile_kernel takes a @metile.kernel function, got {type(kernel).__name__}")
    if num_sgs is not None and (isinstance(num_sgs, bool) or not isinstance(num_sgs, int) or num_sgs < 1):
        raise AotError(f"num_sgs is a positive number of simdgroups, got {num_sgs!r}")
    runtime, constexprs = parse_signature(k.__name__, k.fn, signature)
    traced = _frontend.specialize(k.fn, runtime, constexprs, {"threads_per_group": (num_sgs or 4) * 32})
    from metile import __version__

    files = _metile.aot_build(traced, target, num_sgs, grid, __version__, cubin)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, data in files:
        path = out / name
        partial = out / f".{name}.part"
        partial.write_bytes(data)
        partial.replace(path)
        written[name] = path
    return written
