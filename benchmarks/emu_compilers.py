"""msl-emu with each compiler present: the system's clang++ and the `ziglang` package's
`zig c++`. For each, the reference kernels of `emu_checks.py` run checked and unchecked,
each mode in its own process with an empty kernel cache, so a kernel's first launch is
its compile; results are checked against numpy every time. zig's own cache (its compiler
runtime and libc stubs, built on its first compile ever) is warmed first.

    python benchmarks/emu_compilers.py
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

from emu_checks import CASES  # noqa: E402
from timing import table  # noqa: E402

SYSTEM_CLANGS = ["clang++-19", "clang++", "clang++-22", "clang++-21", "clang++-20", "clang++-18"]
CHECKS = os.path.join(os.path.dirname(__file__), "emu_checks.py")


def compilers():
    found = []
    system = next((shutil.which(name) for name in SYSTEM_CLANGS if shutil.which(name)), None)
    if system:
        found.append(("clang " + os.path.basename(system), system))
    spec = importlib.util.find_spec("ziglang")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        zig = os.path.join(folder, "zig")
        if os.path.isfile(zig):
            found.append(("zig c++ (ziglang)", zig))
            break
    return found


def measure(compiler, checks):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, METILE_DEVICE="msl-emu", METILE_EMU_CHECKS=checks, METILE_CACHE_DIR=cache,
                   METILE_CXX=compiler)
        proc = subprocess.run([sys.executable, CHECKS, "--measure"], env=env, capture_output=True, text=True,
                              check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    found = compilers()
    if not found:
        sys.exit("no clang++ 18 or newer and no ziglang package here")
    for name, path in found:
        if "zig" in name:
            measure(path, "0")  # warms zig's own cache
    results = {name: (measure(path, "0"), measure(path, "1")) for name, path in found}
    rows = []
    for case in CASES:
        compiles = case != "gemm 512x512x512"
        for name, (unchecked, checked) in results.items():
            (first_u, ms_u), (first_c, ms_c) = unchecked[case], checked[case]
            first = (f"{first_u:.2f}", f"{first_c:.2f}") if compiles else ("(compiled)", "(compiled)")
            rows.append((case, name, *first, f"{ms_u:.2f}", f"{ms_c:.2f}"))
    print(f"msl-emu, {os.cpu_count()} cores; first launch = compile; median of 5 launches after it\n")
    print(table(["kernel", "compiler", "first launch s (unchecked)", "first launch s (checked)", "unchecked ms",
                 "checked ms"], rows))


if __name__ == "__main__":
    main()
