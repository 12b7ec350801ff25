"""The rewritten code of kernels and helpers, kept between processes.

Rewriting a kernel's source (parse, checks, liveness, the rewrite itself,
`compile`) is the one-time cost of its first trace in a process: milliseconds
for the larger kernels, where tracing it again takes a tenth of one. What it
makes, a Python code object, is a function of the def's source text, where the
def sits (file and first line), the function's free variables, the Python
version (its bytecode) and meTile's frontend (the files below). Keyed by all of
them, it is kept in meTile's disk cache (`_metile.rewrite_cache_get`/`put`: a
folder private to the user, every entry checked against its key and checksum on
each read) as `marshal` data, as Python keeps a module's bytecode in
`__pycache__`, and a later process that finds it skips the rewrite.

Only rewrites of a def read from its code object's lines and checked
(`source.read_def`) are stored: their key holds exactly the text the rewrite
read. A rewrite that refuses the kernel is not stored, so it refuses again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
from collections.abc import Callable
from types import CodeType

from metile import _metile
from metile._frontend import source

# The frontend modules whose code decides a rewrite.
_FRONTEND = ("code_cache.py", "liveness.py", "rewrite.py", "source.py", "unsupported.py")
_fingerprint: bytes | None = None


def _frontend_fingerprint() -> bytes:
    """SHA-256 of the Python version's bytecode magic and the frontend's sources
    (empty when they cannot be read: nothing is then cached)."""
    global _fingerprint
    if _fingerprint is None:
        digest = hashlib.sha256(importlib.util.MAGIC_NUMBER)
        folder = os.path.dirname(os.path.abspath(__file__))
        try:
            for name in _FRONTEND:
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(f.read())
            _fingerprint = digest.digest()
        except OSError:
            _fingerprint = b""
    return _fingerprint


def _text(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def key(fn: Callable, kind: str) -> tuple[list[bytes], tuple[list[str], int]] | None:
    """The cache key of `fn`'s rewrite as `kind` ("kernel" or "helper"), and the
    lines of its def the rewrite must read; None when it cannot be cached."""
    fingerprint = _frontend_fingerprint()
    lines = source.block(fn)
    if not fingerprint or lines is None:
        return None
    code = fn.__code__
    parts = [
        fingerprint,
        _text(kind),
        _text(code.co_filename),
        _text(str(code.co_firstlineno)),
        _text("\0".join(code.co_freevars)),
        _text("".join(lines[0])),
    ]
    return parts, lines


def load(parts: list[bytes]) -> CodeType | None:
    """The rewritten module code stored under `parts`, if any."""
    data = _metile.rewrite_cache_get(parts)
    if data is None:
        return None
    try:
        code = marshal.loads(data)
    except (EOFError, TypeError, ValueError):
        return None
    return code if isinstance(code, CodeType) else None


def store(parts: list[bytes], code: CodeType) -> None:
    """Keeps `code` under `parts` (a cache that cannot be written only costs the
    rewrite in the next process)."""
    _metile.rewrite_cache_put(parts, marshal.dumps(code))
