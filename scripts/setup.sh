#!/usr/bin/env bash
# Builds meTile from source into ./.venv: a virtualenv with numpy/pytest/maturin,
# the abi3 wheel, and, where the system has no clang++ 18 or newer for the MSL
# emulator, the `ziglang` package (pyproject's `emu` extra), whose `zig c++` is
# one. Needs neither root nor apt; msl-emu finds the package by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/emu_compiler.sh
source scripts/emu_compiler.sh

if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "numpy>=1.22" "pytest>=7" "maturin>=1.7,<2" ruff

if [ -n "${METILE_CXX:-}" ]; then
    echo "== msl-emu compiler: METILE_CXX=$METILE_CXX"
elif cxx=$(system_clang); then
    echo "== msl-emu compiler: $cxx"
else
    echo "== no clang++ 18 or newer here: installing $ZIGLANG_REQUIREMENT for the msl-emu backend"
    .venv/bin/python -m pip install -q "$ZIGLANG_REQUIREMENT" \
        || echo "!! could not install ziglang: the msl-emu backend will be unavailable"
fi

echo "== building the metile wheel (release)"
rm -rf dist
.venv/bin/maturin build --release -q -o dist
.venv/bin/python -m pip install -q --force-reinstall --no-deps dist/metile-*.whl
echo "== metile installed: $(.venv/bin/python -c 'import metile; print(metile.__file__)')"
echo "== devices here: $(.venv/bin/python -c 'import metile; print(", ".join(d for d in ("cpu", "msl-emu", "cuda", "metal") if metile.device_available(d)))')"
