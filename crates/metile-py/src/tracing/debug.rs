//! Debugging ops, compile-time checks and compiler hints: `device_print`,
//! `device_assert`, `assume`, `static_assert`, `static_range`, `multiple_of`,
//! `max_contiguous`, `max_constancy`, and the logical ops the frontend's
//! rewrite of `and`/`or`/`not` calls on traced values.

use metile_ir::{AssumeFact, BinaryOp, Operand};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyRange, PyTuple};

use super::state::{describe_object, with_trace, Trace};
use super::tile::Tile;

type Obj<'a, 'py> = &'a Bound<'py, PyAny>;

fn logical(
    py: Python<'_>,
    what: &'static str,
    op: BinaryOp,
    a: Obj<'_, '_>,
    b: Obj<'_, '_>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let a = t.operand(a, what)?;
        let b = t.operand(b, what)?;
        let v = t.ir(py, |bld| bld.logical(op, a, b))?;
        t.wrap_any(py, v)
    })
}

/// `a and b` on traced values (see `metile._frontend.pythonic`).
#[pyfunction]
pub fn logical_and(py: Python<'_>, a: Obj<'_, '_>, b: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    logical(py, "`and`", BinaryOp::And, a, b)
}

/// `a or b` on traced values.
#[pyfunction]
pub fn logical_or(py: Python<'_>, a: Obj<'_, '_>, b: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    logical(py, "`or`", BinaryOp::Or, a, b)
}

/// `not x` on a traced value.
#[pyfunction]
pub fn logical_not(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "`not`", |t| {
        let x = t.operand(x, "`not`")?;
        let v = t.ir(py, |bld| bld.logical_not(x))?;
        t.wrap_any(py, v)
    })
}

/// A compile-time string argument.
fn static_text(t: &Trace, py: Python<'_>, obj: Obj<'_, '_>, what: &str) -> PyResult<String> {
    obj.extract::<String>().map_err(|_| {
        t.error(
            py,
            &format!(
                "{what} must be a str known when the kernel is compiled, got {}",
                describe_object(obj)
            ),
        )
    })
}

/// `device_print(prefix, *values, hex=False)`: prints every element of the
/// values (tiles of one shape, or scalars) when the kernel runs.
#[pyfunction]
#[pyo3(signature = (prefix, *values, hex=false))]
pub fn device_print(
    py: Python<'_>,
    prefix: Obj<'_, '_>,
    values: &Bound<'_, PyTuple>,
    hex: bool,
) -> PyResult<()> {
    with_trace(py, "metile.device_print()", |t| {
        let prefix = static_text(t, py, prefix, "device_print's prefix")?;
        let mut operands = Vec::with_capacity(values.len());
        for (i, v) in values.iter().enumerate() {
            operands.push(t.operand(&v, &format!("device_print's value {}", i + 1))?);
        }
        t.ir(py, |bld| bld.device_print(&prefix, &operands, hex))
    })
}

/// `device_assert(cond, msg="")`: the launch fails with an AssertionError
/// naming this line where `cond` is false.
#[pyfunction]
#[pyo3(signature = (cond, msg=None))]
pub fn device_assert(py: Python<'_>, cond: Obj<'_, '_>, msg: Option<Obj<'_, '_>>) -> PyResult<()> {
    with_trace(py, "metile.device_assert()", |t| {
        let message = match msg.filter(|m| !m.is_none()) {
            Some(m) => static_text(t, py, m, "device_assert's message")?,
            None => String::new(),
        };
        let c = t.operand(cond, "device_assert's condition")?;
        t.ir(py, |bld| bld.device_assert(c, &message))
    })
}

/// `assume(cond)`: the kernel promises that the bool scalar `cond` holds
/// (Triton's `tl.assume`); see `OpKind::AssumeTrue`. A Python bool is known
/// while tracing: `True` promises nothing, `False` is a broken promise.
#[pyfunction]
pub fn assume(py: Python<'_>, cond: Obj<'_, '_>) -> PyResult<()> {
    with_trace(py, "metile.assume()", |t| {
        if cond.cast::<Tile>().is_err() {
            return match cond.extract::<bool>() {
                Ok(true) if cond.is_instance_of::<PyBool>() => Ok(()),
                Ok(false) if cond.is_instance_of::<PyBool>() => {
                    Err(t.error(py, "metile.assume's condition is False"))
                }
                _ => Err(t.error(
                    py,
                    &format!(
                        "metile.assume needs a bool condition (a comparison of the kernel's values, or \
                         True/False), got {}",
                        describe_object(cond)
                    ),
                )),
            };
        }
        let c = t.operand(cond, "metile.assume's condition")?;
        t.ir(py, |bld| bld.assume_true(c))
    })
}

/// `static_assert(cond, msg="")`: a CompilationError at this line unless the
/// compile-time `cond` holds.
#[pyfunction]
#[pyo3(signature = (cond, msg=None))]
pub fn static_assert(py: Python<'_>, cond: Obj<'_, '_>, msg: Option<Obj<'_, '_>>) -> PyResult<()> {
    with_trace(py, "metile.static_assert()", |t| {
        if cond.cast::<Tile>().is_ok() {
            return Err(t.error(
                py,
                "static_assert needs a condition known when the kernel is compiled (constexprs and Python \
                 values), but this one is computed at run time; use metile.device_assert",
            ));
        }
        if cond.is_truthy()? {
            return Ok(());
        }
        let message = match msg.filter(|m| !m.is_none()) {
            Some(m) => format!(": {}", m.str()?),
            None => String::new(),
        };
        Err(t.error(py, &format!("static_assert failed{message}")))
    })
}

/// A `metile.CompilationError` at the kernel line being traced, for the ops the
/// Python side of the frontend desugars (block pointers, tensor descriptors):
/// they raise it so their errors name the user's line, as the native ops' do.
#[pyfunction]
pub fn kernel_error(py: Python<'_>, message: &str) -> PyResult<Py<PyAny>> {
    with_trace(py, "a kernel op", |t| {
        Ok(t.error(py, message).into_value(py).into_any())
    })
}

/// `static_range(end)`, `static_range(start, end[, step])`: a loop unrolled
/// while tracing; the bounds must be compile-time ints.
#[pyfunction]
#[pyo3(signature = (start, end=None, step=None))]
pub fn static_range<'py>(
    py: Python<'py>,
    start: Obj<'_, 'py>,
    end: Option<Obj<'_, 'py>>,
    step: Option<Obj<'_, 'py>>,
) -> PyResult<Bound<'py, PyRange>> {
    with_trace(py, "metile.static_range()", |t| {
        let first = t.static_int(start, "static_range's bound")?;
        let (start, end) = match end.filter(|e| !e.is_none()) {
            Some(e) => (first, t.static_int(e, "static_range's end")?),
            None => (0, first),
        };
        let step = match step.filter(|s| !s.is_none()) {
            Some(s) => t.static_int(s, "static_range's step")?,
            None => 1,
        };
        if step == 0 {
            return Err(t.error(py, "static_range's step must not be zero"));
        }
        PyRange::new_with_step(py, start as isize, end as isize, step as isize)
    })
}

/// The per-axis values of a hint: an int, or one int per axis of which the
/// last (the axis the analysis follows) is used.
fn hint_value(t: &Trace, py: Python<'_>, values: Obj<'_, '_>, what: &str) -> PyResult<i64> {
    let items: Option<Vec<Bound<'_, PyAny>>> = values
        .cast::<PyTuple>()
        .map(|v| v.iter().collect())
        .ok()
        .or_else(|| values.cast::<PyList>().map(|v| v.iter().collect()).ok());
    match items {
        Some(items) => match items.last() {
            Some(last) => t.static_int(last, what),
            None => Err(t.error(py, &format!("{what}: an empty list of values"))),
        },
        None => t.static_int(values, what),
    }
}

fn hint(
    py: Python<'_>,
    what: &'static str,
    fact: AssumeFact,
    x: Obj<'_, '_>,
    values: Obj<'_, '_>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let n = hint_value(t, py, values, what)?;
        let x = match t.operand(x, what)? {
            // A Python number is known exactly: the hint has nothing to add.
            Operand::Value(v) => Operand::Value(v),
            _ => return Ok(x.clone().unbind()),
        };
        let v = t.ir(py, |bld| bld.assume(x, fact, n, what))?;
        t.wrap_any(py, v)
    })
}

/// `multiple_of(x, values)`: promises that `x` (integers or pointers) is a
/// multiple of the value along its last axis (see `OpKind::Assume`).
#[pyfunction]
pub fn multiple_of(py: Python<'_>, x: Obj<'_, '_>, values: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    hint(py, "multiple_of", AssumeFact::MultipleOf, x, values)
}

/// `max_contiguous(x, values)`: promises runs of consecutive integers.
#[pyfunction]
pub fn max_contiguous(py: Python<'_>, x: Obj<'_, '_>, values: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    hint(py, "max_contiguous", AssumeFact::Contiguous, x, values)
}

/// `max_constancy(x, values)`: promises runs of one value.
#[pyfunction]
pub fn max_constancy(py: Python<'_>, x: Obj<'_, '_>, values: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    hint(py, "max_constancy", AssumeFact::Constant, x, values)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(logical_and, m)?)?;
    m.add_function(wrap_pyfunction!(logical_or, m)?)?;
    m.add_function(wrap_pyfunction!(logical_not, m)?)?;
    m.add_function(wrap_pyfunction!(device_print, m)?)?;
    m.add_function(wrap_pyfunction!(device_assert, m)?)?;
    m.add_function(wrap_pyfunction!(assume, m)?)?;
    m.add_function(wrap_pyfunction!(static_assert, m)?)?;
    m.add_function(wrap_pyfunction!(kernel_error, m)?)?;
    m.add_function(wrap_pyfunction!(static_range, m)?)?;
    m.add_function(wrap_pyfunction!(multiple_of, m)?)?;
    m.add_function(wrap_pyfunction!(max_contiguous, m)?)?;
    m.add_function(wrap_pyfunction!(max_constancy, m)?)?;
    Ok(())
}
