//! Profiling msl-emu launches from Python (`metile.testing.emu_profile`): the
//! runtime's recorder (`metile_runtime::emu_profiling`) switched on and off,
//! and each recorded launch handed back as a dict.

use metile_runtime::emu_profiling::{self, LaunchProfile};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::device_state::{current_device, runtime_error_to_py};

/// Starts profiling the launches on the msl-emu device (the current device
/// must be msl-emu); refused while a profile is already being recorded.
#[pyfunction]
fn emu_profile_start(py: Python<'_>) -> PyResult<()> {
    let device = current_device(py)?;
    if device.name() != "msl-emu" {
        return Err(PyValueError::new_err(format!(
            "emu_profile counts what kernels do on the msl-emu device; the current device is {} \
             (metile.set_device('msl-emu') first)",
            device.name()
        )));
    }
    emu_profiling::start_recording().map_err(|e| runtime_error_to_py(py, e))
}

/// Stops profiling; one dict per launch recorded since `emu_profile_start`.
#[pyfunction]
fn emu_profile_stop(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    emu_profiling::stop_recording()
        .iter()
        .map(|launch| launch_dict(py, launch))
        .collect()
}

fn launch_dict<'py>(py: Python<'py>, launch: &LaunchProfile) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("kernel", &launch.kernel)?;
    dict.set_item("grid", (launch.grid[0], launch.grid[1], launch.grid[2]))?;
    dict.set_item("threads_per_threadgroup", launch.threads_per_group)?;
    dict.set_item("threadgroup_memory_bytes", launch.threadgroup_memory_bytes)?;
    for (name, value) in launch.counts.fields() {
        dict.set_item(name, value)?;
    }
    dict.set_item("bank_conflict_ratio", launch.counts.bank_conflict_ratio())?;
    dict.set_item("bank_conflict_excess", launch.counts.bank_conflict_excess())?;
    let sites = launch
        .counts
        .threadgroup_sites
        .iter()
        .zip(&launch.site_sources)
        .map(|(site, source)| {
            let entry = PyDict::new(py);
            entry.set_item("msl_line", site.msl_line)?;
            entry.set_item("source", source.as_ref().map(|loc| loc.to_string()))?;
            entry.set_item("store", site.store)?;
            entry.set_item("instructions", site.instructions)?;
            entry.set_item("wavefronts", site.wavefronts)?;
            entry.set_item("min_wavefronts", site.min_wavefronts)?;
            Ok(entry)
        })
        .collect::<PyResult<Vec<_>>>()?;
    dict.set_item("threadgroup_sites", sites)?;
    Ok(dict)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(emu_profile_start, m)?)?;
    m.add_function(wrap_pyfunction!(emu_profile_stop, m)?)?;
    Ok(())
}
