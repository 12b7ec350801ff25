//! Finding clang, compiling MSL + wrapper into a shared object, and the disk
//! cache of compiled kernels.

use super::kernel::EmuKernel;
use super::shim;
use super::wrapper::{self, EntrySpec};
use super::{instrument, threadgroup_vars, EmuError};
use crate::disk_cache::{cache_root, hex};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The oldest clang that builds the shim: it needs C++23 explicit object
/// parameters ("deducing this"), first in clang 18.
pub const MIN_CLANG_MAJOR: u32 = 18;
/// Apple's clang numbering differs from LLVM's; Apple clang 16 has deducing this.
const MIN_APPLE_CLANG_MAJOR: u32 = 16;

/// Bumped when the compile flags or the cache layout change.
const CACHE_FORMAT: &str = "metile-msl-emu-4";

const COMPILE_FLAGS: &[&str] = &[
    "-x",
    "c++",
    "-std=c++23",
    "-O2",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-fno-exceptions",
    "-fno-rtti",
    // The shim uses no C++ standard library; do not make every kernel depend on it.
    "-nostdlib++",
    // Metal has no type-based aliasing rules; kernels reinterpret threadgroup memory freely.
    "-fno-strict-aliasing",
    // GPU integer arithmetic wraps.
    "-fwrapv",
    // Same results on every host: no FMA contraction, half arithmetic rounds per operation.
    "-ffp-contract=off",
    "-Xclang",
    "-ffloat16-excess-precision=none",
    "-fno-math-errno",
    // Touch every page of a large stack frame in order, so a fiber that
    // overflows its stack hits its guard page instead of a neighbour's stack.
    "-fstack-clash-protection",
    // Line tables only: lets a fault be traced back to the kernel's source line.
    "-gline-tables-only",
    // binutils' addr2line (2.40) misreads DWARF 5 file tables in inlined frames.
    "-gdwarf-4",
    // MSL attributes such as [[buffer(0)]] mean nothing to clang.
    "-Wno-unknown-attributes",
    "-Wno-user-defined-literals",
    // `#pragma METAL fp ...` has no meaning here.
    "-Wno-unknown-pragmas",
    "-fdiagnostics-color=never",
];

/// Added for a checked kernel's first step (MSL to unoptimised IR, see
/// `instrument`). The -O2 front end with LLVM's passes off gives the IR the
/// second step optimises as a one-step -O2 build would; frame pointers let a
/// failed check find the kernel line through shim functions.
const CHECKED_IR_FLAGS: &[&str] = &[
    "-Xclang",
    "-disable-llvm-passes",
    "-S",
    "-emit-llvm",
    "-fno-omit-frame-pointer",
    "-DMETILE_EMU_CHECKS=1",
];

/// A checked kernel's second step: instrumented IR to the shared object.
const CHECKED_LINK_FLAGS: &[&str] = &[
    "-x",
    "ir",
    "-O2",
    "-fPIC",
    "-shared",
    "-nostdlib++",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-Wno-unused-command-line-argument",
    "-fdiagnostics-color=never",
];

/// `METILE_EMU_CHECKS=0` turns memory checks off for kernels compiled from now on.
pub const CHECKS_ENV: &str = "METILE_EMU_CHECKS";

fn checks_from_env() -> bool {
    std::env::var(CHECKS_ENV).map_or(true, |v| v.trim() != "0")
}

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

    fn is_supported(&self) -> bool {
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

/// A located, checked clang++ and the cache directory compiled kernels go to.
#[derive(Clone, Debug)]
pub struct EmuCompiler {
    command: String,
    version: ClangVersion,
    /// `--version` output: part of every cache key.
    identity: String,
    cache_dir: PathBuf,
    /// Instrument kernels with memory checks (`checks.h`).
    checks: bool,
}

impl EmuCompiler {
    /// Finds the compiler: `METILE_CXX` (a path or command) if set, else
    /// `clang++-19`, else `clang++`. The cache directory is `METILE_CACHE_DIR`,
    /// else the user cache folder (`$XDG_CACHE_HOME` or `~/.cache`) `/metile`,
    /// with subfolder `msl-emu`.
    pub fn find() -> Result<Self, EmuError> {
        let candidates: Vec<String> = match std::env::var("METILE_CXX") {
            Ok(cxx) if !cxx.trim().is_empty() => vec![cxx.trim().to_string()],
            _ => vec!["clang++-19".into(), "clang++".into()],
        };
        let mut problems = Vec::new();
        for command in &candidates {
            match Self::probe(command) {
                Ok(compiler) => return Ok(compiler),
                Err(EmuError::CompilerNotFound(reason)) => problems.push(reason),
                Err(err) => return Err(err),
            }
        }
        Err(EmuError::CompilerNotFound(format!(
            "{}; install clang {MIN_CLANG_MAJOR} or newer (e.g. `apt-get install clang-19`) or set METILE_CXX",
            problems.join("; ")
        )))
    }

    /// Uses exactly `command` as the compiler.
    pub fn with_command(command: &str) -> Result<Self, EmuError> {
        Self::probe(command)
    }

    fn probe(command: &str) -> Result<Self, EmuError> {
        let output = Command::new(command)
            .arg("--version")
            .output()
            .map_err(|e| EmuError::CompilerNotFound(format!("{command}: {e}")))?;
        if !output.status.success() {
            return Err(EmuError::CompilerNotFound(format!("{command} --version failed")));
        }
        let identity = String::from_utf8_lossy(&output.stdout).into_owned();
        let version = ClangVersion::parse(&identity).ok_or_else(|| EmuError::CompilerUnsuitable {
            compiler: command.into(),
            reason: "not clang (the shim needs clang's address spaces and _Float16)".into(),
        })?;
        if !version.is_supported() {
            return Err(EmuError::CompilerUnsuitable {
                compiler: command.into(),
                reason: format!(
                    "{version} is too old; the Metal shim needs clang {MIN_CLANG_MAJOR} or newer \
                     (C++23 explicit object parameters)"
                ),
            });
        }
        Ok(EmuCompiler {
            command: command.into(),
            version,
            identity,
            cache_dir: default_cache_dir(),
            checks: checks_from_env(),
        })
    }

    /// Same compiler, compiled kernels cached under `dir` instead.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = dir.into();
        self
    }

    /// Same compiler, building kernels with (`true`) or without memory
    /// checks. The default is on unless `METILE_EMU_CHECKS=0`.
    pub fn with_checks(mut self, checks: bool) -> Self {
        self.checks = checks;
        self
    }

    /// Whether kernels are built with memory checks.
    pub fn checks(&self) -> bool {
        self.checks
    }

    pub fn version(&self) -> &ClangVersion {
        &self.version
    }

    pub fn command(&self) -> &str {
        &self.command
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// Appends the entry wrapper to `msl`, compiles it to a shared object with
    /// -O2 (cached on disk, keyed by a hash of the MSL text, the wrapper, the
    /// shim version and the compiler identity) and loads it.
    pub fn compile(&self, msl: &str, entry: &EntrySpec) -> Result<EmuKernel, EmuError> {
        let (msl, variables) = threadgroup_vars::move_threadgroup_variables(msl)?;
        let (wrapper_text, layout) = wrapper::generate(entry, &variables)?;
        let source = format!("{msl}{wrapper_text}");
        let shim_hash = shim::shim_hash();
        let mode = if self.checks { "checked" } else { "unchecked" };

        let mut hasher = Sha256::new();
        for part in [
            CACHE_FORMAT,
            mode,
            &self.identity,
            &COMPILE_FLAGS.join(" "),
            &shim_hash,
            &source,
        ] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        let key = hex(&hasher.finalize());
        let kernels_dir = self.cache_dir.join("kernels");
        let library = kernels_dir.join(format!("{}.{}", &key[..40], std::env::consts::DLL_EXTENSION));

        let cached = library.is_file();
        if !cached {
            std::fs::create_dir_all(&kernels_dir)
                .map_err(|e| EmuError::io(format!("creating cache folder {}", kernels_dir.display()), e))?;
            let shim_dir = shim::materialize(&self.cache_dir, &shim_hash)?;
            self.build(&source, &shim_dir, &kernels_dir, &library, &entry.kernel_name)?;
        }
        EmuKernel::load(&library, entry.kernel_name.clone(), layout, cached)
    }

    /// Runs clang in a private temporary folder and moves the result into place.
    fn build(
        &self,
        source: &str,
        shim_dir: &Path,
        kernels_dir: &Path,
        library: &Path,
        kernel_name: &str,
    ) -> Result<(), EmuError> {
        let work = kernels_dir.join(format!("tmp-{}-{}", std::process::id(), shim::unique_suffix()));
        std::fs::create_dir_all(&work)
            .map_err(|e| EmuError::io(format!("creating {}", work.display()), e))?;
        let result = self.build_in(source, shim_dir, &work, library, kernel_name);
        let _ = std::fs::remove_dir_all(&work);
        result
    }

    fn build_in(
        &self,
        source: &str,
        shim_dir: &Path,
        work: &Path,
        library: &Path,
        kernel_name: &str,
    ) -> Result<(), EmuError> {
        let source_path = work.join(source_file_name(kernel_name));
        let output_path = work.join("kernel.so");
        std::fs::write(&source_path, source)
            .map_err(|e| EmuError::io(format!("writing {}", source_path.display()), e))?;
        let source_name = source_path.file_name().unwrap_or_default();
        if self.checks {
            let ir_path = work.join("kernel.ll");
            let mut command = Command::new(&self.command);
            command
                .current_dir(work)
                .args(COMPILE_FLAGS.iter().filter(|&&f| f != "-shared"))
                .args(CHECKED_IR_FLAGS)
                .arg("-I")
                .arg(shim_dir)
                .arg(source_name)
                .arg("-o")
                .arg(&ir_path);
            self.run(command, kernel_name)?;
            let ir = std::fs::read_to_string(&ir_path)
                .map_err(|e| EmuError::io(format!("reading {}", ir_path.display()), e))?;
            let checked_path = work.join("kernel.checked.ll");
            std::fs::write(&checked_path, instrument::instrument(&ir)?)
                .map_err(|e| EmuError::io(format!("writing {}", checked_path.display()), e))?;
            let mut command = Command::new(&self.command);
            command
                .current_dir(work)
                .args(CHECKED_LINK_FLAGS)
                .arg(&checked_path)
                .arg("-o")
                .arg(&output_path)
                .arg("-lm");
            self.run(command, kernel_name)?;
        } else {
            let mut command = Command::new(&self.command);
            command
                .current_dir(work)
                .args(COMPILE_FLAGS)
                .arg("-DMETILE_EMU_CHECKS=0")
                .arg("-I")
                .arg(shim_dir)
                .arg(source_name)
                .arg("-o")
                .arg(&output_path)
                .arg("-lm");
            self.run(command, kernel_name)?;
        }
        match std::fs::rename(&output_path, library) {
            Ok(()) => Ok(()),
            // A concurrent compile of the same key finished first; same bytes.
            Err(_) if library.is_file() => Ok(()),
            Err(e) => Err(EmuError::io(
                format!("moving the kernel into {}", library.display()),
                e,
            )),
        }
    }
}

impl EmuCompiler {
    /// Runs one compiler step; its diagnostics become a compile error.
    fn run(&self, mut command: Command, kernel_name: &str) -> Result<(), EmuError> {
        let output = command
            .output()
            .map_err(|e| EmuError::io(format!("running {}", self.command), e))?;
        if output.status.success() {
            return Ok(());
        }
        let mut diagnostics = String::from_utf8_lossy(&output.stderr).into_owned();
        diagnostics.push_str(&String::from_utf8_lossy(&output.stdout));
        Err(EmuError::Compile {
            kernel: kernel_name.into(),
            diagnostics,
        })
    }
}

pub(crate) use crate::msl_launch::source_file_name;

fn default_cache_dir() -> PathBuf {
    cache_root().join("msl-emu")
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
        assert!(ClangVersion::parse("g++ (Debian 12.2.0-14) 12.2.0").is_none());
    }
}
