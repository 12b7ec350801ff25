//! The process's current device. It starts as `METILE_DEVICE` (or the best
//! backend present) and can be switched with `metile.set_device`, which is how
//! one test process runs the conformance suite on every backend.

use crate::errors::{compilation_error, with_location};
use metile_runtime::msl_emu::CompilerCommand;
use metile_runtime::{default_device_name, open_device_with, Device, HostTools, RuntimeError};
use pyo3::exceptions::{
    PyIndexError, PyKeyboardInterrupt, PyRuntimeError, PyTypeError, PyValueError, PyZeroDivisionError,
};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

static CURRENT: RwLock<Option<Arc<dyn Device>>> = RwLock::new(None);

pub fn runtime_error_to_py(py: Python<'_>, e: RuntimeError) -> PyErr {
    match e {
        RuntimeError::OutOfBounds { message, loc } => {
            PyIndexError::new_err(with_location(py, &message, &loc))
        }
        RuntimeError::AssertionFailed { message, loc } => {
            pyo3::exceptions::PyAssertionError::new_err(with_location(py, &message, &loc))
        }
        RuntimeError::Compile {
            message,
            loc: Some(loc),
        } => compilation_error(py, &message, &loc),
        RuntimeError::Compile { message, loc: None } => crate::errors::CompilationError::new_err(message),
        RuntimeError::BadArguments(m) => PyTypeError::new_err(m),
        RuntimeError::InvalidLaunch(m) => PyValueError::new_err(m),
        RuntimeError::Unavailable(m) => PyValueError::new_err(m),
        RuntimeError::DivisionByZero { message, loc } => {
            PyZeroDivisionError::new_err(with_location(py, &message, &loc))
        }
        RuntimeError::InvalidShift { message, loc } => {
            PyValueError::new_err(with_location(py, &message, &loc))
        }
        // Only reached when no Python handler raised (the launch path returns that
        // exception instead).
        RuntimeError::Interrupted => PyKeyboardInterrupt::new_err("the launch was interrupted"),
        RuntimeError::Device(m) => PyRuntimeError::new_err(m),
        RuntimeError::Artifact(m) => PyValueError::new_err(m),
    }
}

/// The current device, opening the default one on first use.
pub fn current_device(py: Python<'_>) -> PyResult<Arc<dyn Device>> {
    if let Ok(guard) = CURRENT.read() {
        if let Some(d) = guard.as_ref() {
            return Ok(d.clone());
        }
    }
    let device = open_device(py, &default_device_name()).map_err(|e| runtime_error_to_py(py, e))?;
    if let Ok(mut guard) = CURRENT.write() {
        *guard = Some(device.clone());
    }
    show_runtime_warnings(py)?;
    Ok(device)
}

/// Shows, as `metile.MetileWarning`s, what the runtime queued to say since
/// the last call (a cache folder that other users could write, once per
/// folder; host arrays copied for a launch).
pub fn show_runtime_warnings(py: Python<'_>) -> PyResult<()> {
    if !metile_runtime::notices::pending() {
        return Ok(());
    }
    for message in metile_runtime::notices::take() {
        crate::errors::warn(py, &message, 1)?;
    }
    Ok(())
}

/// Makes `name` ("cpu", "msl-emu", "metal", "cuda") the device later launches use.
#[pyfunction]
pub fn set_device(py: Python<'_>, name: &str) -> PyResult<()> {
    let device = open_device(py, name).map_err(|e| runtime_error_to_py(py, e))?;
    let mut guard = CURRENT
        .write()
        .map_err(|_| PyRuntimeError::new_err("device state poisoned"))?;
    *guard = Some(device);
    drop(guard);
    show_runtime_warnings(py)
}

/// The name of the current device.
#[pyfunction]
pub fn get_device(py: Python<'_>) -> PyResult<&'static str> {
    Ok(current_device(py)?.name())
}

/// Waits until every kernel launched on the current device has finished.
#[pyfunction]
pub fn synchronize(py: Python<'_>) -> PyResult<()> {
    let device = current_device(py)?;
    py.detach(|| device.synchronize())
        .map_err(|e| runtime_error_to_py(py, e))
}

/// Whether a backend can be opened here, without switching to it.
#[pyfunction]
pub fn device_available(py: Python<'_>, name: &str) -> bool {
    open_device(py, name).is_ok()
}

/// Opens the backend `name`, handing the runtime what only Python can find:
/// for msl-emu, the `zig` of the `ziglang` package (`pip install 'metile[emu]'`),
/// used where the system has no clang++ that builds the shim.
fn open_device(py: Python<'_>, name: &str) -> Result<Arc<dyn Device>, RuntimeError> {
    let mut tools = HostTools::default();
    if name == "msl-emu" {
        tools
            .emu_compilers
            .extend(ziglang_zig(py).map(CompilerCommand::new));
    }
    open_device_with(name, &tools)
}

/// The `zig` executable inside the installed `ziglang` package, found
/// without importing it.
fn ziglang_zig(py: Python<'_>) -> Option<PathBuf> {
    let spec = py
        .import("importlib.util")
        .and_then(|util| util.call_method1("find_spec", ("ziglang",)))
        .ok()?;
    if spec.is_none() {
        return None;
    }
    let locations = spec.getattr("submodule_search_locations").ok()?;
    let executable = if cfg!(windows) { "zig.exe" } else { "zig" };
    locations
        .try_iter()
        .ok()?
        .filter_map(|location| location.ok()?.extract::<PathBuf>().ok())
        .map(|folder| folder.join(executable))
        .find(|zig| zig.is_file())
}
