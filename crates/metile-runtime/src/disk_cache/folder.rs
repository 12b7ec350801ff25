//! Where the disk cache lives, and the checks that make it safe to load
//! compiled code from it.
//!
//! A cache folder holds code that later processes load and run, so anyone who
//! can write into it, or replace it, can run code as the user. A folder is
//! used only when it is a real directory owned by this user that no other
//! user can write, and every folder above it is owned by this user or root and
//! is either not writable by others or sticky (as `/tmp` is: others cannot
//! rename or delete what is not theirs there). A sticky bit does not make the
//! cache folder itself safe: others could still create entries in it. A folder
//! that fails is refused: the backend runs without a disk cache and says so
//! once, through [`crate::notices`].

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The root of every backend's cache folder, absolute: `METILE_CACHE_DIR`
/// (a relative value is made absolute against the working folder the first
/// time the process sees it, so a later `chdir` does not move the cache), else
/// `$XDG_CACHE_HOME/metile`, else `~/.cache/metile`, else `metile-<uid>` in the
/// temporary folder. `Err` says why there is none.
pub fn cache_root() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("METILE_CACHE_DIR").filter(|d| !d.is_empty()) {
        return absolute_once(dir);
    }
    // The XDG specification says a relative value is to be ignored.
    let xdg = std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from);
    if let Some(xdg) = xdg.filter(|p| p.is_absolute()) {
        return Ok(xdg.join("metile"));
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Some(home) = home.filter(|p| p.is_absolute()) {
        return Ok(home.join(".cache").join("metile"));
    }
    Ok(temp_dir()?.join(format!("metile-{}", current_uid())))
}

/// The temporary folder (`TMPDIR`, else `/tmp`), absolute.
pub(crate) fn temp_dir() -> Result<PathBuf, String> {
    absolute_once(std::env::temp_dir().into_os_string())
}

fn absolute_once(dir: OsString) -> Result<PathBuf, String> {
    static RESOLVED: Mutex<Option<HashMap<OsString, PathBuf>>> = Mutex::new(None);
    let mut resolved = RESOLVED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let resolved = resolved.get_or_insert_with(HashMap::new);
    if let Some(path) = resolved.get(&dir) {
        return Ok(path.clone());
    }
    let path = std::path::absolute(Path::new(&dir)).map_err(|e| {
        format!(
            "the cache folder {} is relative and the working folder cannot be read: {e}",
            Path::new(&dir).display()
        )
    })?;
    resolved.insert(dir, path.clone());
    Ok(path)
}

/// This process's effective user id (0 where there are no user ids).
pub(crate) fn current_uid() -> u32 {
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() }
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// Creates `dir` (and missing folders above it) private to this user and
/// checks that it is safe to hold code; returns its canonical path, which is
/// what callers use from then on (a symlink swapped later does not move it).
/// Checked once per process and folder; a refusal is queued as a warning.
pub(crate) fn private_folder(dir: &Path) -> Result<PathBuf, String> {
    static CHECKED: Mutex<Option<HashMap<PathBuf, Result<PathBuf, String>>>> = Mutex::new(None);
    let mut checked = CHECKED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let checked = checked.get_or_insert_with(HashMap::new);
    if let Some(result) = checked.get(dir) {
        return result.clone();
    }
    let result = create_private(dir).and_then(|()| check_private(dir));
    if let Err(reason) = &result {
        crate::notices::warn(format!(
            "not using the disk cache in {}: {reason}. Another user could plant compiled code \
             there, so this process compiles without a disk cache; make the folder yours and private \
             (chmod 700) or point METILE_CACHE_DIR at a private folder",
            dir.display()
        ));
    }
    checked.insert(dir.to_path_buf(), result.clone());
    result
}

/// Creates `dir` if it is missing; new folders get mode 0700.
pub(crate) fn create_private(dir: &Path) -> Result<(), String> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(dir)
        .map_err(|e| format!("it cannot be created: {e}"))
}

#[cfg(unix)]
fn check_private(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let link = std::fs::symlink_metadata(dir).map_err(|e| format!("it cannot be read: {e}"))?;
    let me = current_uid();
    if link.file_type().is_symlink() && link.uid() != me && link.uid() != 0 {
        // Whoever owns the link chooses where the cache is (in /tmp, anyone can
        // make one first). The folder it leads to is checked below, and from now
        // on the resolved path is used, so changing the link later moves nothing.
        return Err(format!(
            "it is a symbolic link made by uid {}, not by this user (uid {me})",
            link.uid()
        ));
    }
    let canonical = std::fs::canonicalize(dir).map_err(|e| format!("it cannot be resolved: {e}"))?;
    let meta = std::fs::metadata(&canonical).map_err(|e| format!("it cannot be read: {e}"))?;
    if !meta.is_dir() {
        return Err("it is not a folder".into());
    }
    if meta.uid() != me {
        return Err(format!(
            "it belongs to uid {}, not to this user (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "other users can write to it (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    for above in canonical.ancestors().skip(1) {
        let meta =
            std::fs::metadata(above).map_err(|e| format!("{} cannot be read: {e}", above.display()))?;
        if meta.uid() != me && meta.uid() != 0 {
            return Err(format!(
                "{}, which holds it, belongs to uid {} (neither this user, uid {me}, nor root) and could replace it",
                above.display(),
                meta.uid()
            ));
        }
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.mode() & 0o022 != 0 && !sticky {
            return Err(format!(
                "{}, which holds it, can be written by other users (mode {:o}, not sticky), who could replace it",
                above.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(canonical)
}

#[cfg(not(unix))]
fn check_private(dir: &Path) -> Result<PathBuf, String> {
    std::fs::canonicalize(dir).map_err(|e| format!("it cannot be resolved: {e}"))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("metile-folder-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn messages_about(dir: &Path) -> Vec<String> {
        let shown = dir.display().to_string();
        crate::notices::take()
            .into_iter()
            .filter(|w| w.contains(&shown))
            .collect()
    }

    #[test]
    fn a_new_folder_is_private() {
        let dir = scratch("new").join("deeper");
        let canonical = private_folder(&dir).expect("private");
        let mode = std::fs::metadata(&canonical)
            .expect("exists")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let _ = std::fs::remove_dir_all(dir.parent().expect("parent"));
    }

    #[test]
    fn writable_by_others_is_refused_once() {
        let dir = scratch("writable");
        std::fs::create_dir_all(&dir).expect("create");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = private_folder(&dir).expect_err("refused");
        assert!(err.contains("other users can write to it (mode 777)"), "{err}");
        let warned = messages_about(&dir);
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(
            warned[0].contains("compiles without a disk cache"),
            "{}",
            warned[0]
        );
        assert!(private_folder(&dir).is_err());
        assert!(messages_about(&dir).is_empty(), "a refusal warns once");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sticky_does_not_protect_the_folder_itself() {
        let dir = scratch("sticky");
        std::fs::create_dir_all(&dir).expect("create");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        let err = private_folder(&dir).expect_err("refused");
        assert!(err.contains("other users can write to it"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_writable_folder_above_is_refused_unless_sticky() {
        let above = scratch("above");
        std::fs::create_dir_all(&above).expect("create");
        std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o775)).expect("chmod");
        let err = private_folder(&above.join("cache")).expect_err("refused");
        assert!(
            err.contains("which holds it, can be written by other users (mode 775"),
            "{err}"
        );
        std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        private_folder(&above.join("other")).expect("a sticky folder above is fine");
        let _ = std::fs::remove_dir_all(&above);
    }

    #[test]
    fn a_foreign_owner_is_refused() {
        if current_uid() != 0 {
            return; // only root can give a folder away
        }
        let dir = scratch("foreign");
        std::fs::create_dir_all(&dir).expect("create");
        std::os::unix::fs::chown(&dir, Some(12345), None).expect("chown");
        let err = private_folder(&dir).expect_err("refused");
        assert!(
            err.contains("belongs to uid 12345, not to this user (uid 0)"),
            "{err}"
        );
        let inside = private_folder(&dir.join("inside")).expect_err("refused");
        assert!(
            inside.contains("which holds it, belongs to uid 12345"),
            "{inside}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_symlink_is_followed_only_when_this_user_made_it() {
        let dir = scratch("link");
        std::fs::create_dir_all(dir.join("real")).expect("create");
        std::os::unix::fs::symlink(dir.join("real"), dir.join("mine")).expect("symlink");
        let canonical = private_folder(&dir.join("mine")).expect("own link");
        assert!(canonical.ends_with("real"), "{}", canonical.display());
        if current_uid() == 0 {
            std::os::unix::fs::symlink(dir.join("real"), dir.join("planted")).expect("symlink");
            std::os::unix::fs::lchown(dir.join("planted"), Some(12345), None).expect("lchown");
            let err = private_folder(&dir.join("planted")).expect_err("refused");
            assert!(err.contains("symbolic link made by uid 12345"), "{err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn relative_folders_become_absolute() {
        let path = absolute_once("relative-cache".into()).expect("absolute");
        assert!(path.is_absolute());
        assert!(path.ends_with("relative-cache"));
    }
}
