//! The Metal shim headers, embedded in the crate so an installed package needs
//! no source tree, and written once per shim version into the cache directory
//! where clang finds them with `-I`.

use super::EmuError;
use crate::disk_cache::hex;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

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
    shim_file!("metal_math"),
    shim_file!("metal_relational"),
    shim_file!("metal_simdgroup"),
    shim_file!("metal_simdgroup_matrix"),
    shim_file!("metal_tensor"),
    shim_file!("MetalPerformancePrimitives/MetalPerformancePrimitives.h"),
    shim_file!("metile_emu/base.h"),
    shim_file!("metile_emu/checks.h"),
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

/// Writes the shim under `cache_dir/shim-<hash>` unless already there and
/// returns that folder. Files go to a private temporary folder first and are
/// renamed into place, so concurrent processes never see a partial shim.
pub(crate) fn materialize(cache_dir: &Path, hash: &str) -> Result<PathBuf, EmuError> {
    let dir = cache_dir.join(format!("shim-{}", &hash[..16]));
    if dir.join("metile_emu/runtime_impl.h").is_file() {
        return Ok(dir);
    }
    let staging = cache_dir.join(format!("shim-tmp-{}-{}", std::process::id(), unique_suffix()));
    for (name, text) in SHIM_FILES {
        let path = staging.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| EmuError::io(format!("creating {}", parent.display()), e))?;
        }
        std::fs::write(&path, text).map_err(|e| EmuError::io(format!("writing {}", path.display()), e))?;
    }
    match std::fs::rename(&staging, &dir) {
        Ok(()) => Ok(dir),
        // Another process won the race; its copy is identical.
        Err(_) if dir.join("metile_emu/runtime_impl.h").is_file() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(dir)
        }
        Err(e) => Err(EmuError::io(
            format!("installing the shim into {}", dir.display()),
            e,
        )),
    }
}

/// Distinguishes temporary files of concurrent compiles in one process.
pub(crate) fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    (COUNTER.fetch_add(1, Ordering::Relaxed) << 32) ^ nanos
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
