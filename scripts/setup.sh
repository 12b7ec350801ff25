#!/usr/bin/env bash
# Builds meTile from source into ./.venv: system packages (clang for the MSL
# emulator), a virtualenv with numpy/pytest/maturin, and the abi3 wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v clang++-19 >/dev/null 2>&1 && [ -z "${METILE_CXX:-}" ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "== installing clang-19 (used by the msl-emu backend)"
        (apt-get install -y -qq clang-19 >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq clang-19 >/dev/null; }) \
            || echo "!! could not install clang-19: the msl-emu backend will be unavailable"
    else
        echo "!! clang++-19 not found and cannot install it: the msl-emu backend will be unavailable"
    fi
fi

if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "numpy>=1.22" "pytest>=7" "maturin>=1.7,<2" ruff

echo "== building the metile wheel (release)"
rm -rf dist
.venv/bin/maturin build --release -q -o dist
.venv/bin/python -m pip install -q --force-reinstall --no-deps dist/metile-*.whl
echo "== metile installed: $(.venv/bin/python -c 'import metile; print(metile.__file__)')"
