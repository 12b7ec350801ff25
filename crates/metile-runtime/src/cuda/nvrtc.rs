//! CUDA C++ to a cubin for one architecture with NVRTC, through the shared disk
//! cache: the key is the source text, the architecture and NVRTC's version, so
//! a new toolkit or GPU never reuses an old cubin, and a corrupt entry is
//! recompiled (the cache checks every entry's checksum).

use super::driver::describe_nvrtc;
use crate::disk_cache::{cache_key, DiskCache};
use crate::error::RuntimeError;
use cudarc::nvrtc::sys as nvrtc;
use std::ffi::{c_char, CString};

/// NVRTC's version as `major.minor`.
pub fn version() -> Result<(i32, i32), RuntimeError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC writes two ints.
    let code = unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
    if code != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        return Err(RuntimeError::Unavailable(format!(
            "NVRTC does not answer: {}",
            describe_nvrtc(code)
        )));
    }
    Ok((major, minor))
}

/// A failed compilation: NVRTC's log and the first line of the source it blames.
pub struct NvrtcFailure {
    pub log: String,
    pub line: Option<u32>,
}

/// The first `name.cu(LINE): error` line of an NVRTC log.
pub fn first_error_line(log: &str, file: &str) -> Option<u32> {
    log.lines().find_map(|l| {
        let rest = l.strip_prefix(file)?.strip_prefix('(')?;
        let (num, tail) = rest.split_once(')')?;
        tail.contains("error").then(|| num.parse().ok()).flatten()
    })
}

/// Compiles `source` for `arch` (e.g. `sm_90`), or takes the cubin from `cache`.
pub fn compile_cached(
    cache: &DiskCache,
    source: &str,
    file: &str,
    arch: &str,
    nvrtc_version: (i32, i32),
) -> Result<Result<Vec<u8>, NvrtcFailure>, RuntimeError> {
    let version = format!("nvrtc {}.{}", nvrtc_version.0, nvrtc_version.1);
    let key = cache_key(&[source.as_bytes(), arch.as_bytes(), version.as_bytes()]);
    if let Some(cubin) = cache.get(&key) {
        return Ok(Ok(cubin));
    }
    let compiled = compile(source, file, arch)?;
    if let Ok(cubin) = &compiled {
        // A cache that cannot be written only costs a recompilation next time.
        let _ = cache.put(&key, cubin);
    }
    Ok(compiled)
}

struct Program(nvrtc::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once.
        unsafe {
            nvrtc::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

fn nvrtc_check(code: nvrtc::nvrtcResult, what: &str) -> Result<(), RuntimeError> {
    if code == nvrtc::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(RuntimeError::Device(format!(
            "NVRTC {what} failed: {}",
            describe_nvrtc(code)
        )))
    }
}

/// The CUDA toolkit's include folder (for `cuda_fp16.h` and `cuda_bf16.h`, which
/// NVRTC 13 no longer bundles), if one is installed.
fn toolkit_include_dir() -> Option<&'static str> {
    static DIR: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let mut roots: Vec<std::path::PathBuf> = ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"]
            .iter()
            .filter_map(|v| std::env::var_os(v).filter(|v| !v.is_empty()))
            .map(std::path::PathBuf::from)
            .collect();
        roots.push("/usr/local/cuda".into());
        roots.push("/usr/local/cuda/targets/x86_64-linux".into());
        roots.extend(super::driver::versioned_toolkits());
        roots
            .into_iter()
            .map(|r| r.join("include"))
            .find(|d| d.join("cuda_fp16.h").is_file())
            .and_then(|d| d.to_str().map(str::to_string))
    })
    .as_deref()
}

pub fn compile(source: &str, file: &str, arch: &str) -> Result<Result<Vec<u8>, NvrtcFailure>, RuntimeError> {
    let nul = |s: &str| {
        CString::new(s).map_err(|_| RuntimeError::Device("CUDA source with a NUL byte".to_string()))
    };
    let (src, name) = (nul(source)?, nul(file)?);
    let mut prog: nvrtc::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: valid NUL-terminated strings; no headers are passed.
    let code = unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    nvrtc_check(code, "program creation")?;
    let prog = Program(prog);
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_string(),
        "--device-as-default-execution-space".to_string(),
        // Every Tile IR op rounds on its own: no contraction of a*b+c into an fma.
        "--fmad=false".to_string(),
    ];
    if let Some(dir) = toolkit_include_dir() {
        options.push(format!("--include-path={dir}"));
    }
    let options: Vec<CString> = options.iter().map(|o| nul(o)).collect::<Result<_, _>>()?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: the option strings outlive the call.
    let code = unsafe { nvrtc::nvrtcCompileProgram(prog.0, option_ptrs.len() as i32, option_ptrs.as_ptr()) };
    if code != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(&prog).unwrap_or_else(|_| describe_nvrtc(code));
        let line = first_error_line(&log, file);
        return Ok(Err(NvrtcFailure { log, line }));
    }
    let mut size = 0usize;
    // SAFETY: the program compiled; NVRTC writes the size.
    nvrtc_check(
        unsafe { nvrtc::nvrtcGetCUBINSize(prog.0, &mut size) },
        "cubin size",
    )?;
    let mut cubin = vec![0u8; size];
    // SAFETY: the buffer has the size NVRTC reported.
    nvrtc_check(
        unsafe { nvrtc::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) },
        "cubin retrieval",
    )?;
    Ok(Ok(cubin))
}

fn program_log(prog: &Program) -> Result<String, RuntimeError> {
    let mut size = 0usize;
    // SAFETY: NVRTC writes the log size.
    nvrtc_check(
        unsafe { nvrtc::nvrtcGetProgramLogSize(prog.0, &mut size) },
        "log size",
    )?;
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: the buffer has the size NVRTC reported.
    nvrtc_check(
        unsafe { nvrtc::nvrtcGetProgramLog(prog.0, log.as_mut_ptr().cast()) },
        "log retrieval",
    )?;
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Ok(String::from_utf8_lossy(&log[..end]).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::first_error_line;

    #[test]
    fn the_first_error_line_is_read_from_the_log() {
        let log = "add.cu(12): warning: unused\nadd.cu(57): error: identifier \"q\" is undefined\n";
        assert_eq!(first_error_line(log, "add.cu"), Some(57));
        assert_eq!(first_error_line("nothing", "add.cu"), None);
    }
}
