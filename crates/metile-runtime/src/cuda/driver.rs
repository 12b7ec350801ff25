//! Loading the CUDA driver and NVRTC at run time, and turning their status codes
//! into [`RuntimeError`]s.
//!
//! cudarc resolves every function lazily from `libcuda.so.1` and
//! `libnvrtc.so.{13,12,11}` by name and panics when a library is missing, so
//! [`load_libraries`] checks both first and says which one is missing. NVRTC
//! often lives outside the loader's search path (a CUDA toolkit in
//! `/usr/local/cuda`, `CUDA_HOME`): it is then loaded from there by full path
//! with `RTLD_GLOBAL`, after which loading it by name finds the same library.

use crate::error::RuntimeError;
use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nvrtc;
use std::ffi::CStr;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Folders where a CUDA toolkit keeps NVRTC when it is not on the loader's path.
fn nvrtc_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.push(PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib"));
    dirs.extend(versioned_toolkits().into_iter().map(|t| t.join("lib64")));
    dirs
}

/// `/usr/local/cuda-X.Y` toolkits, newest first.
pub fn versioned_toolkits() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/usr/local") else {
        return Vec::new();
    };
    let mut versioned: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cuda-"))
        })
        .collect();
    versioned.sort();
    versioned.reverse();
    versioned
}

/// Loads the newest `libnvrtc.so.N` found in `nvrtc_dirs` globally (with its
/// builtins library), so cudarc's lookup by name finds it.
fn preload_nvrtc() -> bool {
    for dir in nvrtc_dirs() {
        for major in ["13", "12", "11"] {
            let path = dir.join(format!("libnvrtc.so.{major}"));
            if !path.exists() {
                continue;
            }
            let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
            // SAFETY: loading NVRTC runs only its initialisers; the handle is leaked
            // so the library stays loaded for the process.
            let lib = unsafe { libloading::os::unix::Library::open(Some(&path), flags) };
            if let Ok(lib) = lib {
                std::mem::forget(lib);
                return true;
            }
        }
    }
    false
}

/// Whether a driver and NVRTC can be loaded; the error names what is missing.
pub fn load_libraries() -> Result<(), RuntimeError> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // SAFETY: only tries to dlopen the candidate library names.
            if !unsafe { cu::is_culib_present() } {
                return Err(
                    "the cuda backend needs the NVIDIA driver library (libcuda.so.1), which was not \
                            found: no NVIDIA driver is installed here"
                        .to_string(),
                );
            }
            // SAFETY: as above.
            if !unsafe { nvrtc::is_culib_present() } && !preload_nvrtc() {
                return Err(
                    "the cuda backend needs NVRTC (libnvrtc.so.13, .12 or .11 from a CUDA toolkit), \
                            which was not found on the library path, in CUDA_HOME or in /usr/local/cuda"
                        .to_string(),
                );
            }
            Ok(())
        })
        .clone()
        .map_err(RuntimeError::Unavailable)
}

/// The driver's name and description of `code`.
pub fn describe(code: cu::CUresult) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: the driver writes pointers to static strings (or leaves them null).
    unsafe {
        cu::cuGetErrorName(code, &mut name);
        cu::cuGetErrorString(code, &mut text);
    }
    let read = |p: *const std::ffi::c_char| {
        if p.is_null() {
            None
        } else {
            // SAFETY: non-null pointers from the driver are NUL-terminated static strings.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        }
    };
    match (read(name), read(text)) {
        (Some(n), Some(t)) => format!("{n}: {t}"),
        (Some(n), None) => n,
        _ => format!("CUDA error {}", code as i32),
    }
}

/// Errors that leave the context unusable: every later call fails the same way.
pub fn is_sticky(code: cu::CUresult) -> bool {
    use cu::CUresult::*;
    matches!(
        code,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ASSERT
    )
}

/// `Ok` for `CUDA_SUCCESS`, else a device error saying what was being done.
pub fn check(code: cu::CUresult, what: &str) -> Result<(), RuntimeError> {
    if code == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(RuntimeError::Device(format!(
            "CUDA {what} failed: {}",
            describe(code)
        )))
    }
}

/// NVRTC's description of `code`.
pub fn describe_nvrtc(code: nvrtc::nvrtcResult) -> String {
    // SAFETY: NVRTC returns a static NUL-terminated string.
    let p = unsafe { nvrtc::nvrtcGetErrorString(code) };
    if p.is_null() {
        format!("NVRTC error {}", code as i32)
    } else {
        // SAFETY: checked non-null above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

type ElapsedFn = unsafe extern "C" fn(*mut f32, cu::CUevent, cu::CUevent) -> cu::CUresult;

/// `cuEventElapsedTime`: the `_v2` entry point of CUDA 12.8+ drivers, else the
/// original one (the bindings name only the newer).
///
/// # Safety
/// Both events must be valid and recorded.
pub unsafe fn event_elapsed_ms(
    ms: &mut f32,
    start: cu::CUevent,
    end: cu::CUevent,
) -> Result<cu::CUresult, RuntimeError> {
    static ELAPSED: OnceLock<Option<ElapsedFn>> = OnceLock::new();
    let f = ELAPSED.get_or_init(|| {
        // SAFETY: the driver library is loaded (checked at open); the symbols
        // have this signature in every driver that exports them.
        let lib = unsafe { cu::culib() };
        [&b"cuEventElapsedTime_v2"[..], &b"cuEventElapsedTime"[..]]
            .iter()
            .find_map(|name| unsafe { lib.get::<ElapsedFn>(*name) }.ok().map(|s| *s))
    });
    match f {
        // SAFETY: forwarded from the caller's contract.
        Some(f) => Ok(unsafe { f(ms, start, end) }),
        None => Err(RuntimeError::Device(
            "the CUDA driver has no cuEventElapsedTime".into(),
        )),
    }
}
