//! `python -m metile compile`'s bridge to `metile_runtime::aot`: a traced
//! specialisation in, the artifact's files out (Python writes them).

use crate::device_state::runtime_error_to_py;
use crate::tracing::PyTileFunction;
use metile_runtime::aot::{build, BuildRequest};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `aot_build(func, target, num_sgs=None, grid=None, version="", cubin=True)`:
/// `[(file name, bytes), ...]` of the artifact of a traced kernel
/// (`metile._frontend.specialize(...)`'s result) for `target` ("apple",
/// "apple10" or "sm_XY"), the manifest last.
#[pyfunction]
#[pyo3(name = "aot_build", signature = (func, target, num_sgs=None, grid=None, version="", cubin=true))]
pub fn aot_build_py<'py>(
    py: Python<'py>,
    func: &Bound<'_, PyTileFunction>,
    target: &str,
    num_sgs: Option<u32>,
    grid: Option<&str>,
    version: &str,
    cubin: bool,
) -> PyResult<Vec<(String, Bound<'py, PyBytes>)>> {
    let f = func.get().func.clone();
    let request = BuildRequest {
        target,
        num_sgs,
        grid,
        metile_version: version,
        cubin,
    };
    let built = py
        .detach(|| build(&f, &request))
        .map_err(|e| runtime_error_to_py(py, e))?;
    Ok(built
        .files
        .into_iter()
        .map(|(name, bytes)| (name, PyBytes::new(py, &bytes)))
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(aot_build_py, m)?)
}
