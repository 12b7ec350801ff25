//! `METILE_CHECK_TARGETS`: after a kernel traces and compiles for the current
//! device, it is compiled for the GPU targets named there too (no device
//! needed), and an internal compiler error on any of them fails the launch.
//! Documented refusals pass: they are limits, not bugs. The test suite turns
//! this on, so every kernel any test runs on any backend is checked on every
//! target (`metile_compiler::portability`).

use crate::errors::compilation_error;
use metile_compiler::portability::{internal_errors, parse_targets};
use metile_ir::Function;
use metile_runtime::CompileOptions;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

const VARIABLE: &str = "METILE_CHECK_TARGETS";

/// Fails with the first internal compiler error `func` meets on a target that
/// `METILE_CHECK_TARGETS` names; does nothing when the variable is unset.
pub fn check(
    py: Python<'_>,
    kernel: &str,
    func: &Function,
    options: &CompileOptions,
    device: &str,
) -> PyResult<()> {
    let Some(spec) = std::env::var(VARIABLE)
        .ok()
        .filter(|s| !s.trim().is_empty() && s != "0")
    else {
        return Ok(());
    };
    let targets = parse_targets(&spec).map_err(PyValueError::new_err)?;
    let options = metile_compiler::CompileOptions {
        num_sgs: options.num_sgs,
        passes: options.passes,
        ..Default::default()
    };
    let errors = py.detach(|| internal_errors(func, &options, &targets));
    match errors.into_iter().next() {
        None => Ok(()),
        Some((target, e)) => Err(compilation_error(
            py,
            &format!(
                "kernel {kernel} runs on {device} but compiling `{}` for {target} fails ({VARIABLE}): {}",
                e.op, e.reason
            ),
            &e.loc,
        )),
    }
}
