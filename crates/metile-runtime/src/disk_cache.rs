//! The on-disk cache of compiled artifacts that every backend shares (CUDA
//! cubins, Metal libraries, autotune winners).
//!
//! Entries live under `METILE_CACHE_DIR` (else `$XDG_CACHE_HOME/metile`, else
//! `~/.cache/metile`), one folder per backend. A key is the SHA-256 of the
//! parts that decide the artifact (source text, compiler version, target...).
//! Each entry carries a checksum of its bytes: a truncated or corrupt entry is
//! reported as missing and removed, never trusted. Writes go to a private
//! temporary file renamed into place, so concurrent processes never see half an
//! entry.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The root of every backend's cache folder.
pub fn cache_root() -> PathBuf {
    match std::env::var_os("METILE_CACHE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => match (std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")) {
            (Some(xdg), _) if !xdg.is_empty() => PathBuf::from(xdg).join("metile"),
            (_, Some(home)) if !home.is_empty() => PathBuf::from(home).join(".cache").join("metile"),
            _ => std::env::temp_dir().join("metile"),
        },
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The cache key of an artifact: SHA-256 of its parts, each terminated so that
/// `["ab", "c"]` and `["a", "bc"]` differ.
pub fn cache_key(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hex(&hasher.finalize())
}

const MAGIC: &[u8; 8] = b"MTCACHE1";
const HEADER_LEN: usize = MAGIC.len() + 32;

/// One backend's folder of cached artifacts.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    /// The folder `name` under [`cache_root`].
    pub fn open(name: &str) -> DiskCache {
        DiskCache::at(cache_root().join(name))
    }

    /// A cache in `dir` (tests use a private folder).
    pub fn at(dir: impl Into<PathBuf>) -> DiskCache {
        DiskCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.bin"))
    }

    /// The bytes stored under `key`, or `None` when absent or corrupt (a corrupt
    /// entry is deleted so the caller's fresh result replaces it).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.path(key);
        let data = std::fs::read(&path).ok()?;
        let intact = data.len() >= HEADER_LEN
            && &data[..MAGIC.len()] == MAGIC
            && Sha256::digest(&data[HEADER_LEN..]).as_slice() == &data[MAGIC.len()..HEADER_LEN];
        if !intact {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        Some(data[HEADER_LEN..].to_vec())
    }

    /// Stores `bytes` under `key`, replacing any entry atomically.
    pub fn put(&self, key: &str, bytes: &[u8]) -> std::io::Result<()> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let tmp = self.dir.join(format!(
            "tmp-{}-{}-{key}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut data = Vec::with_capacity(HEADER_LEN + bytes.len());
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&Sha256::digest(bytes));
        data.extend_from_slice(bytes);
        let written = std::fs::write(&tmp, &data).and_then(|()| std::fs::rename(&tmp, self.path(key)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> DiskCache {
        let dir = std::env::temp_dir().join(format!("metile-disk-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        DiskCache::at(dir)
    }

    #[test]
    fn round_trips_and_replaces() {
        let cache = scratch("round");
        let key = cache_key(&[b"source", b"sm_90"]);
        assert_eq!(cache.get(&key), None);
        cache.put(&key, b"cubin bytes").unwrap();
        assert_eq!(cache.get(&key).as_deref(), Some(&b"cubin bytes"[..]));
        cache.put(&key, b"newer").unwrap();
        assert_eq!(cache.get(&key).as_deref(), Some(&b"newer"[..]));
        let _ = std::fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn corrupt_and_truncated_entries_read_as_missing() {
        let cache = scratch("corrupt");
        let key = cache_key(&[b"k"]);
        cache.put(&key, b"0123456789").unwrap();
        let path = cache.path(&key);
        let mut data = std::fs::read(&path).unwrap();
        let last = data.len() - 1;
        data[last] ^= 1;
        std::fs::write(&path, &data).unwrap();
        assert_eq!(cache.get(&key), None);
        assert!(!path.exists(), "a corrupt entry is removed");
        std::fs::write(&path, b"MTCA").unwrap();
        assert_eq!(cache.get(&key), None);
        let _ = std::fs::remove_dir_all(cache.dir());
    }

    #[test]
    fn keys_separate_their_parts() {
        assert_ne!(cache_key(&[b"ab", b"c"]), cache_key(&[b"a", b"bc"]));
        assert_eq!(cache_key(&[b"x"]).len(), 64);
    }
}
