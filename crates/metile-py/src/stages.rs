//! Looking at compilation stages from Python without launching: the MSL (and GPU
//! IR) a traced kernel compiles to. Used by the benchmarks and by people tuning
//! kernels; `METILE_DEBUG` prints the same text during normal launches.

use crate::errors::compilation_error;
use crate::tracing::PyTileFunction;
use metile_compiler::{compile_msl, MslOptions};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// `{"msl": str, "kernel_name": str, "threads_per_group": int, "gpu_ir": str}`
/// for a traced kernel (`metile._frontend.specialize(...)`'s result).
#[pyfunction]
#[pyo3(name = "compile_msl", signature = (func, num_sgs=None))]
pub fn compile_msl_py<'py>(
    py: Python<'py>,
    func: &Bound<'py, PyTileFunction>,
    num_sgs: Option<u32>,
) -> PyResult<Bound<'py, PyDict>> {
    let f = func.get().func.clone();
    let options = MslOptions {
        num_sgs,
        keep_gpu_ir: true,
    };
    let compiled = py.detach(|| compile_msl(&f, &options));
    let compiled = compiled.map_err(|e| {
        compilation_error(
            py,
            &format!("cannot compile `{}` for Apple GPUs: {}", e.op, e.reason),
            &e.loc,
        )
    })?;
    let out = PyDict::new(py);
    out.set_item("msl", &compiled.kernel.source)?;
    out.set_item("kernel_name", &compiled.kernel.kernel_name)?;
    out.set_item("threads_per_group", compiled.kernel.threads_per_group)?;
    out.set_item("gpu_ir", compiled.gpu_ir.unwrap_or_default())?;
    Ok(out)
}
