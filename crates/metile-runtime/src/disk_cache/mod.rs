//! The on-disk cache of compiled artifacts that every backend shares (CUDA
//! cubins, Metal libraries, msl-emu shared objects, autotune winners).
//!
//! Entries live under [`cache_root`], one folder per backend, which must be
//! private to the user ([`folder`] says what that means; a folder that is not
//! is refused and the cache is off for it). A key is the SHA-256 of the parts
//! that decide the artifact (source text, compiler version, target...); the
//! entry's file is named by the key, so names are bounded whatever the kernel.
//! An entry records its key, its length and a SHA-256 of the whole, and is
//! checked on every read: an entry that does not match (truncated, corrupt,
//! another key's entry, an older format) reads as missing and is removed, so
//! the caller's fresh result replaces it. Writes go to a temporary file of this
//! process, renamed into place, so concurrent processes never see half an
//! entry; a killed writer's temporaries are removed by the next process.

mod folder;
mod scratch;

pub use folder::cache_root;
pub(crate) use folder::private_folder;
pub(crate) use scratch::{nonce, session, WorkFolder};

use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

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

/// The cache key of an artifact: SHA-256 of its parts, each preceded by its
/// length so that `["ab", "c"]` and `["a", "bc"]` differ.
pub fn cache_key(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hex(&hasher.finalize())
}

/// Entry layout: magic, the key (64 hex digits), the payload's length (u64
/// little-endian), SHA-256 of everything before it and of the payload, payload.
const MAGIC: &[u8; 8] = b"MTCACHE2";
const KEY_LEN: usize = 64;
const CHECKSUM_LEN: usize = 32;
const HEADER_LEN: usize = MAGIC.len() + KEY_LEN + 8 + CHECKSUM_LEN;
const ENTRY_EXTENSION: &str = "entry";
/// Larger files are not read: no artifact comes near this.
const MAX_ENTRY_BYTES: u64 = 1 << 30;

fn is_key(key: &str) -> bool {
    key.len() == KEY_LEN && key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn checksum(key: &str, payload: &[u8]) -> [u8; CHECKSUM_LEN] {
    let mut hasher = Sha256::new();
    hasher.update(MAGIC);
    hasher.update(key.as_bytes());
    hasher.update((payload.len() as u64).to_le_bytes());
    hasher.update(payload);
    hasher.finalize().into()
}

/// The payload of `data` if it is an intact entry for `key`.
fn verified_payload<'a>(data: &'a [u8], key: &str) -> Option<&'a [u8]> {
    if data.len() < HEADER_LEN || &data[..MAGIC.len()] != MAGIC {
        return None;
    }
    let (header, payload) = data.split_at(HEADER_LEN);
    let key_end = MAGIC.len() + KEY_LEN;
    if &header[MAGIC.len()..key_end] != key.as_bytes() {
        return None;
    }
    let length = u64::from_le_bytes(header[key_end..key_end + 8].try_into().ok()?);
    if length != payload.len() as u64 {
        return None;
    }
    (header[key_end + 8..] == checksum(key, payload)).then_some(payload)
}

/// One backend's folder of cached artifacts; without a usable folder every
/// read misses and every write is skipped.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: Option<PathBuf>,
}

impl DiskCache {
    /// The folder `name` under [`cache_root`], if it and the root are private
    /// to this user (else the cache is off, and a warning is queued once).
    pub fn open(name: &str) -> DiskCache {
        let dir = cache_root()
            .and_then(|root| folder::private_folder(&root))
            .and_then(|root| folder::private_folder(&root.join(name)));
        DiskCache::checked(dir)
    }

    /// A cache in `dir`, checked as [`DiskCache::open`] checks its folder.
    pub fn at(dir: impl Into<PathBuf>) -> DiskCache {
        let dir: PathBuf = dir.into();
        let dir = std::path::absolute(&dir)
            .map_err(|e| format!("{} cannot be made absolute: {e}", dir.display()))
            .and_then(|dir| folder::private_folder(&dir));
        DiskCache::checked(dir)
    }

    /// A cache that stores nothing.
    pub fn disabled() -> DiskCache {
        DiskCache { dir: None }
    }

    fn checked(dir: Result<PathBuf, String>) -> DiskCache {
        let dir = dir.ok();
        if let Some(dir) = &dir {
            remove_leftovers_once(dir);
        }
        DiskCache { dir }
    }

    /// The folder, or `None` when the cache is off.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Where the entry for `key` lives (whether or not it exists).
    pub fn entry_path(&self, key: &str) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        is_key(key).then(|| dir.join(format!("{key}.{ENTRY_EXTENSION}")))
    }

    /// The bytes stored under `key`, or `None` when absent, unreadable or not
    /// an intact entry for `key` (such an entry is removed).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        let path = self.entry_path(key)?;
        let size = std::fs::metadata(&path).ok()?.len();
        let payload = if size <= MAX_ENTRY_BYTES {
            std::fs::read(&path)
                .ok()
                .and_then(|data| verified_payload(&data, key).map(<[u8]>::to_vec))
        } else {
            None
        };
        if payload.is_none() {
            let _ = std::fs::remove_file(&path);
        }
        payload
    }

    /// Stores `bytes` under `key`, replacing any entry atomically; returns the
    /// entry's path. Fails when the cache is off or cannot be written.
    pub fn put(&self, key: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let path = self.entry_path(key).ok_or_else(|| {
            std::io::Error::other(match self.dir {
                None => "the disk cache is off".to_string(),
                Some(_) => format!("`{key}` is not a cache key"),
            })
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        // Recreated if something removed it while this process ran.
        folder::create_private(dir).map_err(std::io::Error::other)?;
        let tmp = dir.join(format!("{}.part", scratch::temp_name("tmp")));
        let written = write_new(&tmp, key, bytes).and_then(|()| std::fs::rename(&tmp, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map(|()| path)
    }
}

fn write_new(path: &Path, key: &str, payload: &[u8]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(MAGIC)?;
    file.write_all(key.as_bytes())?;
    file.write_all(&(payload.len() as u64).to_le_bytes())?;
    file.write_all(&checksum(key, payload))?;
    file.write_all(payload)
}

/// A killed process's temporaries in `dir` are removed by the first process to
/// open it after.
fn remove_leftovers_once(dir: &Path) {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static CLEANED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let mut cleaned = CLEANED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if cleaned.get_or_insert_with(HashSet::new).insert(dir.to_path_buf()) {
        scratch::remove_leftovers(dir, scratch::TEMP_PREFIXES);
    }
}

#[cfg(test)]
mod tests;
