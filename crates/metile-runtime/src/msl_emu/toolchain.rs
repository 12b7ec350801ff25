//! Which C++ compiler builds the emulator's kernels: the one `METILE_CXX`
//! names, else a system clang 18 or newer, else a compiler the host hands in
//! (metile-py passes the `zig` of the `ziglang` Python package, whose `zig c++`
//! is a clang that needs no root to install). The runtime has no Python, so it
//! never looks for Python packages itself.

use super::EmuError;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest clang that builds the shim: it needs C++23 explicit object
/// parameters ("deducing this"), first in clang 18.
pub const MIN_CLANG_MAJOR: u32 = 18;
/// Apple's clang numbering differs from LLVM's; Apple clang 16 has deducing this.
const MIN_APPLE_CLANG_MAJOR: u32 = 16;

/// The environment variable naming the compiler (a clang++ or a `zig`).
pub const COMPILER_ENV: &str = "METILE_CXX";

/// System compilers tried in order when `METILE_CXX` is unset: the version the
/// project is tested with, the unversioned name, then other supported
/// versions under the names Debian and Ubuntu install them with.
const SYSTEM_COMPILERS: &[&str] = &[
    "clang++-19",
    "clang++",
    "clang++-22",
    "clang++-21",
    "clang++-20",
    "clang++-18",
];

/// A clang version as printed by `--version`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClangVersion {
    pub major: u32,
    pub minor: u32,
    pub apple: bool,
}

impl ClangVersion {
    /// Parses `clang version 19.1.7` / `Apple clang version 16.0.0` from `--version` output.
    pub fn parse(version_output: &str) -> Option<Self> {
        let line = version_output.lines().find(|l| l.contains("clang version"))?;
        let apple = line.contains("Apple clang");
        let rest = &line[line.find("clang version")? + "clang version".len()..];
        let number = rest.split_whitespace().next()?;
        let mut parts = number.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
        Some(ClangVersion { major, minor, apple })
    }

    pub(crate) fn is_supported(&self) -> bool {
        self.major
            >= if self.apple {
                MIN_APPLE_CLANG_MAJOR
            } else {
                MIN_CLANG_MAJOR
            }
    }
}

impl std::fmt::Display for ClangVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let vendor = if self.apple { "Apple clang" } else { "clang" };
        write!(f, "{vendor} {}.{}", self.major, self.minor)
    }
}

/// How to run a C++ compiler: a program and the arguments that come before
/// the emulator's own (`zig c++ ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompilerCommand {
    program: PathBuf,
    leading_args: Vec<&'static str>,
}

impl CompilerCommand {
    /// `program` (a path, or a name looked up in `PATH`) as a clang++ driver;
    /// a program named `zig` runs as `zig c++ -mcpu=baseline`.
    pub fn new(program: impl Into<PathBuf>) -> Self {
        let program = program.into();
        // zig builds for the host's own CPU unless told otherwise; a kernel
        // library in the disk cache must run on any host that shares the
        // cache folder, as clang's generic default does.
        let leading_args = if is_zig(&program) {
            vec!["c++", "-mcpu=baseline"]
        } else {
            Vec::new()
        };
        CompilerCommand {
            program,
            leading_args,
        }
    }

    /// Whether this is zig's clang, which links its own compiler runtime and
    /// libc stubs (cached by zig, in its global cache folder).
    pub fn is_zig(&self) -> bool {
        is_zig(&self.program)
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    /// A `Command` running the compiler, before any argument of the caller's.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.leading_args);
        if self.is_zig() {
            if let Some(dir) = zig_cache_fallback() {
                command.env("ZIG_GLOBAL_CACHE_DIR", dir);
            }
        }
        command
    }

    /// Runs `--version` and checks the compiler can build the shim; returns
    /// its version and its identity (what goes in cache keys: the version
    /// output, and zig's own version for zig, whose libc and runtime libraries
    /// can change under the same clang).
    pub(crate) fn probe(&self) -> Result<(ClangVersion, String), ProbeFailure> {
        let output = match self.command().arg("--version").output() {
            Ok(output) => output,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ProbeFailure::Missing),
            Err(e) => return Err(EmuError::CompilerNotFound(format!("{self}: {e}")).into()),
        };
        if !output.status.success() {
            return Err(EmuError::CompilerNotFound(format!("{self} --version failed")).into());
        }
        let mut identity = String::from_utf8_lossy(&output.stdout).into_owned();
        let version = ClangVersion::parse(&identity).ok_or_else(|| EmuError::CompilerUnsuitable {
            compiler: self.to_string(),
            reason: "not clang (the shim needs clang's address spaces and _Float16)".into(),
        })?;
        if !version.is_supported() {
            return Err(EmuError::CompilerUnsuitable {
                compiler: self.to_string(),
                reason: format!(
                    "{version} is too old; the Metal shim needs clang {MIN_CLANG_MAJOR} or newer \
                     (C++23 explicit object parameters)"
                ),
            }
            .into());
        }
        if self.is_zig() {
            let zig_version = Command::new(&self.program).arg("version").output().map_err(|e| {
                EmuError::CompilerNotFound(format!("{} version: {e}", self.program.display()))
            })?;
            identity.insert_str(
                0,
                &format!("{self}\nzig {}", String::from_utf8_lossy(&zig_version.stdout)),
            );
        }
        Ok((version, identity))
    }
}

impl std::fmt::Display for CompilerCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.program.display())?;
        for arg in &self.leading_args {
            write!(f, " {arg}")?;
        }
        Ok(())
    }
}

/// zig keeps what every compile links (its compiler runtime, libc stubs) in
/// `$XDG_CACHE_HOME/zig` or `~/.cache/zig`, and does not run at all without
/// one of them. Where neither is set, it gets the folder `zig` under meTile's
/// cache root (then `metile-<uid>` in the temporary folder) once that root has
/// passed the disk cache's checks, since what is there is linked into kernels;
/// under a refused root, a folder in this process's private session folder,
/// rebuilt by every process.
fn zig_cache_fallback() -> Option<PathBuf> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|value| !value.is_empty());
    if set("ZIG_GLOBAL_CACHE_DIR") || set("XDG_CACHE_HOME") || set("HOME") {
        return None;
    }
    let private = crate::disk_cache::cache_root()
        .and_then(|root| crate::disk_cache::private_folder(&root))
        .and_then(|root| crate::disk_cache::private_folder(&root.join("zig")));
    match private {
        Ok(dir) => Some(dir),
        Err(_) => crate::disk_cache::session(None)
            .ok()
            .map(|session| session.join("zig")),
    }
}

fn is_zig(program: &Path) -> bool {
    program.file_stem() == Some(OsStr::new("zig"))
}

/// The compilers to try, in order: exactly `METILE_CXX` when it is set, else
/// the system's clang++ names, then `fallbacks`.
pub(crate) fn candidates(fallbacks: &[CompilerCommand]) -> Vec<CompilerCommand> {
    match std::env::var(COMPILER_ENV) {
        Ok(cxx) if !cxx.trim().is_empty() => vec![CompilerCommand::new(cxx.trim())],
        _ => SYSTEM_COMPILERS
            .iter()
            .map(CompilerCommand::new)
            .chain(fallbacks.iter().cloned())
            .collect(),
    }
}

/// The first of `candidates` that can build the shim, with its version and
/// identity. A single candidate that is not clang or too old is refused with
/// its own error; otherwise one error names what was missing and what each
/// other candidate lacks.
pub(crate) fn first_usable(
    candidates: &[CompilerCommand],
) -> Result<(CompilerCommand, ClangVersion, String), EmuError> {
    let mut missing = Vec::new();
    let mut problems = Vec::new();
    for candidate in candidates {
        match candidate.probe() {
            Ok((version, identity)) => return Ok((candidate.clone(), version, identity)),
            Err(ProbeFailure::Missing) => missing.push(candidate.to_string()),
            Err(ProbeFailure::Failed(err @ EmuError::CompilerUnsuitable { .. })) if candidates.len() == 1 => {
                return Err(err)
            }
            Err(ProbeFailure::Failed(EmuError::CompilerUnsuitable { compiler, reason })) => {
                problems.push(format!("{compiler}: {reason}"))
            }
            Err(ProbeFailure::Failed(EmuError::CompilerNotFound(reason))) => problems.push(reason),
            Err(ProbeFailure::Failed(err)) => return Err(err),
        }
    }
    if !missing.is_empty() {
        problems.insert(0, format!("not found: {}", missing.join(", ")));
    }
    Err(EmuError::CompilerNotFound(format!(
        "{}; install clang {MIN_CLANG_MAJOR} or newer (e.g. `apt-get install clang-19`), or the `ziglang` \
         Python package (`pip install ziglang`, with meTile: `pip install 'metile[emu]'`), or set \
         {COMPILER_ENV} to a clang++ or a zig executable",
        problems.join("; ")
    )))
}

/// Why a candidate compiler cannot be used.
pub(crate) enum ProbeFailure {
    /// No such program.
    Missing,
    Failed(EmuError),
}

impl From<EmuError> for ProbeFailure {
    fn from(err: EmuError) -> Self {
        ProbeFailure::Failed(err)
    }
}

impl ProbeFailure {
    /// The error for `compiler`, the one candidate there was.
    pub(crate) fn into_error(self, compiler: &CompilerCommand) -> EmuError {
        match self {
            ProbeFailure::Missing => EmuError::CompilerNotFound(format!("{compiler}: not found")),
            ProbeFailure::Failed(err) => err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_clang_versions() {
        let v =
            ClangVersion::parse("Debian clang version 19.1.7 (3~deb12u1)\nTarget: x86_64").expect("parse");
        assert_eq!(
            v,
            ClangVersion {
                major: 19,
                minor: 1,
                apple: false
            }
        );
        assert!(v.is_supported());
        let v = ClangVersion::parse("Ubuntu clang version 14.0.0-1ubuntu1").expect("parse");
        assert!(!v.is_supported());
        let v = ClangVersion::parse("Apple clang version 16.0.0 (clang-1600.0.26.3)").expect("parse");
        assert!(v.apple && v.is_supported());
        let v = ClangVersion::parse("clang version 22.1.8\nTarget: x86_64-unknown-linux6.18.44-gnu2.36.0")
            .expect("parse");
        assert!(v.major == 22 && v.is_supported());
        assert!(ClangVersion::parse("g++ (Debian 12.2.0-14) 12.2.0").is_none());
    }

    #[test]
    fn zig_runs_as_zig_cxx() {
        let zig = CompilerCommand::new("/opt/venv/lib/python3.12/site-packages/ziglang/zig");
        assert!(zig.is_zig());
        assert_eq!(
            zig.to_string(),
            "/opt/venv/lib/python3.12/site-packages/ziglang/zig c++ -mcpu=baseline"
        );
        let args: Vec<_> = zig.command().get_args().map(|a| a.to_owned()).collect();
        assert_eq!(args, ["c++", "-mcpu=baseline"]);
        let clang = CompilerCommand::new("clang++-19");
        assert!(!clang.is_zig());
        assert_eq!(clang.to_string(), "clang++-19");
        assert_eq!(clang.command().get_args().count(), 0);
        // Only a program called zig is zig.
        assert!(!CompilerCommand::new("/usr/bin/zigzag").is_zig());
    }

    #[test]
    fn missing_compilers_are_all_named() {
        let missing = [
            CompilerCommand::new("/nonexistent/clang++-99"),
            CompilerCommand::new("/nonexistent/zig"),
        ];
        let Err(EmuError::CompilerNotFound(message)) = first_usable(&missing) else {
            panic!("two missing compilers should not be found");
        };
        assert!(
            message.contains("not found: /nonexistent/clang++-99, /nonexistent/zig c++ -mcpu=baseline;"),
            "{message}"
        );
        assert!(message.contains("pip install 'metile[emu]'"), "{message}");
    }
}
