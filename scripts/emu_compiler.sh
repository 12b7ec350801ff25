# Sourced by setup.sh and test.sh: where the msl-emu backend's compiler comes from.

# The ziglang requirement of pyproject.toml's `emu` extra.
ZIGLANG_REQUIREMENT="ziglang>=0.17"

# Prints the first clang++ 18 or newer on PATH, in the order msl-emu tries them.
system_clang() {
    local name major
    for name in clang++-19 clang++ clang++-22 clang++-21 clang++-20 clang++-18; do
        command -v "$name" >/dev/null 2>&1 || continue
        major=$("$name" --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -n 1)
        if [ -n "$major" ] && [ "$major" -ge 18 ]; then
            echo "$name"
            return 0
        fi
    done
    return 1
}

# Prints the zig of the ziglang package installed in .venv, if there is one.
ziglang_zig() {
    .venv/bin/python - <<'PY'
import importlib.util
import os

spec = importlib.util.find_spec("ziglang")
for folder in (spec.submodule_search_locations or []) if spec else []:
    if os.path.isfile(os.path.join(folder, "zig")):
        print(os.path.join(folder, "zig"))
        break
PY
}
