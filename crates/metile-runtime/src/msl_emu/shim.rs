//! The Metal shim headers, embedded in the crate so an installed package needs
//! no source tree, and written into each compile's private work folder, where
//! clang finds them with `-I`. They are never kept in the cache: a copy that
//! is written fresh for every compile cannot be stale or corrupt.

use super::EmuError;
use crate::disk_cache::hex;
use sha2::{Digest, Sha256};
use std::path::Path;

macro_rules! shim_file {
    ($name:literal) => {
        ($name, include_str!(concat!("../../msl_emu_shim/", $name)))
    };
}

/// (relative path, contents) of every shim file.
pub(crate) const SHIM_FILES: &[(&str, &str)] = &[
    shim_file!("metal_stdlib"),
    shim_file!("metal_atomic"),
    shim_file!("metal_common"),
    shim_file!("metal_compute"),
    shim_file!("metal_geometric"),
    shim_file!("metal_integer"),
    shim_file!("metal_logging"),
    shim_file!("metal_math"),
    shim_file!("metal_relational"),
    shim_file!("metal_simdgroup"),
    shim_file!("metal_simdgroup_matrix"),
    shim_file!("metal_tensor"),
    shim_file!("MetalPerformancePrimitives/MetalPerformancePrimitives.h"),
    shim_file!("metile_emu/base.h"),
    shim_file!("metile_emu/checks.h"),
    shim_file!("metile_emu/profile.h"),
    shim_file!("metile_emu/swizzles.h"),
    shim_file!("metile_emu/vec.h"),
    shim_file!("metile_emu/math.h"),
    shim_file!("metile_emu/runtime.h"),
    shim_file!("metile_emu/simd.h"),
    shim_file!("metile_emu/matrix.h"),
    shim_file!("metile_emu/tensor.h"),
    shim_file!("metile_emu/tensor_ops.h"),
    shim_file!("metile_emu/atomic.h"),
    shim_file!("metile_emu/runtime_impl.h"),
];

/// Hex digest of all shim files: the shim's version for cache keys.
pub(crate) fn shim_hash() -> String {
    let mut hasher = Sha256::new();
    for (name, text) in SHIM_FILES {
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(text.as_bytes());
        hasher.update([0]);
    }
    hex(&hasher.finalize())
}

/// Writes every shim file under `dir` (a private work folder).
pub(crate) fn write_into(dir: &Path) -> Result<(), EmuError> {
    for (name, text) in SHIM_FILES {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| EmuError::io(format!("creating {}", parent.display()), e))?;
        }
        std::fs::write(&path, text).map_err(|e| EmuError::io(format!("writing {}", path.display()), e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(dir: &Path, root: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("shim folder readable").flatten() {
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .expect("inside root")
                .to_string_lossy()
                .replace('\\', "/");
            if path.is_dir() {
                if relative != "tools" {
                    collect(&path, root, out);
                }
            } else {
                out.push(relative);
            }
        }
    }

    #[test]
    fn every_shim_file_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("msl_emu_shim");
        let mut on_disk = Vec::new();
        collect(&root, &root, &mut on_disk);
        on_disk.sort();
        let mut embedded: Vec<String> = SHIM_FILES.iter().map(|(name, _)| name.to_string()).collect();
        embedded.sort();
        assert_eq!(
            on_disk, embedded,
            "SHIM_FILES must list every file under msl_emu_shim/ (tools/ excepted)"
        );
    }
}
