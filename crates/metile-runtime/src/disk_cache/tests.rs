//! Hostile-cache tests of `DiskCache`: the CUDA cubin cache, the Metal library
//! cache and the autotune cache all go through it.

use super::*;

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("metile-disk-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn scratch(name: &str) -> DiskCache {
    let cache = DiskCache::at(scratch_dir(name));
    assert!(cache.dir().is_some(), "a fresh folder is usable");
    cache
}

fn cubin_key(source: &str) -> String {
    cache_key(&[source.as_bytes(), b"sm_90", b"nvrtc 12.8"])
}

fn remove(cache: &DiskCache) {
    if let Some(dir) = cache.dir() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn round_trips_and_replaces() {
    let cache = scratch("round");
    let key = cubin_key("source");
    assert_eq!(cache.get(&key), None);
    let path = cache.put(&key, b"cubin bytes").expect("put");
    assert_eq!(path, cache.entry_path(&key).expect("path"));
    assert_eq!(cache.get(&key).as_deref(), Some(&b"cubin bytes"[..]));
    cache.put(&key, b"newer").expect("put");
    assert_eq!(cache.get(&key).as_deref(), Some(&b"newer"[..]));
    cache.put(&key, b"").expect("an empty artifact is an artifact");
    assert_eq!(cache.get(&key).as_deref(), Some(&b""[..]));
    remove(&cache);
}

#[test]
fn entries_record_their_key_and_length() {
    let cache = scratch("layout");
    let key = cubin_key("layout");
    let path = cache.put(&key, b"0123456789").expect("put");
    let data = std::fs::read(&path).expect("read");
    assert_eq!(&data[..8], MAGIC);
    assert_eq!(&data[8..8 + KEY_LEN], key.as_bytes());
    assert_eq!(u64::from_le_bytes(data[72..80].try_into().expect("8 bytes")), 10);
    assert_eq!(data.len(), HEADER_LEN + 10);
    remove(&cache);
}

#[test]
fn truncated_entries_read_as_missing_and_are_replaced() {
    let cache = scratch("truncated");
    let key = cubin_key("truncated");
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let path = cache.put(&key, &payload).expect("put");
    let full = std::fs::read(&path).expect("read");
    for cut in [0, 4, HEADER_LEN - 1, HEADER_LEN, full.len() - 1] {
        std::fs::write(&path, &full[..cut]).expect("truncate");
        assert_eq!(cache.get(&key), None, "cut at {cut}");
        assert!(!path.exists(), "a truncated entry is removed (cut at {cut})");
    }
    cache.put(&key, &payload).expect("rebuilt");
    assert_eq!(cache.get(&key).as_deref(), Some(&payload[..]));
    remove(&cache);
}

#[test]
fn corrupt_and_garbage_entries_read_as_missing() {
    let cache = scratch("corrupt");
    let key = cubin_key("corrupt");
    let path = cache.put(&key, b"0123456789").expect("put");
    let good = std::fs::read(&path).expect("read");
    for flip in [0, 9, 75, 90, good.len() - 1] {
        let mut data = good.clone();
        data[flip] ^= 1;
        std::fs::write(&path, &data).expect("write");
        assert_eq!(cache.get(&key), None, "bit flipped at {flip}");
        assert!(!path.exists(), "a corrupt entry is removed");
    }
    let garbage: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&path, &garbage).expect("write");
    assert_eq!(cache.get(&key), None);
    // An entry of the previous format (checksum of the payload only, no key).
    let mut old = b"MTCACHE1".to_vec();
    old.extend_from_slice(&Sha256::digest(b"x"));
    old.extend_from_slice(b"x");
    std::fs::write(&path, &old).expect("write");
    assert_eq!(cache.get(&key), None);
    remove(&cache);
}

#[test]
fn swapped_entries_are_not_loaded() {
    let cache = scratch("swapped");
    let (a, b) = (cubin_key("kernel a"), cubin_key("kernel b"));
    let path_a = cache.put(&a, b"cubin of a").expect("put");
    let path_b = cache.put(&b, b"cubin of b").expect("put");
    let (bytes_a, bytes_b) = (
        std::fs::read(&path_a).expect("a"),
        std::fs::read(&path_b).expect("b"),
    );
    std::fs::write(&path_a, &bytes_b).expect("swap");
    std::fs::write(&path_b, &bytes_a).expect("swap");
    assert_eq!(cache.get(&a), None, "b's entry under a's name");
    assert_eq!(cache.get(&b), None, "a's entry under b's name");
    cache.put(&a, b"cubin of a").expect("rebuilt");
    assert_eq!(cache.get(&a).as_deref(), Some(&b"cubin of a"[..]));
    remove(&cache);
}

#[test]
fn autotune_winners_are_verified_too() {
    let cache = DiskCache::at(scratch_dir("autotune").join("autotune"));
    let key = cache_key(&[b"0.1.0", b"cpu", b"cpu", b"source hash", b"(1024,)"]);
    let winner = br#"{"best": 1, "config": "Config(BLOCK=128)", "timings": [[0, 0.5], [1, 0.25]]}"#;
    let path = cache.put(&key, winner).expect("put");
    assert_eq!(cache.get(&key).as_deref(), Some(&winner[..]));
    let mut data = std::fs::read(&path).expect("read");
    let at = data.len() - 10;
    data[at] = b'9'; // a different winner's index or time, same length
    std::fs::write(&path, &data).expect("write");
    assert_eq!(cache.get(&key), None, "an edited winner is not trusted");
    if let Some(dir) = cache.dir() {
        let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
    }
}

#[test]
fn keys_separate_their_parts_and_bound_file_names() {
    assert_ne!(cache_key(&[b"ab", b"c"]), cache_key(&[b"a", b"bc"]));
    let long_name = "k".repeat(300);
    let key = cache_key(&[long_name.as_bytes()]);
    assert_eq!(key.len(), 64);
    let cache = scratch("names");
    for bad in ["../escape", "", &long_name, &key.to_uppercase()] {
        assert_eq!(cache.entry_path(bad), None, "{bad:?}");
        assert_eq!(cache.get(bad), None);
        assert!(cache.put(bad, b"x").is_err());
    }
    cache.put(&key, b"x").expect("a hashed long name fits");
    remove(&cache);
}

#[test]
fn concurrent_writers_never_expose_half_an_entry() {
    let cache = scratch("concurrent");
    let key = cubin_key("shared");
    let payloads: Vec<Vec<u8>> = (0..4u8).map(|w| vec![w; 256 * 1024]).collect();
    std::thread::scope(|scope| {
        for payload in &payloads {
            let cache = cache.clone();
            let key = key.clone();
            scope.spawn(move || {
                for _ in 0..20 {
                    cache.put(&key, payload).expect("put");
                }
            });
        }
        let cache = cache.clone();
        let key = key.clone();
        let payloads = &payloads;
        scope.spawn(move || {
            for _ in 0..200 {
                if let Some(read) = cache.get(&key) {
                    assert!(
                        payloads.contains(&read),
                        "a read returns one writer's whole entry"
                    );
                }
            }
        });
    });
    let last = cache.get(&key).expect("an entry remains");
    assert!(payloads.contains(&last));
    let dir = cache.dir().expect("dir");
    let names: Vec<String> = std::fs::read_dir(dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec![format!("{key}.entry")], "no temporaries remain");
    remove(&cache);
}

#[test]
fn a_killed_writer_leaves_nothing_that_is_loaded() {
    let dir = scratch_dir("killed");
    let cache = DiskCache::at(&dir);
    let key = cubin_key("killed");
    let path = cache.put(&key, &[7u8; 1000]).expect("put");
    // What a writer killed mid-write leaves: its half-written temporary (its pid
    // is dead), and what a crash of the whole machine can leave after a rename.
    let full = std::fs::read(&path).expect("read");
    let dead_pid = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(4_194_304, |max| max + 1);
    let namespace = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|l| {
            l.to_string_lossy()
                .trim_start_matches("pid:[")
                .trim_end_matches(']')
                .to_string()
        })
        .unwrap_or_else(|| "0".into());
    let leftover = dir.join(format!("tmp-{dead_pid}.{namespace}-0.part"));
    std::fs::write(&leftover, &full[..500]).expect("leftover");
    std::fs::write(&path, &full[..500]).expect("half an entry");
    scratch::remove_leftovers(&dir, scratch::TEMP_PREFIXES);
    assert!(!leftover.exists(), "the dead writer's temporary is removed");
    assert_eq!(cache.get(&key), None);
    cache.put(&key, &[7u8; 1000]).expect("rebuilt");
    assert_eq!(cache.get(&key).as_deref(), Some(&[7u8; 1000][..]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A folder never checked in this process, holding a valid entry for `key`
/// (the check is once per process and folder, as in a new process).
#[cfg(unix)]
fn folder_with_planted_entry(name: &str, key: &str) -> PathBuf {
    let writer = scratch(&format!("{name}-writer"));
    let entry = writer.put(key, b"someone else's cubin").expect("put");
    let dir = scratch_dir(name);
    std::fs::create_dir_all(&dir).expect("create");
    std::fs::copy(&entry, dir.join(entry.file_name().expect("name"))).expect("copy");
    remove(&writer);
    dir
}

#[cfg(unix)]
#[test]
fn a_folder_others_can_write_is_never_read() {
    use std::os::unix::fs::PermissionsExt;
    let key = cubin_key("planted");
    for (name, mode) in [("world", 0o777), ("group", 0o770), ("sticky", 0o1777)] {
        let dir = folder_with_planted_entry(name, &key);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let refused = DiskCache::at(&dir);
        assert_eq!(refused.dir(), None, "mode {mode:o} is refused");
        assert_eq!(refused.get(&key), None, "never read");
        assert!(refused.put(&key, b"x").is_err(), "never written");
        assert!(dir.join(format!("{key}.entry")).exists(), "and never touched");
        let warnings = crate::notices::take();
        let expected = format!("other users can write to it (mode {:o})", mode);
        assert!(
            warnings
                .iter()
                .any(|w| w.contains(&expected) && w.contains(&dir.display().to_string())),
            "{warnings:?}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(unix)]
#[test]
fn a_folder_another_user_owns_is_never_read() {
    if folder::current_uid() != 0 {
        return; // only root can give a folder away
    }
    let key = cubin_key("planted");
    let dir = folder_with_planted_entry("foreign", &key);
    std::os::unix::fs::chown(&dir, Some(12345), None).expect("chown");
    let refused = DiskCache::at(&dir);
    assert_eq!(refused.dir(), None, "refused");
    assert_eq!(refused.get(&key), None, "never read");
    assert!(dir.join(format!("{key}.entry")).exists(), "and never touched");
    let inner = DiskCache::at(dir.join("inner"));
    assert_eq!(inner.dir(), None, "nor is a folder inside it");
    let _ = std::fs::remove_dir_all(&dir);
}
