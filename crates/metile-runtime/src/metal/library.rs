//! MSL → Metal library. With Xcode's command-line compiler present, the MSL is
//! compiled ahead of time (`xcrun -sdk macosx metal -O2`, then `metallib`) and
//! the metallib cached on disk, keyed by the MSL, the SDK version and the GPU
//! family; without it, Metal compiles the source at run time
//! (`newLibraryWithSource`). Either way fast math is off, so results match the
//! emulator's (and IEEE) rounding.

use super::Shared;
use crate::disk_cache::{self, cache_key, DiskCache, WorkFolder};
use crate::error::RuntimeError;
use crate::msl_launch::msl_compile_failure;
use dispatch2::DispatchData;
use metile_compiler::{MslKernel, MslVersion};
use objc2::rc::Retained;
use objc2::runtime::ProtocolObject;
use objc2_foundation::NSString;
use objc2_metal::{MTLCompileOptions, MTLDevice, MTLLanguageVersion, MTLLibrary};
use std::path::Path;
use std::process::Command;

/// Bumped when the flags or the layout of cached metallibs change.
const CACHE_FORMAT: &str = "metile-metal-2";
/// With the MSL version the kernel is written in (`MslKernel::language_version`:
/// 3.1 for bfloat and `simdgroup_matrix<bfloat>`, 4.0 for Metal 4 tensor ops).
const METAL_FLAGS: &[&str] = &["-O2", "-fno-fast-math"];

/// The run-time compiler's version for `version`.
fn language_version(version: MslVersion) -> MTLLanguageVersion {
    match version {
        MslVersion::V3_1 => MTLLanguageVersion::Version3_1,
        MslVersion::V3_2 => MTLLanguageVersion::Version3_2,
        MslVersion::V4_0 => MTLLanguageVersion::Version4_0,
    }
}

/// Xcode's Metal compiler, found through `xcrun`.
#[derive(Clone, Debug)]
pub struct OfflineCompiler {
    /// The SDK version and the compiler's `--version`: part of every cache key.
    sdk_version: String,
}

impl OfflineCompiler {
    /// `None` when `xcrun` or the Metal toolchain is missing (Command Line Tools
    /// without Xcode ship no `metal`, and recent Xcodes download it apart):
    /// running `metal --version` proves it is there.
    pub fn find() -> Option<OfflineCompiler> {
        let found = Command::new("xcrun")
            .args(["-sdk", "macosx", "metal", "--version"])
            .output()
            .ok()?;
        if !found.status.success() {
            return None;
        }
        let compiler = String::from_utf8_lossy(&found.stdout).trim().to_string();
        let version = Command::new("xcrun")
            .args(["-sdk", "macosx", "--show-sdk-version"])
            .output()
            .ok()?;
        let sdk_version = String::from_utf8_lossy(&version.stdout).trim().to_string();
        (version.status.success() && !sdk_version.is_empty()).then_some(OfflineCompiler {
            sdk_version: format!("{sdk_version}\n{compiler}"),
        })
    }

    /// Compiles `msl` in `work` and returns the metallib's bytes.
    fn compile_in(&self, msl: &MslKernel, work: &Path) -> Result<Vec<u8>, RuntimeError> {
        let source = work.join(crate::msl_launch::source_file_name(&msl.kernel_name));
        let air = work.join("kernel.air");
        let library = work.join("kernel.metallib");
        std::fs::write(&source, &msl.source)
            .map_err(|e| RuntimeError::Device(format!("writing {}: {e}", source.display())))?;
        run_xcrun(
            Command::new("xcrun")
                .current_dir(work)
                .args(["-sdk", "macosx", "metal"])
                .args(METAL_FLAGS)
                .arg(msl.language_version.std_flag())
                .arg("-c")
                .arg(source.file_name().unwrap_or_default())
                .arg("-o")
                .arg(&air),
            msl,
        )?;
        run_xcrun(
            Command::new("xcrun")
                .current_dir(work)
                .args(["-sdk", "macosx", "metallib"])
                .arg(&air)
                .arg("-o")
                .arg(&library),
            msl,
        )?;
        std::fs::read(&library)
            .map_err(|e| RuntimeError::Device(format!("reading {}: {e}", library.display())))
    }
}

fn run_xcrun(command: &mut Command, msl: &MslKernel) -> Result<(), RuntimeError> {
    let output = command
        .output()
        .map_err(|e| RuntimeError::Device(format!("running xcrun: {e}")))?;
    if output.status.success() {
        return Ok(());
    }
    let mut diagnostics = String::from_utf8_lossy(&output.stderr).into_owned();
    diagnostics.push_str(&String::from_utf8_lossy(&output.stdout));
    Err(msl_compile_failure(
        "the Metal compiler (xcrun metal)",
        &diagnostics,
        msl,
    ))
}

/// Builds Metal libraries for one device.
pub struct LibraryBuilder {
    offline: Option<OfflineCompiler>,
    cache: DiskCache,
    gpu_family: String,
}

impl LibraryBuilder {
    pub fn new(gpu_family: String) -> LibraryBuilder {
        LibraryBuilder {
            offline: OfflineCompiler::find(),
            cache: DiskCache::open("metal"),
            gpu_family,
        }
    }

    /// The key that decides a kernel's compiled form: also the in-memory
    /// pipeline cache's key.
    pub fn key(&self, msl: &MslKernel) -> String {
        let sdk = self
            .offline
            .as_ref()
            .map_or("runtime-compiler", |c| c.sdk_version.as_str());
        cache_key(&[
            CACHE_FORMAT.as_bytes(),
            msl.source.as_bytes(),
            sdk.as_bytes(),
            self.gpu_family.as_bytes(),
            METAL_FLAGS.join(" ").as_bytes(),
            msl.language_version.std_flag().as_bytes(),
        ])
    }

    pub fn build(
        &self,
        device: &ProtocolObject<dyn MTLDevice>,
        msl: &MslKernel,
        key: &str,
    ) -> Result<Shared<ProtocolObject<dyn MTLLibrary>>, RuntimeError> {
        let library = match &self.offline {
            Some(offline) => {
                let bytes = match self.cache.get(key) {
                    Some(bytes) => bytes,
                    None => {
                        let bytes = self.compile_offline(offline, msl, key)?;
                        // A cache that cannot be written only costs a recompile next time.
                        let _ = self.cache.put(key, &bytes);
                        bytes
                    }
                };
                let data = DispatchData::from_bytes(&bytes);
                device
                    .newLibraryWithData_error(&data)
                    .map_err(|e| load_error(msl, &e.localizedDescription().to_string()))?
            }
            None => compile_at_run_time(device, msl)?,
        };
        Ok(Shared(library))
    }

    fn compile_offline(
        &self,
        offline: &OfflineCompiler,
        msl: &MslKernel,
        key: &str,
    ) -> Result<Vec<u8>, RuntimeError> {
        // A private folder of this process's session (a predictable name in the
        // shared temporary folder could be made first by another user).
        let work = disk_cache::session(self.cache.dir())
            .and_then(|session| WorkFolder::new(&session))
            .map_err(|reason| {
                RuntimeError::Device(format!("preparing a folder to compile `{key}` in: {reason}"))
            })?;
        offline.compile_in(msl, work.path())
    }
}

fn compile_at_run_time(
    device: &ProtocolObject<dyn MTLDevice>,
    msl: &MslKernel,
) -> Result<Retained<ProtocolObject<dyn MTLLibrary>>, RuntimeError> {
    let options = MTLCompileOptions::new();
    options.setLanguageVersion(language_version(msl.language_version));
    // `mathMode` needs macOS 15; the older switch says the same on every version.
    #[allow(deprecated)]
    options.setFastMathEnabled(false);
    device
        .newLibraryWithSource_options_error(&NSString::from_str(&msl.source), Some(&options))
        .map_err(|e| {
            msl_compile_failure(
                "the Metal compiler (newLibraryWithSource)",
                &e.localizedDescription().to_string(),
                msl,
            )
        })
}

fn load_error(msl: &MslKernel, reason: &str) -> RuntimeError {
    RuntimeError::Device(format!(
        "Metal cannot load the compiled library of kernel `{}`: {reason}",
        msl.kernel_name
    ))
}
