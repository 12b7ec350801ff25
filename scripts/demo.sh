#!/usr/bin/env bash
# Sets meTile up (scripts/setup.sh) and runs the demo on the default device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python examples/demo.py
