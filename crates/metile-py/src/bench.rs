//! What benchmarking and autotuning need from the runtime: the current device's
//! own clock (`Device::time_ms`) around a Python callable, the device's model,
//! and the shared on-disk cache where autotune winners persist across processes.

use crate::device_state::{current_device, runtime_error_to_py, show_runtime_warnings};
use metile_runtime::disk_cache::{cache_key, DiskCache};
use metile_runtime::RuntimeError;
use pyo3::prelude::*;

/// The version of the compiler that produced this module; part of every
/// persisted autotune key, so a new compiler retunes.
pub const COMPILER_VERSION: &str = env!("CARGO_PKG_VERSION");

const AUTOTUNE_CACHE: &str = "autotune";

/// Times the device work `run()` launches with the current device's clock, in
/// milliseconds, waiting for it to finish; `None` when the device has no clock of
/// its own (the caller then times `run()` plus `synchronize()` by the wall clock).
/// On cuda the clock runs on the stream torch (or CuPy) has current, the one
/// launches with its tensors go on (`placement.rs`).
#[pyfunction]
pub fn device_time_ms(py: Python<'_>, run: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    let device = current_device(py)?;
    let stream = match device.memory() {
        Some(_) => crate::placement::ambient_stream(py, device.ordinal())?,
        None => None,
    };
    let _stream_scope = metile_runtime::LaunchStream::enter(stream);
    let mut raised: Option<PyErr> = None;
    let timed = {
        let mut call = || -> Result<(), RuntimeError> {
            run.call0().map(drop).map_err(|e| {
                raised = Some(e);
                RuntimeError::Device("the timed callable raised an exception".to_string())
            })
        };
        device.time_ms(&mut call)
    };
    match timed {
        None => Ok(None),
        Some(Ok(ms)) => Ok(Some(ms)),
        Some(Err(e)) => Err(raised.take().unwrap_or_else(|| runtime_error_to_py(py, e))),
    }
}

/// The hardware behind the current device (GPU model, ...), or the backend's name.
#[pyfunction]
pub fn device_model(py: Python<'_>) -> PyResult<String> {
    Ok(current_device(py)?.model())
}

/// The compiler version persisted autotune entries are keyed by.
#[pyfunction]
pub fn compiler_version() -> &'static str {
    COMPILER_VERSION
}

/// The autotune cache key of `parts` on the current device: the compiler
/// version, the backend and its model come first.
fn autotune_key(py: Python<'_>, parts: &[String]) -> PyResult<String> {
    let device = current_device(py)?;
    let model = device.model();
    let mut all: Vec<&[u8]> = vec![
        COMPILER_VERSION.as_bytes(),
        device.name().as_bytes(),
        model.as_bytes(),
    ];
    all.extend(parts.iter().map(|p| p.as_bytes()));
    Ok(cache_key(&all))
}

/// The persisted autotune entry for `parts` on the current device, or `None`
/// when absent or corrupt (a corrupt entry is removed).
#[pyfunction]
pub fn autotune_cache_get(py: Python<'_>, parts: Vec<String>) -> PyResult<Option<String>> {
    let key = autotune_key(py, &parts)?;
    let cache = DiskCache::open(AUTOTUNE_CACHE);
    show_runtime_warnings(py)?;
    Ok(cache.get(&key).and_then(|bytes| String::from_utf8(bytes).ok()))
}

/// Persists `entry` for `parts` on the current device. Returns whether it was
/// written: a cache that cannot be written only costs a retune later.
#[pyfunction]
pub fn autotune_cache_put(py: Python<'_>, parts: Vec<String>, entry: &str) -> PyResult<bool> {
    let key = autotune_key(py, &parts)?;
    let cache = DiskCache::open(AUTOTUNE_CACHE);
    show_runtime_warnings(py)?;
    Ok(cache.put(&key, entry.as_bytes()).is_ok())
}

/// The folder autotune entries live in (under `METILE_CACHE_DIR`), or `None`
/// when it is refused (not private to this user) and winners are not persisted.
#[pyfunction]
pub fn autotune_cache_dir(py: Python<'_>) -> PyResult<Option<String>> {
    let cache = DiskCache::open(AUTOTUNE_CACHE);
    show_runtime_warnings(py)?;
    Ok(cache.dir().map(|dir| dir.display().to_string()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(device_time_ms, m)?)?;
    m.add_function(wrap_pyfunction!(device_model, m)?)?;
    m.add_function(wrap_pyfunction!(compiler_version, m)?)?;
    m.add_function(wrap_pyfunction!(autotune_cache_get, m)?)?;
    m.add_function(wrap_pyfunction!(autotune_cache_put, m)?)?;
    m.add_function(wrap_pyfunction!(autotune_cache_dir, m)?)?;
    Ok(())
}
