"""The rewritten code of a kernel is kept on disk between processes (`_frontend/code_cache.py`):
a later process uses it instead of rewriting the source again, and never one made from other
source text, another place in the file, a corrupt entry, or a kernel the rewrite refused."""

import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np

import metile

code_cache = importlib.import_module("metile._frontend.code_cache")

KERNEL_SOURCE = """
import metile


@metile.kernel
def scaled(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    acc = metile.load(X + offs, mask=mask)
    for _ in metile.static_range(2):
        acc = acc * SCALE
    metile.store(Out + offs, acc, mask=mask)


SCALE = {scale}
"""

# Runs the kernel on the cpu device and prints its result; with REFUSE_REWRITE set, a rewrite
# of the source raises, so the run succeeds only with the rewrite an earlier process stored.
RUN = """
import importlib, os, sys
import numpy as np
import metile
rewrite = importlib.import_module("metile._frontend.rewrite")
if os.environ.get("REFUSE_REWRITE"):
    def refused(*args):
        raise RuntimeError("rewrote the source")
    rewrite._rewritten_module = refused
import kernels_under_test as k
x = np.arange(13, dtype=np.float32)
out = np.zeros(13, np.float32)
k.scaled[(4,)](x, out, 13, BLOCK=4)
print(out.tolist())
"""


def _run(folder, refuse=False):
    env = {
        **os.environ,
        "METILE_CACHE_DIR": str(folder / "cache"),
        "METILE_DEVICE": "cpu",
        # The kernels' folder first, then whatever made metile importable here.
        "PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p),
        # Kernel files are rewritten within a second at the same size: no stale bytecode.
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("REFUSE_REWRITE", None)
    if refuse:
        env["REFUSE_REWRITE"] = "1"
    return subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=120)


def _write(folder, scale=2.0, lines_before=0):
    text = "\n" * lines_before + KERNEL_SOURCE.format(scale=scale)
    (folder / "kernels_under_test.py").write_text(text)


def _entries(folder):
    rewrite_folder = folder / "cache" / "rewrite"
    return sorted(p for p in rewrite_folder.iterdir() if p.suffix == ".entry") if rewrite_folder.exists() else []


def test_a_later_process_uses_the_stored_rewrite(tmp_path):
    _write(tmp_path)
    first = _run(tmp_path)
    assert first.returncode == 0, first.stderr
    assert len(_entries(tmp_path)) == 1
    second = _run(tmp_path, refuse=True)
    assert second.returncode == 0, second.stderr
    expected = (np.arange(13, dtype=np.float32) * 4.0).tolist()
    assert eval(first.stdout) == expected  # noqa: S307 - a list printed by the child
    assert eval(second.stdout) == expected  # noqa: S307


def test_other_source_text_or_another_place_is_rewritten_again(tmp_path):
    _write(tmp_path)
    assert _run(tmp_path).returncode == 0
    # The kernel's own text is unchanged but it moved down the file: its code's lines differ.
    _write(tmp_path, lines_before=3)
    moved = _run(tmp_path, refuse=True)
    assert moved.returncode != 0 and "rewrote the source" in moved.stderr
    # A global the kernel reads is not part of its source: the stored rewrite serves.
    _write(tmp_path, scale=3.0)
    rescaled = _run(tmp_path, refuse=True)
    assert rescaled.returncode == 0, rescaled.stderr
    assert eval(rescaled.stdout) == (np.arange(13, dtype=np.float32) * 9.0).tolist()  # noqa: S307


def test_a_corrupt_entry_is_rewritten_and_replaced(tmp_path):
    _write(tmp_path)
    assert _run(tmp_path).returncode == 0
    (entry,) = _entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF
    entry.write_bytes(bytes(data))
    refused = _run(tmp_path, refuse=True)
    assert refused.returncode != 0 and "rewrote the source" in refused.stderr
    rerun = _run(tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    assert _run(tmp_path, refuse=True).returncode == 0


def helper_for_the_cache(x):
    return x + 1


def test_an_entry_that_is_no_code_reads_as_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("METILE_CACHE_DIR", str(tmp_path / "cache"))
    parts, _ = code_cache.key(helper_for_the_cache, "helper")
    assert metile._metile.rewrite_cache_put(parts, b"not marshal data")
    assert code_cache.load(parts) is None
    assert metile._metile.rewrite_cache_put(parts, __import__("marshal").dumps([1, 2]))
    assert code_cache.load(parts) is None


def test_a_refused_kernel_is_not_stored(tmp_path):
    source = textwrap.dedent(
        """
        import metile


        @metile.kernel
        def scaled(X, Out, N, BLOCK: metile.constexpr):
            try:
                pass
            finally:
                pass
        """
    )
    (tmp_path / "kernels_under_test.py").write_text(source)
    for _ in range(2):
        result = _run(tmp_path)
        assert result.returncode != 0
        assert "`try` is not supported in a kernel" in result.stderr
    assert _entries(tmp_path) == []
