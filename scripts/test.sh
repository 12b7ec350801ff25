#!/usr/bin/env bash
# Sets meTile up (scripts/setup.sh) and runs every test: cargo, then pytest on
# every backend this machine has (cpu always; msl-emu with a system clang++ or
# the ziglang package that setup.sh installs without one).
# On Linux the Metal backend is type-checked against objc2-metal first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$(uname -s)" != "Darwin" ]; then
    echo "== check-metal (type-checks the macOS-only Metal backend)"
    bash scripts/check-metal.sh
fi
echo "== cargo test"
# The Rust tests have no Python to find the ziglang package with: without a
# system clang, they get its zig through METILE_CXX (pytest finds it itself).
# shellcheck source=scripts/emu_compiler.sh
source scripts/emu_compiler.sh
zig=""
if [ -z "${METILE_CXX:-}" ] && ! system_clang >/dev/null; then
    zig=$(ziglang_zig)
fi
env ${zig:+METILE_CXX="$zig"} cargo test --workspace --quiet
# MLX's CPU build is small (about 40 MB), so the MLX interop tests run everywhere.
# torch's PyPI wheel brings several GB of CUDA libraries: its tests run where torch
# is already installed, or with METILE_TEST_TORCH=1, which installs it.
mlx_package="mlx[cpu]"
[ "$(uname -s)" = "Darwin" ] && mlx_package="mlx"
.venv/bin/python -m pip install -q "$mlx_package" \
    || echo "!! could not install $mlx_package: tests/test_mlx_arrays.py will be skipped"
if [ "${METILE_TEST_TORCH:-0}" = 1 ]; then
    .venv/bin/python -m pip install -q "torch>=2.4"
fi
echo "== pytest"
.venv/bin/python -m pytest -q "$@"
