//! Finding clang, compiling MSL + wrapper into a shared object, and the disk
//! cache of compiled kernels.
//!
//! A compiled kernel is a `DiskCache` entry (its key, length and checksum
//! recorded with it, checked on every read). It is never loaded from the cache
//! folder itself: the verified bytes are written to a private copy in this
//! process's session folder and that copy is loaded, so a cache entry changed
//! after the check (or a truncated one, which would raise SIGBUS once mapped)
//! can never be what runs.

use super::kernel::EmuKernel;
use super::shim;
use super::toolchain::{self, ClangVersion, CompilerCommand};
use super::wrapper::{self, EntrySpec};
use super::{instrument, threadgroup_vars, EmuError};
use crate::disk_cache::{self, cache_key, DiskCache, WorkFolder};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bumped when the compile flags, the memory-check instrumentation or the cache layout change.
const CACHE_FORMAT: &str = "metile-msl-emu-6";

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
    // MSL's `char` is signed on every GPU; C++'s is unsigned on AArch64 hosts.
    "-fsigned-char",
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
    // DWARF 4, which fault lines (`symbolize`) are tested with; binutils 2.40's
    // addr2line, for reading them by hand, misreads DWARF 5 file tables in inlined frames.
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
/// The input is named `.ll`, which says it is LLVM IR to clang and to zig
/// (whose driver refuses `-x ir`).
const CHECKED_LINK_FLAGS: &[&str] = &[
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

/// A located, checked clang++ and the disk cache compiled kernels go to.
#[derive(Clone, Debug)]
pub struct EmuCompiler {
    command: CompilerCommand,
    version: ClangVersion,
    /// `--version` output (and zig's version): part of every cache key.
    identity: String,
    cache: DiskCache,
    /// Instrument kernels with memory checks (`checks.h`).
    checks: bool,
    /// Build the profiled variant (`profile.h`), which is always checked.
    profiling: bool,
}

impl EmuCompiler {
    /// Finds the compiler: `METILE_CXX` (a clang++ or a `zig`, as a path or a
    /// command) if set, else the first system clang++ 18 or newer
    /// (`clang++-19`, `clang++`, then other versioned names). The cache is the
    /// folder `msl-emu` under [`disk_cache::cache_root`], if that is private
    /// to this user.
    pub fn find() -> Result<Self, EmuError> {
        Self::find_with_fallbacks(&[])
    }

    /// As [`find`](Self::find), then, when `METILE_CXX` is unset and no system
    /// clang++ can build the shim, the first of `fallbacks` that can (metile-py
    /// passes the `zig` of the `ziglang` Python package).
    pub fn find_with_fallbacks(fallbacks: &[CompilerCommand]) -> Result<Self, EmuError> {
        let (command, version, identity) = toolchain::first_usable(&toolchain::candidates(fallbacks))?;
        Ok(Self::from_probed(command, version, identity))
    }

    /// Uses exactly `program` as the compiler (run as `zig c++` when it is a `zig`).
    pub fn with_command(program: impl Into<PathBuf>) -> Result<Self, EmuError> {
        let command = CompilerCommand::new(program);
        let (version, identity) = command.probe().map_err(|failure| failure.into_error(&command))?;
        Ok(Self::from_probed(command, version, identity))
    }

    fn from_probed(command: CompilerCommand, version: ClangVersion, identity: String) -> Self {
        EmuCompiler {
            command,
            version,
            identity,
            cache: DiskCache::open("msl-emu"),
            checks: checks_from_env(),
            profiling: false,
        }
    }

    /// Same compiler, compiled kernels cached under `dir` instead (checked as
    /// the default folder is; a folder that is refused leaves the cache off).
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache = DiskCache::at(dir);
        self
    }

    /// Same compiler, with no disk cache: every compile runs clang.
    pub fn without_disk_cache(mut self) -> Self {
        self.cache = DiskCache::disabled();
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
        self.checks || self.profiling
    }

    /// Same compiler, building the profiled variant of kernels (`true`):
    /// checked, and counting their memory accesses, bank conflicts, matrix
    /// operations and barriers for `EmuKernel::launch_profiled`. Cached apart
    /// from the other builds; the default builds contain none of it.
    pub fn with_profiling(mut self, profiling: bool) -> Self {
        self.profiling = profiling;
        self
    }

    /// Whether kernels are built profiled.
    pub fn profiling(&self) -> bool {
        self.profiling
    }

    pub fn version(&self) -> &ClangVersion {
        &self.version
    }

    /// How the compiler is run.
    pub fn command(&self) -> &CompilerCommand {
        &self.command
    }

    /// The cache folder, or `None` when the disk cache is off.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache.dir()
    }

    /// Appends the entry wrapper to `msl`, compiles it to a shared object with
    /// -O2 (cached on disk, keyed by a hash of the MSL text, the wrapper, the
    /// shim version and the compiler identity) and loads it.
    pub fn compile(&self, msl: &str, entry: &EntrySpec) -> Result<EmuKernel, EmuError> {
        let (msl, variables) = threadgroup_vars::move_threadgroup_variables(msl)?;
        let (wrapper_text, layout) = wrapper::generate(entry, &variables)?;
        let source = format!("{msl}{wrapper_text}");
        let shim_hash = shim::shim_hash();
        let flags = COMPILE_FLAGS.join(" ");
        let mode = match (self.profiling, self.checks) {
            (true, _) => "profiled",
            (false, true) => "checked",
            (false, false) => "unchecked",
        };
        let key = cache_key(&[
            CACHE_FORMAT.as_bytes(),
            mode.as_bytes(),
            self.identity.as_bytes(),
            flags.as_bytes(),
            shim_hash.as_bytes(),
            source.as_bytes(),
        ]);
        let session = disk_cache::session(self.cache.dir()).map_err(|reason| {
            EmuError::io("preparing a folder to compile in", std::io::Error::other(reason))
        })?;
        let cache_entry = self.cache.entry_path(&key);
        if let Some(bytes) = self.cache.get(&key) {
            let copy = write_private_copy(&session, &bytes)?;
            // An intact entry that does not load (a library this process cannot
            // use) is rebuilt below, like a corrupt one.
            if let Ok(kernel) = EmuKernel::load(&copy, entry.kernel_name.clone(), layout.clone(), true) {
                return Ok(kernel.with_cache_entry(cache_entry));
            }
        }
        let work = WorkFolder::new(&session).map_err(|reason| {
            EmuError::io("preparing a folder to compile in", std::io::Error::other(reason))
        })?;
        let built = self.build_in(&source, work.path(), &entry.kernel_name)?;
        let bytes =
            std::fs::read(&built).map_err(|e| EmuError::io(format!("reading {}", built.display()), e))?;
        // A cache that cannot be written only costs a recompile next time.
        let stored = self.cache.put(&key, &bytes).is_ok();
        let copy = write_private_copy(&session, &bytes)?;
        drop(work);
        let kernel = EmuKernel::load(&copy, entry.kernel_name.clone(), layout, false)?;
        Ok(kernel.with_cache_entry(cache_entry.filter(|_| stored)))
    }

    /// Runs clang in the private folder `work`, its temporaries there too;
    /// returns the shared object's path.
    fn build_in(&self, source: &str, work: &Path, kernel_name: &str) -> Result<PathBuf, EmuError> {
        let shim_dir = work.join("shim");
        shim::write_into(&shim_dir)?;
        let source_path = work.join(source_file_name(kernel_name));
        let output_path = work.join("kernel.so");
        std::fs::write(&source_path, source)
            .map_err(|e| EmuError::io(format!("writing {}", source_path.display()), e))?;
        let source_name = source_path.file_name().unwrap_or_default();
        // clang's intermediate files go to TMPDIR: keep them in the work folder,
        // which is removed whatever happens to this process.
        let step = || {
            let mut command = self.command.command();
            command
                .current_dir(work)
                .env("TMPDIR", work)
                .env("TMP", work)
                .env("TEMP", work);
            command
        };
        if self.checks() {
            let ir_path = work.join("kernel.ll");
            let mut command = step();
            command
                .args(COMPILE_FLAGS.iter().filter(|&&f| f != "-shared"))
                .args(CHECKED_IR_FLAGS)
                .args(self.profiling.then_some("-DMETILE_EMU_PROFILE=1"))
                .arg("-I")
                .arg(&shim_dir)
                .arg(source_name)
                .arg("-o")
                .arg(&ir_path);
            self.run(command, kernel_name)?;
            let ir = std::fs::read_to_string(&ir_path)
                .map_err(|e| EmuError::io(format!("reading {}", ir_path.display()), e))?;
            let checked_path = work.join("kernel.checked.ll");
            std::fs::write(&checked_path, instrument::instrument(&ir)?)
                .map_err(|e| EmuError::io(format!("writing {}", checked_path.display()), e))?;
            let mut command = step();
            command
                .args(CHECKED_LINK_FLAGS)
                .arg(&checked_path)
                .arg("-o")
                .arg(&output_path)
                .arg("-lm");
            self.run(command, kernel_name)?;
        } else {
            let mut command = step();
            command
                .args(COMPILE_FLAGS)
                .arg("-DMETILE_EMU_CHECKS=0")
                .arg("-I")
                .arg(&shim_dir)
                .arg(source_name)
                .arg("-o")
                .arg(&output_path)
                .arg("-lm");
            self.run(command, kernel_name)?;
        }
        Ok(output_path)
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

/// Writes `bytes` to a new file of the session folder (never one that is
/// already loaded) and returns its path.
fn write_private_copy(session: &Path, bytes: &[u8]) -> Result<PathBuf, EmuError> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o700);
    loop {
        let path = session.join(format!(
            "kernel-{}.{}",
            disk_cache::nonce(),
            std::env::consts::DLL_EXTENSION
        ));
        match options.open(&path) {
            Ok(mut file) => {
                file.write_all(bytes)
                    .map_err(|e| EmuError::io(format!("writing {}", path.display()), e))?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(EmuError::io(format!("writing {}", path.display()), e)),
        }
    }
}

pub(crate) use crate::msl_launch::source_file_name;
