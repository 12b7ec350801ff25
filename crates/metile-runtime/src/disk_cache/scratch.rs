//! Temporary files and folders of a running process, and the removal of those
//! that a killed process left behind.
//!
//! Every temporary name carries its process's tag, `<pid>.<pid namespace>`:
//! a later process removes a leftover whose process is dead. A pid is only
//! meaningful in its own namespace (containers sharing a cache folder), so a
//! leftover from another namespace, or with a name this version cannot read, is
//! removed only once it is a day old.
//!
//! Compilers run in a *session* folder, one per process and cache folder
//! (`session-<tag>-<nonce>` inside the cache folder, or, without a usable
//! cache, `metile-<uid>-session-<tag>-<nonce>` created private in the
//! temporary folder). It holds one work folder per compile (the compiler's own
//! temporaries go there too, through `TMPDIR`) and the private copies of the
//! libraries this process loaded; it is removed at exit, or by the next process
//! if this one is killed.

use super::folder::{create_private, current_uid, private_folder, temp_dir};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// How old a leftover whose process cannot be checked must be before it is removed.
const UNCHECKABLE_LEFTOVER_AGE: Duration = Duration::from_secs(24 * 60 * 60);

/// Prefixes of the temporary names in a cache folder.
pub(crate) const TEMP_PREFIXES: &[&str] = &["tmp", "session"];

/// `<pid>.<pid namespace>` of this process.
fn process_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| format!("{}.{}", std::process::id(), pid_namespace()))
}

fn pid_namespace() -> u64 {
    static NAMESPACE: OnceLock<u64> = OnceLock::new();
    *NAMESPACE.get_or_init(|| {
        // "pid:[4026531836]"; 0 where there is no such link (macOS).
        std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|link| {
                let text = link.to_string_lossy().into_owned();
                text.trim_start_matches("pid:[")
                    .trim_end_matches(']')
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    })
}

/// A number no other temporary of this process has used.
pub(crate) fn nonce() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// `<prefix>-<tag>-<nonce>`: a temporary name this process owns.
pub(crate) fn temp_name(prefix: &str) -> String {
    format!("{prefix}-{}-{}", process_tag(), nonce())
}

/// Whether `tag` names a process of this namespace that is still running;
/// `None` when that cannot be told (another namespace, unreadable tag).
fn tag_alive(tag: &str) -> Option<bool> {
    let (pid, namespace) = tag.split_once('.')?;
    let pid: i32 = pid.parse().ok()?;
    let namespace: u64 = namespace.parse().ok()?;
    if namespace != pid_namespace() || pid <= 0 {
        return None;
    }
    Some(process_alive(pid))
}

#[cfg(unix)]
fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only asks whether the process exists.
    let status = unsafe { libc::kill(pid, 0) };
    status == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(not(unix))]
fn process_alive(_pid: i32) -> bool {
    true
}

/// Removes the temporaries in `dir` named `<prefix>-<tag>-...` (for one of
/// `prefixes`) that a dead process left behind. Only this user's entries are
/// touched (the temporary folder is shared).
pub(crate) fn remove_leftovers(dir: &Path, prefixes: &[&str]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = prefixes
            .iter()
            .find_map(|prefix| name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')))
        else {
            continue;
        };
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        if !owned_by_me(&meta) {
            continue;
        }
        let tag = rest.split('-').next().unwrap_or("");
        let stale = match tag_alive(tag) {
            Some(alive) => !alive,
            None => meta
                .modified()
                .ok()
                .and_then(|modified| now.duration_since(modified).ok())
                .is_some_and(|age| age > UNCHECKABLE_LEFTOVER_AGE),
        };
        if stale {
            let path = entry.path();
            let _ = if meta.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
        }
    }
}

#[cfg(unix)]
fn owned_by_me(meta: &std::fs::Metadata) -> bool {
    std::os::unix::fs::MetadataExt::uid(meta) == current_uid()
}

#[cfg(not(unix))]
fn owned_by_me(_meta: &std::fs::Metadata) -> bool {
    true
}

/// Sessions made by this process, removed at exit.
static SESSIONS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// This process's session folder in the cache folder `cache` (checked private
/// by the caller), or in the temporary folder when there is no usable cache.
pub(crate) fn session(cache: Option<&Path>) -> Result<PathBuf, String> {
    static MADE: Mutex<Option<HashMap<Option<PathBuf>, PathBuf>>> = Mutex::new(None);
    let mut made = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let made = made.get_or_insert_with(HashMap::new);
    let key = cache.map(Path::to_path_buf);
    if let Some(path) = made.get(&key) {
        // Recreated if something removed it while this process ran.
        create_private(path)?;
        return Ok(path.clone());
    }
    let path = match cache {
        Some(dir) => new_private_dir(dir, "session")?,
        None => {
            let tmp = temp_dir()?;
            let prefix = format!("metile-{}-session", current_uid());
            remove_leftovers(&tmp, &[&prefix]);
            let path = new_private_dir(&tmp, &prefix)?;
            // The temporary folder is shared: check the new folder as a cache folder is.
            private_folder(&path).map_err(|reason| format!("{}: {reason}", path.display()))?
        }
    };
    register_exit_cleanup();
    SESSIONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(path.clone());
    made.insert(key, path.clone());
    Ok(path)
}

/// A new folder `<prefix>-<tag>-<nonce>` in `parent`, mode 0700, that did not
/// exist before (so nobody else can have put anything in it).
pub(crate) fn new_private_dir(parent: &Path, prefix: &str) -> Result<PathBuf, String> {
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    loop {
        let path = parent.join(temp_name(prefix));
        match builder.create(&path) {
            Ok(()) => return Ok(path),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
        }
    }
}

/// A folder for one compile inside a session, removed when dropped.
pub(crate) struct WorkFolder {
    path: PathBuf,
}

impl WorkFolder {
    pub(crate) fn new(session: &Path) -> Result<WorkFolder, String> {
        create_private(session)?;
        Ok(WorkFolder {
            path: new_private_dir(session, "work")?,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn register_exit_cleanup() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        #[cfg(unix)]
        // SAFETY: registers a function that only removes folders; it stays
        // loaded until exit (an extension module is never unloaded).
        unsafe {
            libc::atexit(remove_sessions);
        }
    });
}

#[cfg(unix)]
extern "C" fn remove_sessions() {
    // try_lock: never block an exiting process on a lock a killed thread held.
    if let Ok(sessions) = SESSIONS.try_lock() {
        for path in sessions.iter() {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("metile-scratch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create");
        dir
    }

    /// A pid no process has: one past the kernel's limit.
    fn dead_pid() -> u64 {
        std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map_or(4_194_304, |max| max + 1)
    }

    #[test]
    fn leftovers_of_dead_processes_are_removed() {
        let dir = scratch("leftovers");
        let namespace = pid_namespace();
        let dead = dir.join(format!("session-{}.{namespace}-0", dead_pid()));
        let dead_file = dir.join(format!("tmp-{}.{namespace}-3.part", dead_pid()));
        let alive = dir.join(temp_name("session"));
        let other_namespace = dir.join(format!("session-{}.{}-0", dead_pid(), namespace + 1));
        let unrelated = dir.join("0123abcd.entry");
        for folder in [&dead, &alive, &other_namespace] {
            std::fs::create_dir_all(folder.join("work-1")).expect("create");
        }
        std::fs::write(&dead_file, b"half").expect("write");
        std::fs::write(&unrelated, b"entry").expect("write");
        remove_leftovers(&dir, TEMP_PREFIXES);
        assert!(
            !dead.exists() && !dead_file.exists(),
            "a dead process's temporaries go"
        );
        assert!(alive.exists(), "a live process keeps its own");
        assert!(
            other_namespace.exists(),
            "another namespace's are kept until a day old"
        );
        assert!(unrelated.exists(), "entries are not temporaries");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn work_folders_are_private_and_removed() {
        let dir = scratch("work");
        let session = new_private_dir(&dir, "session").expect("session");
        let work = WorkFolder::new(&session).expect("work");
        let path = work.path().to_path_buf();
        assert!(path.is_dir());
        drop(work);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tags_name_this_process() {
        let name = temp_name("tmp");
        let tag = name
            .strip_prefix("tmp-")
            .and_then(|r| r.split('-').next())
            .expect("tag");
        assert_eq!(tag_alive(tag), Some(true));
        assert_eq!(tag_alive("garbage"), None);
    }
}
