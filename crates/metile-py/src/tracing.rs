//! Tracing: runs a kernel's (rewritten) Python function on proxy values and
//! records what it does as Tile IR. The Python side (`metile._frontend`) reads
//! the source and rewrites control flow; everything per op happens here.

use std::sync::{Arc, OnceLock};

use metile_ir::{Builder, DType, Function, ParamKind};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::errors::CompilationError;

mod atomics;
mod control;
mod debug;
mod math_ops;
mod ops;
mod roles;
mod shape_ops;
mod state;
mod tile;

pub use control::{TileRange, Undefined};
pub use state::tracing_active;
pub use tile::Tile;

/// A `metile.CompilationError` with `message` at the kernel line being traced
/// (the innermost Python frame).
pub fn error_at_caller(py: Python<'_>, message: &str) -> PyErr {
    state::with_trace(py, "a kernel", |t| Ok(t.error(py, message))).unwrap_or_else(|e| e)
}

/// One traced and optimised kernel specialisation.
#[pyclass(module = "metile._metile", name = "TileFunction", frozen)]
pub struct PyTileFunction {
    pub func: Arc<Function>,
    text: OnceLock<String>,
}

impl PyTileFunction {
    pub fn new(func: Function) -> PyTileFunction {
        PyTileFunction {
            func: Arc::new(func),
            text: OnceLock::new(),
        }
    }
}

#[pymethods]
impl PyTileFunction {
    /// The printed Tile IR.
    #[getter]
    fn text(&self) -> &str {
        self.text.get_or_init(|| metile_ir::print_function(&self.func))
    }

    #[getter]
    fn name(&self) -> &str {
        &self.func.name
    }

    fn __str__(&self) -> &str {
        self.text()
    }

    fn __repr__(&self) -> String {
        format!("<metile TileFunction {}>", self.func.name)
    }
}

fn param_dtype(name: &str, dtype: &str) -> PyResult<DType> {
    DType::parse(dtype).ok_or_else(|| {
        pyo3::exceptions::PyValueError::new_err(format!("parameter '{name}' has unknown dtype {dtype:?}"))
    })
}

/// Traces `kernel` (the rewritten function) once. `params` lists every
/// parameter in order as `(name, kind, payload[, divisibility])`: kind "ptr" or
/// "scalar" with a dtype name as payload (a scalar optionally with what it is a
/// multiple of), "one" (an integer scalar equal to 1 at every launch: traced
/// as the constant, still a parameter) with its dtype name, or "constexpr"
/// with the Python value. `debug` is the `METILE_DEBUG` value the caller read
/// (None: print nothing).
#[pyfunction]
#[pyo3(signature = (kernel, name, params, threads_per_group, optimize=true, debug=None))]
fn trace_kernel(
    py: Python<'_>,
    kernel: &Bound<'_, PyAny>,
    name: &str,
    params: &Bound<'_, PyList>,
    threads_per_group: usize,
    optimize: bool,
    debug: Option<&str>,
) -> PyResult<PyTileFunction> {
    let mut builder = Builder::new(name);
    builder.set_threads_per_group(threads_per_group);
    let mut arg_values: Vec<Result<metile_ir::ValueId, Py<PyAny>>> = vec![];
    for item in params.iter() {
        let item = item.cast_into::<PyTuple>()?;
        let (pname, kind, payload): (String, String, Bound<'_, PyAny>) = (
            item.get_item(0)?.extract()?,
            item.get_item(1)?.extract()?,
            item.get_item(2)?,
        );
        // An optional fourth entry: what the scalar is known to be a multiple of.
        let divisibility: u64 = match item.get_item(3) {
            Ok(d) => d.extract()?,
            Err(_) => 1,
        };
        match kind.as_str() {
            "ptr" => {
                let d = param_dtype(&pname, &payload.extract::<String>()?)?;
                arg_values.push(Ok(builder.add_param(&pname, ParamKind::Pointer(d))));
            }
            "scalar" => {
                let d = param_dtype(&pname, &payload.extract::<String>()?)?;
                let v = builder.add_param(&pname, ParamKind::Scalar(d));
                builder.set_param_divisibility(v, divisibility);
                arg_values.push(Ok(v));
            }
            "one" => {
                let d = param_dtype(&pname, &payload.extract::<String>()?)?;
                if !d.is_int() {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "parameter '{pname}' of kind \"one\" must be an integer, got {d}"
                    )));
                }
                builder.add_param(&pname, ParamKind::Scalar(d));
                arg_values.push(Ok(builder.constant(metile_ir::Literal::Int(1), d)));
            }
            "constexpr" => {
                builder.add_constexpr(&pname, &payload.repr()?.to_string());
                arg_values.push(Err(payload.unbind()));
            }
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "parameter '{pname}' has unknown kind {other:?}"
                )))
            }
        }
    }

    let active = state::ActiveTrace::install(builder)?;
    let args = state::with_root(|t| {
        arg_values
            .into_iter()
            .map(|a| match a {
                Ok(v) => t.wrap_any(py, v),
                Err(obj) => Ok(obj),
            })
            .collect::<PyResult<Vec<_>>>()
    })?;
    let returned = kernel.call1(PyTuple::new(py, args)?)?;
    if !returned.is_none() {
        return Err(CompilationError::new_err(format!(
            "kernel {name} returned {}; kernels return nothing and write their results with \
             metile.store or metile.tile_store",
            state::describe_object(&returned)
        )));
    }
    let mut func = active
        .finish()?
        .finish()
        .map_err(|e| CompilationError::new_err(format!("internal: {e}")))?;
    if !func.uses_thread_ops() {
        // The threadgroup size is only part of the kernel when it reads it.
        func.threads_per_group = None;
    }
    // The trace phase of the compile pipeline: kernel checks, then the
    // target-independent Tile IR passes.
    let (print_after, pipeline) = metile_runtime::debug::pipeline_requests_in(debug);
    let options = metile_compiler::CompileOptions {
        print_after,
        record_stages: pipeline,
        ..Default::default()
    };
    let prepared = metile_compiler::pipeline::prepare(func, optimize, &options).map_err(|e| {
        if e.is_internal() {
            CompilationError::new_err(format!("{} (kernel {name})", e.reason))
        } else {
            let message = format!("cannot compile `{}`: {}", e.op, e.reason);
            crate::errors::compilation_error(py, &message, &e.loc)
        }
    })?;
    metile_runtime::debug::report_run(name, "trace", &prepared.printed, &prepared.records, pipeline);
    Ok(PyTileFunction::new(prepared.func))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTileFunction>()?;
    m.add_class::<Tile>()?;
    m.add_function(wrap_pyfunction!(trace_kernel, m)?)?;
    ops::register(m)?;
    atomics::register(m)?;
    math_ops::register(m)?;
    shape_ops::register(m)?;
    control::register(m)?;
    debug::register(m)?;
    roles::register(m)?;
    Ok(())
}
