#!/usr/bin/env bash
# Type-checks the Metal backend (crates/metile-runtime/src/metal, macOS only) on
# any OS against the real objc2-metal bindings: cargo fetches objc2-metal into
# its registry, this copies that source into a scratch folder, drops its one
# `#[link(name = "Metal", kind = "framework")]` line (framework linking exists
# only on Apple targets), and runs `cargo check` and `cargo clippy -D warnings`
# of metile-runtime with `--cfg metile_metal_check`, the copy patched in and
# objc2/block2's GNUstep runtime features on. Nothing is linked or run, and
# nothing is vendored in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

registry_source() {
    local name="$1" version
    version=$(cargo metadata --format-version 1 --filter-platform aarch64-apple-darwin 2>/dev/null \
        | python3 -c "import json,sys; d=json.load(sys.stdin); print(next(p['version'] for p in d['packages'] if p['name']=='$name'))")
    local dir
    for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"$name-$version"; do
        if [ -f "$dir/Cargo.toml" ]; then
            echo "$dir"
            return
        fi
    done
    echo "!! $name $version is not in cargo's registry after cargo fetch" >&2
    exit 1
}

echo "== check-metal: fetching objc2-metal"
cargo fetch --target aarch64-apple-darwin --quiet
source_dir=$(registry_source objc2-metal)

scratch="target/metal-check"
rm -rf "$scratch/objc2-metal"
mkdir -p "$scratch"
cp -r "$source_dir" "$scratch/objc2-metal"
link_file="$scratch/objc2-metal/src/generated/mod.rs"
if ! grep -q '^#\[link(name = "Metal", kind = "framework")\]$' "$link_file"; then
    echo "!! the Metal framework link line was not found in $link_file" >&2
    exit 1
fi
sed -i.orig '/^#\[link(name = "Metal", kind = "framework")\]$/d' "$link_file"
rm -f "$link_file.orig"

# The patch rewrites Cargo.lock's objc2-metal entry; put the real one back after.
cp Cargo.lock "$scratch/Cargo.lock.saved"
trap 'cp "$scratch/Cargo.lock.saved" Cargo.lock' EXIT
patch="patch.crates-io.objc2-metal.path=\"$scratch/objc2-metal\""
features="objc2/gnustep-2-1,block2/gnustep-2-1"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg metile_metal_check"
export CARGO_TARGET_DIR="$scratch/target"
echo "== check-metal: cargo check"
cargo check --quiet --config "$patch" -p metile-runtime --features "$features" --all-targets
echo "== check-metal: cargo clippy"
cargo clippy --quiet --config "$patch" -p metile-runtime --features "$features" --all-targets -- -D warnings
echo "== check-metal: the Metal backend type-checks against objc2-metal $(basename "$source_dir")"
