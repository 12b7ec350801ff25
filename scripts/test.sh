#!/usr/bin/env bash
# Sets meTile up (scripts/setup.sh) and runs every test: cargo, then pytest on
# every backend this machine has (cpu always; msl-emu when clang is present).
# On Linux the Metal backend is type-checked against objc2-metal first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$(uname -s)" != "Darwin" ]; then
    echo "== check-metal (type-checks the macOS-only Metal backend)"
    bash scripts/check-metal.sh
fi
echo "== cargo test"
cargo test --workspace --quiet
echo "== pytest"
.venv/bin/python -m pytest -q "$@"
