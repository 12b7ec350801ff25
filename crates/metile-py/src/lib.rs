//! The `metile._metile` extension module: tracing proxies, kernel objects and
//! launch, buffers, exceptions and the layout algebra.

use pyo3::prelude::*;

pub mod errors;

#[pymodule]
fn _metile(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CompilationError", py.get_type::<errors::CompilationError>())?;
    Ok(())
}
