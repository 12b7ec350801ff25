#!/usr/bin/env bash
# Sets meTile up (scripts/setup.sh) and runs every test: cargo, then pytest on
# every backend this machine has (cpu always; msl-emu when clang is present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== cargo test"
cargo test --workspace --quiet
echo "== pytest"
.venv/bin/python -m pytest -q "$@"
