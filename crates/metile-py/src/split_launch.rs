//! `split_k=S`: the option's parsing and the launch plan of the two kernels
//! `metile_compiler::split_k` derives from the traced one, which the runtime
//! compiles and launches in order with a pooled workspace of partial tiles
//! (`metile_runtime::launch_plan`, docs/gemm.md).

use crate::errors::compilation_error;
use crate::tracing::PyTileFunction;
use metile_compiler::launch_plan::LaunchPlan;
use metile_compiler::split_k::split_k;
use metile_ir::Function;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBool;

pub const OPTION_SPLIT_K: &str = "split_k";

/// The most splits: the partial kernel's grid multiplies axis 2 by the count,
/// and CUDA allows 65535 blocks along it.
pub const MAX_SPLIT_K: u32 = 65535;

/// `split_k=value`: an int from 1 (no split) to [`MAX_SPLIT_K`].
pub fn parse_split_k(value: &Bound<'_, PyAny>) -> PyResult<u32> {
    let repr = || value.repr().map(|r| r.to_string()).unwrap_or_default();
    if value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "split_k is the number of programs that share each output tile's K loop and must be an int, got {}",
            repr()
        )));
    }
    let n: i64 = value.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "split_k is the number of programs that share each output tile's K loop and must be an int, got {}",
            repr()
        ))
    })?;
    u32::try_from(n)
        .ok()
        .filter(|n| (1..=MAX_SPLIT_K).contains(n))
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "split_k must be from 1 (no split) to {MAX_SPLIT_K}, got {}",
                repr()
            ))
        })
}

/// The compiler's launch plan for `func` with `split_k=splits` (1: the kernel
/// alone); a kernel split-K cannot split is a `metile.CompilationError` at
/// the line the reason names.
pub fn plan_launch(py: Python<'_>, func: &Function, splits: u32) -> PyResult<LaunchPlan> {
    metile_compiler::launch_plan::plan_launch(func, splits).map_err(|e| split_error(py, func, splits, e))
}

fn split_error(py: Python<'_>, func: &Function, splits: u32, e: metile_compiler::CompileError) -> PyErr {
    compilation_error(
        py,
        &format!("split_k={splits} cannot split kernel {}: {}", func.name, e.reason),
        &e.loc,
    )
}

/// `split_k(func, splits)`: the partial and finishing kernels (traced
/// functions, for `compile_msl` / `compile_cuda`) that `split_k=splits`
/// launches in place of `func`.
#[pyfunction]
#[pyo3(name = "split_k")]
pub fn split_k_py(
    py: Python<'_>,
    func: &Bound<'_, PyTileFunction>,
    splits: &Bound<'_, PyAny>,
) -> PyResult<(PyTileFunction, PyTileFunction)> {
    let splits = parse_split_k(splits)?;
    if splits < 2 {
        return Err(PyValueError::new_err(
            "split_k=1 runs the kernel unchanged; there is nothing to split",
        ));
    }
    let func = &func.get().func;
    let s = split_k(func, splits).map_err(|e| split_error(py, func, splits, e))?;
    Ok((PyTileFunction::new(s.partial), PyTileFunction::new(s.finish)))
}
