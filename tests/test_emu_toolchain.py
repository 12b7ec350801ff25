"""Where msl-emu's compiler comes from: a system clang++, METILE_CXX (a clang++ or a zig),
or, with neither, the `ziglang` package (`pip install 'metile[emu]'`), found by itself.
Each case runs in a fresh process whose PATH holds no clang, so only the compiler the case
names can be the one that runs."""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from pathlib import Path

import pytest
from isolated import assert_ok, run_isolated

TESTS = os.path.dirname(os.path.abspath(__file__))


def _ziglang_zig() -> str | None:
    spec = importlib.util.find_spec("ziglang")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        zig = os.path.join(folder, "zig")
        if os.path.isfile(zig):
            return zig
    return None


ZIG = _ziglang_zig()
needs_ziglang = pytest.mark.skipif(ZIG is None, reason="the ziglang package is not installed")

KERNELS = '''
import numpy as np
import metile


@metile.kernel
def scaled_add(X, Y, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    x = metile.load(X + offs, mask=mask)
    y = metile.load(Y + offs, mask=mask)
    metile.store(Out + offs, x * 2.0 + y, mask=mask)


@metile.kernel
def row_softmax(X, Out, N, BLOCK: metile.constexpr):
    row = metile.program_id(0)
    cols = metile.arange(0, BLOCK)
    mask = cols < N
    x = metile.load(X + row * N + cols, mask=mask, other=-1e38)
    e = metile.exp(x - metile.max(x))
    metile.store(Out + row * N + cols, e / metile.sum(e), mask=mask)


@metile.kernel
def read_past_the_end(X, Out, BLOCK: metile.constexpr):
    offs = metile.arange(0, BLOCK)
    metile.store(Out + offs, metile.load(X + offs + 1))
'''

RUN = """
import sys
sys.path.insert(0, {folder!r})
import numpy as np
import metile
import toolchain_kernels as k

metile.set_device("msl-emu")
rng = np.random.default_rng(7)
n = 1000  # not a multiple of the block
x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
out = np.full(n, np.nan, np.float32)
k.scaled_add[(metile.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
np.testing.assert_array_equal(out, x * np.float32(2.0) + y)

rows, cols = 5, 100
m = rng.standard_normal((rows, cols)).astype(np.float32)
o = np.full_like(m, np.nan)
k.row_softmax[(rows,)](m, o, cols, BLOCK=128)
e = np.exp(m - m.max(1, keepdims=True))
np.testing.assert_allclose(o, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
print("results ok")
"""


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A folder with the kernels, a private cache, and an empty bin/ folder to be the only PATH
    (no clang, no binutils)."""
    (tmp_path / "toolchain_kernels.py").write_text(KERNELS)
    (tmp_path / "cache").mkdir(mode=0o700)
    (tmp_path / "bin").mkdir()
    return tmp_path


def _env(place: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "METILE_CXX"}
    env.update(PATH=str(place / "bin"), METILE_CACHE_DIR=str(place / "cache"), **extra)
    return env


def _run(place: Path, code: str, **extra: str):
    return run_isolated(code.format(folder=str(place)), env=_env(place, **extra), timeout=600)


def _fake_compiler(place: Path, version_line: str) -> str:
    path = place / "bin" / "fake-cxx"
    path.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@needs_ziglang
def test_ziglang_is_found_without_any_system_clang(place):
    out = assert_ok(_run(place, RUN))
    assert "results ok" in out
    # A second process loads what the first compiled from the disk cache.
    assert "results ok" in assert_ok(_run(place, RUN))


@needs_ziglang
def test_an_out_of_bounds_read_names_the_kernel_line_with_zigs_clang(place):
    code = """
import sys
sys.path.insert(0, {folder!r})
import numpy as np
import metile
import toolchain_kernels as k

metile.set_device("msl-emu")
try:
    k.read_past_the_end[(1,)](np.zeros(64, np.float32), np.zeros(64, np.float32), BLOCK=64)
except IndexError as e:
    print("IndexError:", e)
"""
    out = assert_ok(_run(place, code))
    assert "out-of-bounds access to buffer argument 0" in out, out
    assert "a 4-byte device read at byte offset 256; the buffer has 256 bytes" in out, out
    # The kernel line comes from the library's line tables, with no binutils on PATH.
    assert "metile.store(Out + offs, metile.load(X + offs + 1))" in out, out


@needs_ziglang
def test_metile_cxx_may_name_a_zig(place):
    assert "results ok" in assert_ok(_run(place, RUN, METILE_CXX=ZIG, METILE_EMU_CHECKS="0"))


def test_no_compiler_at_all_says_how_to_get_one(place):
    # A `ziglang` package without its executable hides the installed one, if any.
    fake = place / "fake_site" / "ziglang"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    code = """
import metile
assert not metile.device_available("msl-emu")
try:
    metile.set_device("msl-emu")
except ValueError as e:
    print("ValueError:", e)
"""
    # The fake package comes first; whatever path found metile stays after it.
    search = os.pathsep.join(p for p in (str(place / "fake_site"), os.environ.get("PYTHONPATH")) if p)
    out = assert_ok(_run(place, code, PYTHONPATH=search))
    assert "ValueError: the msl-emu backend is unavailable here" in out, out
    assert "not found: clang++-19, clang++, clang++-22, clang++-21, clang++-20, clang++-18;" in out, out
    assert "pip install 'metile[emu]'" in out, out


def test_metile_cxx_naming_a_missing_program_is_refused(place):
    code = """
import metile
try:
    metile.set_device("msl-emu")
except ValueError as e:
    print("ValueError:", e)
"""
    out = assert_ok(_run(place, code, METILE_CXX=str(place / "bin" / "no-such-clang++")))
    assert f"{place / 'bin' / 'no-such-clang++'}" in out and "not found" in out, out


def test_metile_cxx_naming_an_old_clang_is_refused(place):
    old = _fake_compiler(place, "Ubuntu clang version 14.0.0-1ubuntu1")
    code = """
import metile
try:
    metile.set_device("msl-emu")
except ValueError as e:
    print("ValueError:", e)
"""
    out = assert_ok(_run(place, code, METILE_CXX=old))
    assert f"unsuitable C++ compiler {old}: clang 14.0 is too old" in out, out


def test_metile_cxx_naming_something_that_is_not_clang_is_refused(place):
    gcc = _fake_compiler(place, "g++ (Debian 12.2.0-14) 12.2.0")
    code = """
import metile
try:
    metile.set_device("msl-emu")
except ValueError as e:
    print("ValueError:", e)
"""
    out = assert_ok(_run(place, code, METILE_CXX=gcc))
    assert f"unsuitable C++ compiler {gcc}: not clang" in out, out


def test_a_too_old_system_clang_is_passed_over_for_ziglang(place):
    if ZIG is None:
        pytest.skip("the ziglang package is not installed")
    _fake_compiler(place, "Ubuntu clang version 14.0.0-1ubuntu1")
    (place / "bin" / "fake-cxx").rename(place / "bin" / "clang++")
    assert "results ok" in assert_ok(_run(place, RUN))


if sys.platform != "linux":
    pytestmark = pytest.mark.skip(reason="the PATH-less cases use POSIX shell scripts")
