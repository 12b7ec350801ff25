"""A hostile disk cache: truncated, garbage and swapped entries, concurrent writers, a process
killed mid-compile, folders other users own or can write, a relative METILE_CACHE_DIR, a
300-character kernel name, a corrupted shim header. Every case runs in a fresh process
(tests/isolated.py), so a crash is a failed test; each must run the right kernel, never crash.
The cuda cubin and metal library caches go through the same DiskCache (Rust unit tests in
crates/metile-runtime/src/disk_cache/tests.rs)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from isolated import assert_ok, run_isolated

import metile

pytestmark = pytest.mark.skipif(not metile.device_available("msl-emu"), reason="no clang for msl-emu here")

LONG_NAME = "k" * 300

KERNELS = f'''
import numpy as np
import metile


@metile.kernel
def add_one(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) + 1.0, mask=mask)


@metile.kernel
def times_two(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) * 2.0, mask=mask)


@metile.kernel
def {LONG_NAME}(X, Out, N, BLOCK: metile.constexpr):
    offs = metile.program_id(0) * BLOCK + metile.arange(0, BLOCK)
    mask = offs < N
    metile.store(Out + offs, metile.load(X + offs, mask=mask) - 3.0, mask=mask)


EXPECTED = {{"add_one": lambda x: x + 1, "times_two": lambda x: x * 2, "{LONG_NAME}": lambda x: x - 3}}


def check(name, block=128, n=1000):
    """Runs kernel `name` over a ragged size and checks every element."""
    x = np.arange(n, dtype=np.float32)
    out = np.full_like(x, -7.0)
    globals()[name][(metile.cdiv(n, block),)](x, out, n, BLOCK=block)
    np.testing.assert_array_equal(out, EXPECTED[name](x))
    print("ok", name[:20], block)
'''

MAGIC = b"MTCACHE2"


@pytest.fixture
def place(tmp_path):
    """A folder with the kernels module, a cache folder and a private TMPDIR."""
    (tmp_path / "hostile_kernels.py").write_text(KERNELS)
    (tmp_path / "tmpdir").mkdir(mode=0o700)
    return tmp_path


def env_for(place: Path, **extra: str) -> dict[str, str]:
    env = {"METILE_CACHE_DIR": str(place / "cache"), "TMPDIR": str(place / "tmpdir"), "PYTHONPATH": str(place)}
    env.update(extra)
    return env


def launch_code(*names: str, block: int = 128) -> str:
    calls = "\n".join(f"hostile_kernels.check({n!r}, block={block})" for n in names)
    return f"import warnings\nwarnings.simplefilter('always')\nimport hostile_kernels\n{calls}\n"


def run(place: Path, *names: str, block: int = 128, **extra: str) -> str:
    return assert_ok(run_isolated(launch_code(*names, block=block), device="msl-emu", env=env_for(place, **extra)))


def emu_folder(place: Path) -> Path:
    return place / "cache" / "msl-emu"


def entries(place: Path) -> set[Path]:
    return set(emu_folder(place).glob("*.entry"))


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".entry")) if folder.exists() else []


def only_new_entry(before: set[Path], after: set[Path]) -> Path:
    (new,) = after - before
    return new


def test_entries_are_hash_named_private_and_leave_nothing_behind(place):
    out = run(place, "add_one")
    assert "ok add_one" in out
    (entry,) = entries(place)
    assert len(entry.stem) == 64 and all(c in "0123456789abcdef" for c in entry.stem)
    data = entry.read_bytes()
    assert data[:8] == MAGIC and data[8:72] == entry.stem.encode()
    assert int.from_bytes(data[72:80], "little") == len(data) - 112
    assert emu_folder(place).stat().st_mode & 0o777 == 0o700
    assert (place / "cache").stat().st_mode & 0o777 == 0o700
    assert temporaries(emu_folder(place)) == [], "the session folder is removed at exit"
    assert list((place / "tmpdir").iterdir()) == [], "nothing of clang's in TMPDIR"


@pytest.mark.parametrize("cut", ["empty", "header", "half", "last byte"])
def test_a_truncated_entry_is_rebuilt_not_loaded(place, cut):
    run(place, "add_one")
    (entry,) = entries(place)
    full = entry.read_bytes()
    keep = {"empty": 0, "header": 112, "half": len(full) // 2, "last byte": len(full) - 1}[cut]
    entry.write_bytes(full[:keep])
    assert "ok add_one" in run(place, "add_one")
    assert entry.stat().st_size == len(full), "the entry is rebuilt"
    assert "ok add_one" in run(place, "add_one")


def test_a_garbage_entry_is_rebuilt_and_later_launches_use_the_new_one(place):
    run(place, "add_one")
    (entry,) = entries(place)
    size = entry.stat().st_size
    entry.write_bytes(os.urandom(size))
    assert "ok add_one" in run(place, "add_one")
    rebuilt = entry.read_bytes()
    assert rebuilt[:8] == MAGIC
    assert "ok add_one" in run(place, "add_one")
    assert entry.read_bytes() == rebuilt, "the rebuilt entry is used, not rebuilt again"


def test_swapped_entries_run_the_right_kernels(place):
    run(place, "add_one")
    first = entries(place)
    run(place, "times_two")
    add_entry, times_entry = next(iter(first)), only_new_entry(first, entries(place))
    add_bytes, times_bytes = add_entry.read_bytes(), times_entry.read_bytes()
    add_entry.write_bytes(times_bytes)
    times_entry.write_bytes(add_bytes)
    out = run(place, "add_one", "times_two")
    assert "ok add_one" in out and "ok times_two" in out
    assert add_entry.read_bytes()[8:72] == add_entry.stem.encode(), "each entry is its own again"
    assert times_entry.read_bytes()[8:72] == times_entry.stem.encode()


def entry_for(key: str, payload: bytes) -> bytes:
    """A well-formed entry, as someone who knows the format could plant."""
    header = MAGIC + key.encode() + len(payload).to_bytes(8, "little")
    return header + hashlib.sha256(header + payload).digest() + payload


def test_a_well_formed_entry_with_another_kernels_code_under_a_key_is_caught_by_its_key(place):
    # Swapping only the payloads (headers recomputed) is what a same-user attacker could do;
    # it is out of reach here, but an entry whose recorded key differs is never loaded.
    run(place, "add_one")
    first = entries(place)
    run(place, "times_two")
    add_entry, times_entry = next(iter(first)), only_new_entry(first, entries(place))
    times_payload = times_entry.read_bytes()[112:]
    add_entry.write_bytes(entry_for(times_entry.stem, times_payload))
    assert "ok add_one" in run(place, "add_one")


def test_concurrent_processes_compile_the_same_kernel(place):
    code = launch_code("add_one", "times_two")
    env = {**os.environ, **env_for(place), "METILE_DEVICE": "msl-emu"}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert "ok add_one" in out and "ok times_two" in out
    assert len(entries(place)) == 2
    assert temporaries(emu_folder(place)) == []
    assert "ok add_one" in run(place, "add_one", "times_two")


def test_a_process_killed_mid_compile_is_cleaned_up_by_the_next(place):
    # The child compiles one kernel after another; it is killed, with its clang, while a
    # compile runs (a work folder exists), as the OOM killer or a closed terminal would.
    blocks = [32, 64, 128, 256, 512, 1024]
    code = "import hostile_kernels\n" + "".join(
        f"hostile_kernels.check('add_one', block={b})\nhostile_kernels.check('times_two', block={b})\n"
        for b in blocks
    )
    env = {**os.environ, **env_for(place), "METILE_DEVICE": "msl-emu"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and child.poll() is None:
            if list(emu_folder(place).glob("session-*/work-*")) if emu_folder(place).exists() else []:
                break
            time.sleep(0.002)
        assert child.poll() is None, "the child finished before a compile was caught"
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    leftovers = temporaries(emu_folder(place))
    assert leftovers and all(name.startswith(f"session-{child.pid}.") for name in leftovers), leftovers
    assert list((place / "tmpdir").iterdir()) == [], "clang's temporaries were in the work folder"
    assert "ok add_one" in run(place, "add_one", "times_two")
    assert temporaries(emu_folder(place)) == [], "the next start removed the dead compile's folders"
    assert list((place / "tmpdir").iterdir()) == []


REFUSAL = "MetileWarning not using the disk cache in {}: {}"


def run_recording_warnings(place: Path, **extra: str) -> str:
    code = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import hostile_kernels\n"
        "    hostile_kernels.check('add_one')\n"
        "    hostile_kernels.check('add_one', block=64)\n"
        "for w in caught:\n"
        "    print(w.category.__name__, w.message)\n"
    )
    return assert_ok(run_isolated(code, device="msl-emu", env=env_for(place, **extra)))


def refusal_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if "not using the disk cache" in line]


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root")


@needs_root
def test_a_cache_folder_another_user_owns_is_refused_with_one_warning(place):
    cache = place / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, 12345, -1)
    out = run_recording_warnings(place)
    assert "ok add_one 128" in out and "ok add_one 64" in out
    (line,) = refusal_lines(out)
    assert line.startswith(REFUSAL.format(cache, f"it belongs to uid 12345, not to this user (uid {os.geteuid()})"))
    assert "compiles without a disk cache" in line and "chmod 700" in line
    assert list(cache.iterdir()) == [], "nothing is written into it"
    assert list((place / "tmpdir").iterdir()) == [], "the private session folder is removed at exit"


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_a_cache_folder_others_can_write_is_never_loaded_from(place, mode):
    # A well-formed entry for add_one's key, carrying times_two's code, as another local user
    # could plant it: a trusted folder would run it.
    good = place / "good"
    run(place, "add_one", METILE_CACHE_DIR=str(good))
    run(place, "times_two", METILE_CACHE_DIR=str(good / "other"))
    (add_entry,) = (good / "msl-emu").glob("*.entry")
    (times_entry,) = (good / "other" / "msl-emu").glob("*.entry")
    shared = place / "cache" / "msl-emu"
    shared.mkdir(parents=True)
    (shared / add_entry.name).write_bytes(entry_for(add_entry.stem, times_entry.read_bytes()[112:]))
    (place / "cache").chmod(0o700)
    shared.chmod(mode)
    out = run_recording_warnings(place)
    assert "ok add_one 128" in out
    (line,) = refusal_lines(out)
    assert line.startswith(REFUSAL.format(shared, f"other users can write to it (mode {mode:o})"))
    assert sorted(p.name for p in shared.iterdir()) == [add_entry.name], "nothing written, nothing removed"


def test_a_cache_folder_that_others_can_write_or_replace_is_refused(place):
    (place / "cache").mkdir(mode=0o770)
    (place / "cache").chmod(0o770)
    out = run_recording_warnings(place)
    assert "ok add_one 128" in out
    (line,) = refusal_lines(out)
    assert line.startswith(REFUSAL.format(place / "cache", "other users can write to it (mode 770)"))

    shared = place / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    out = run_recording_warnings(place, METILE_CACHE_DIR=str(shared / "cache"))
    assert "ok add_one 128" in out
    (line,) = refusal_lines(out)
    assert line.startswith(REFUSAL.format(
        shared / "cache",
        f"{shared}, which holds it, can be written by other users (mode 777, not sticky), who could replace it",
    ))


def default_env(place: Path) -> dict[str, str]:
    """No METILE_CACHE_DIR, HOME or XDG_CACHE_HOME: the cache goes to TMPDIR/metile-<uid>."""
    return {**env_for(place), "METILE_CACHE_DIR": "", "HOME": "", "XDG_CACHE_HOME": ""}


def test_without_home_the_default_folder_is_private_to_the_user(place):
    out = run_recording_warnings(place, **default_env(place))
    assert refusal_lines(out) == []
    default = place / "tmpdir" / f"metile-{os.geteuid()}"
    assert default.stat().st_mode & 0o777 == 0o700
    assert len(list((default / "msl-emu").glob("*.entry"))) == 2
    assert sorted(p.name for p in (place / "tmpdir").iterdir()) == [default.name]


@needs_root
def test_a_default_folder_made_first_by_another_user_is_refused(place):
    default = place / "tmpdir" / f"metile-{os.geteuid()}"
    default.mkdir(mode=0o755)
    os.chown(default, 12345, -1)
    out = run_recording_warnings(place, **default_env(place))
    assert "ok add_one 128" in out
    (line,) = refusal_lines(out)
    assert line.startswith(REFUSAL.format(default, "it belongs to uid 12345"))
    assert list(default.iterdir()) == []


@needs_root
def test_a_default_folder_planted_as_a_symlink_by_another_user_is_refused(place):
    target = place / "elsewhere"
    target.mkdir(mode=0o700)
    default = place / "tmpdir" / f"metile-{os.geteuid()}"
    default.symlink_to(target)
    os.lchown(default, 12345, -1)
    out = run_recording_warnings(place, **default_env(place))
    assert "ok add_one 128" in out
    (line,) = refusal_lines(out)
    assert line.startswith(REFUSAL.format(default, "it is a symbolic link made by uid 12345"))
    assert list(target.iterdir()) == []


@needs_root
def test_without_a_cache_or_a_usable_temporary_folder_the_compile_fails_clearly(place):
    cache = place / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, 12345, -1)
    not_a_folder = place / "not-a-folder"
    not_a_folder.write_text("x")
    code = (
        "import warnings\nwarnings.simplefilter('ignore')\nimport hostile_kernels\n"
        "try:\n    hostile_kernels.check('add_one')\n"
        "except RuntimeError as e:\n    print('RuntimeError', e)\n"
    )
    out = assert_ok(run_isolated(code, device="msl-emu", env=env_for(place, TMPDIR=str(not_a_folder))))
    assert "RuntimeError MSL emulator: preparing a folder to compile in: cannot create" in out
    assert str(not_a_folder) in out


def test_a_relative_cache_dir_works_and_stays_put_after_chdir(place):
    elsewhere = place / "elsewhere"
    elsewhere.mkdir()
    code = (
        "import os, hostile_kernels\n"
        "hostile_kernels.check('add_one')\n"
        f"os.chdir({str(elsewhere)!r})\n"
        "hostile_kernels.check('times_two')\n"
    )
    env = env_for(place, METILE_CACHE_DIR="rel/cache")
    out = assert_ok(run_isolated(code, device="msl-emu", env=env, cwd=str(place)))
    assert "ok add_one" in out and "ok times_two" in out
    assert len(list((place / "rel" / "cache" / "msl-emu").glob("*.entry"))) == 2
    assert not (elsewhere / "rel").exists(), "the cache does not move with the working folder"


def test_a_300_character_kernel_name(place):
    assert "ok kkkkkkkkkkkkkkkkkkkk" in run(place, LONG_NAME)
    (entry,) = entries(place)
    assert len(entry.name) == 70
    assert "ok kkkkkkkkkkkkkkkkkkkk" in run(place, LONG_NAME)


SHIM_NAMES = {"metal_stdlib", "metal_compute", "runtime.h", "runtime_impl.h", "base.h"}


def test_a_corrupted_shim_header_in_the_cache_is_never_used(place):
    run(place, "add_one")
    # The shim is written fresh into each compile's private folder and never kept in the
    # cache; corrupt any shim-like file there and plant a corrupt shim where older versions
    # kept one, then compile a new kernel.
    for path in (place / "cache").rglob("*"):
        if path.name in SHIM_NAMES and path.is_file():
            path.write_text("#error corrupted shim\n")
    legacy = emu_folder(place) / "shim-0123456789abcdef"
    (legacy / "metile_emu").mkdir(parents=True)
    (legacy / "metal_stdlib").write_text("#error corrupted shim\n")
    (legacy / "metile_emu" / "runtime_impl.h").write_text("#error corrupted shim\n")
    assert "ok times_two" in run(place, "times_two")
    assert "ok add_one" in run(place, "add_one", block=64)


def test_autotune_winners_swapped_between_keys_are_retuned(tmp_path):
    code = """
import json, os, sys, numpy as np, metile
sys.path.insert(0, {where!r})
from hostile_kernels import add_one
tuned = metile.autotune([metile.Config(BLOCK=32), metile.Config(BLOCK=64)], key=["N"], verbose=True)(add_one)
for n in (50, 70):
    x = np.arange(n, dtype=np.float32); out = np.zeros_like(x)
    tuned[lambda m: (metile.cdiv(n, m["BLOCK"]),)](x, out, n)
    np.testing.assert_array_equal(out, x + 1)
"""
    (tmp_path / "hostile_kernels.py").write_text(KERNELS)
    env = {"METILE_CACHE_DIR": str(tmp_path / "cache"), "METILE_AUTOTUNE": "1"}
    first = assert_ok(run_isolated(code.format(where=str(tmp_path)), device="cpu", env=env))
    assert first.count("config 1/2") == 2
    a, b = sorted((tmp_path / "cache" / "autotune").glob("*.entry"))
    a_bytes, b_bytes = a.read_bytes(), b.read_bytes()
    a.write_bytes(b_bytes)
    b.write_bytes(a_bytes)
    again = assert_ok(run_isolated(code.format(where=str(tmp_path)), device="cpu", env=env))
    assert again.count("config 1/2") == 2 and "cached" not in again
    assert json.loads(a.read_bytes()[112:])["config"].startswith("Config(")
    third = assert_ok(run_isolated(code.format(where=str(tmp_path)), device="cpu", env=env))
    assert third.count("cached for") == 2


def test_autotune_in_a_folder_others_can_write_tunes_in_memory_and_warns_once(tmp_path):
    (tmp_path / "hostile_kernels.py").write_text(KERNELS)
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    code = f"""
import sys, warnings, numpy as np, metile
sys.path.insert(0, {str(tmp_path)!r})
from hostile_kernels import add_one
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    tuned = metile.autotune([metile.Config(BLOCK=32), metile.Config(BLOCK=64)], key=["N"])(add_one)
    for n in (50, 70):
        x = np.arange(n, dtype=np.float32); out = np.zeros_like(x)
        tuned[lambda m: (metile.cdiv(n, m["BLOCK"]),)](x, out, n)
        np.testing.assert_array_equal(out, x + 1)
    print("dir", metile._metile.autotune_cache_dir())
for w in caught:
    print(w.category.__name__, w.message)
"""
    out = assert_ok(run_isolated(code, device="cpu", env={"METILE_CACHE_DIR": str(cache), "METILE_AUTOTUNE": "1"}))
    assert "dir None" in out
    (line,) = refusal_lines(out)
    assert line.startswith(REFUSAL.format(cache, "other users can write to it (mode 777)"))
    assert list(cache.iterdir()) == []
