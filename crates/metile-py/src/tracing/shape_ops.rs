//! The shape functions at Triton's breadth (`metile.trans`, `metile.permute`,
//! `metile.reshape`, `metile.expand_dims`, `metile.broadcast_to`,
//! `metile.join`, `metile.split`, `metile.cat`, ...) and the `Tile` methods
//! that forward to them (`x.T`, `x.reshape(...)`, ...). Sizes and axes are
//! compile-time ints, given as separate arguments or as one tuple, as Triton
//! takes them.

use metile_ir::Operand;
use pyo3::exceptions::PyDeprecationWarning;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::state::{describe_object, python_number, with_trace, Trace};
use super::tile::Tile;

type Obj<'a, 'py> = &'a Bound<'py, PyAny>;

/// Compile-time ints passed as `f(x, 1, 0)` or `f(x, (1, 0))`.
fn static_ints(t: &Trace, args: &Bound<'_, PyTuple>, what: &str) -> PyResult<Vec<i64>> {
    let py = args.py();
    let items: Vec<Bound<'_, PyAny>> = match args.len() {
        1 => {
            let only = args.get_item(0)?;
            if python_number(&only).is_some() || only.cast::<Tile>().is_ok() {
                vec![only]
            } else if let Ok(seq) = only.try_iter() {
                seq.collect::<PyResult<_>>()?
            } else {
                return Err(t.error(
                    py,
                    &format!(
                        "{what} must be ints or a tuple of ints, got {}",
                        describe_object(&only)
                    ),
                ));
            }
        }
        _ => args.iter().collect(),
    };
    items.iter().map(|d| t.static_int(d, what)).collect()
}

/// A compile-time flag that changes nothing here (`can_reorder`): checked to be a bool.
fn accepted_flag(t: &Trace, py: Python<'_>, obj: Option<Obj<'_, '_>>, what: &str) -> PyResult<()> {
    match obj.filter(|o| !o.is_none()) {
        None => Ok(()),
        Some(o) => match python_number(o) {
            Some(Ok(Operand::Bool(_) | Operand::Int(_))) => Ok(()),
            _ => Err(t.error(py, &format!("{what} must be a bool, got {}", describe_object(o)))),
        },
    }
}

pub(super) fn permute_impl(
    py: Python<'_>,
    x: Obj<'_, '_>,
    dims: &Bound<'_, PyTuple>,
    what: &str,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let dims = static_ints(t, dims, "permute's dims")?;
        let v = t.ir(py, |bld| bld.permute(x, &dims))?;
        t.wrap_any(py, v)
    })
}

/// `trans(x)` swaps the two axes of a 2-D tile; `trans(x, *dims)` is `permute`.
pub(super) fn trans_impl(
    py: Python<'_>,
    x: Obj<'_, '_>,
    dims: &Bound<'_, PyTuple>,
    what: &str,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let mut dims = static_ints(t, dims, "trans's dims")?;
        if dims.is_empty() {
            let shape = match x {
                Operand::Value(v) => t.ty(v).shape.clone(),
                _ => vec![],
            };
            if shape.len() != 2 {
                return Err(t.error(
                    py,
                    &format!(
                        "{what} without dims transposes a 2-D tile, but this one has shape {shape:?}; \
                         pass the order of its axes (trans(x, 2, 1, 0), permute(x, ...))"
                    ),
                ));
            }
            dims = vec![1, 0];
        }
        let v = t.ir(py, |bld| bld.permute(x, &dims))?;
        t.wrap_any(py, v)
    })
}

pub(super) fn reshape_impl(
    py: Python<'_>,
    x: Obj<'_, '_>,
    shape: &Bound<'_, PyTuple>,
    can_reorder: Option<Obj<'_, '_>>,
    what: &str,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        accepted_flag(t, py, can_reorder, "reshape's can_reorder")?;
        let x = t.operand(x, what)?;
        let shape = static_ints(t, shape, "reshape's shape")?;
        let v = t.ir(py, |bld| bld.reshape(x, &shape))?;
        t.wrap_any(py, v)
    })
}

pub(super) fn view_impl(py: Python<'_>, x: Obj<'_, '_>, shape: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    let warning = py.get_type::<PyDeprecationWarning>();
    PyErr::warn(
        py,
        &warning,
        c"metile.view is deprecated (as Triton's tl.view); use reshape",
        1,
    )?;
    reshape_impl(py, x, shape, None, "metile.view()")
}

pub(super) fn expand_dims_impl(
    py: Python<'_>,
    x: Obj<'_, '_>,
    axis: Obj<'_, '_>,
    what: &str,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let axes = static_ints(t, &PyTuple::new(py, [axis])?, "expand_dims's axis")?;
        let v = t.ir(py, |bld| bld.expand_dims_at(x, &axes))?;
        t.wrap_any(py, v)
    })
}

pub(super) fn broadcast_to_impl(
    py: Python<'_>,
    x: Obj<'_, '_>,
    shape: &Bound<'_, PyTuple>,
    what: &str,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let shape = static_ints(t, shape, "broadcast_to's shape")?;
        let v = t.ir(py, |bld| bld.broadcast_to_shape(x, &shape))?;
        t.wrap_any(py, v)
    })
}

pub(super) fn split_impl<'py>(py: Python<'py>, x: Obj<'_, 'py>, what: &str) -> PyResult<Bound<'py, PyTuple>> {
    let (a, b) = with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let (a, b) = t.ir(py, |bld| bld.split(x))?;
        Ok((t.wrap_any(py, a)?, t.wrap_any(py, b)?))
    })?;
    PyTuple::new(py, [a, b])
}

/// `permute(input, *dims)`: axis `i` of the result is axis `dims[i]` of `input`.
#[pyfunction]
#[pyo3(signature = (input, *dims))]
pub fn permute(py: Python<'_>, input: Obj<'_, '_>, dims: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    permute_impl(py, input, dims, "metile.permute()")
}

/// `trans(input, *dims)`: `permute`, or without dims the transpose of a 2-D tile.
#[pyfunction]
#[pyo3(signature = (input, *dims))]
pub fn trans(py: Python<'_>, input: Obj<'_, '_>, dims: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    trans_impl(py, input, dims, "metile.trans()")
}

/// `reshape(input, *shape, can_reorder=False)`: the elements in row-major
/// order, in a shape of the same size (`can_reorder` only allows what this
/// already does).
#[pyfunction]
#[pyo3(signature = (input, *shape, can_reorder=None))]
pub fn reshape(
    py: Python<'_>,
    input: Obj<'_, '_>,
    shape: &Bound<'_, PyTuple>,
    can_reorder: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    reshape_impl(py, input, shape, can_reorder, "metile.reshape()")
}

/// `view(input, *shape)`: Triton's deprecated spelling of `reshape`.
#[pyfunction]
#[pyo3(signature = (input, *shape))]
pub fn view(py: Python<'_>, input: Obj<'_, '_>, shape: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    view_impl(py, input, shape)
}

/// `expand_dims(input, axis)`: size-1 axes at `axis` (an int or a tuple) of the result.
#[pyfunction]
pub fn expand_dims(py: Python<'_>, input: Obj<'_, '_>, axis: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    expand_dims_impl(py, input, axis, "metile.expand_dims()")
}

/// `broadcast_to(input, *shape)`.
#[pyfunction]
#[pyo3(signature = (input, *shape))]
pub fn broadcast_to(py: Python<'_>, input: Obj<'_, '_>, shape: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
    broadcast_to_impl(py, input, shape, "metile.broadcast_to()")
}

/// `broadcast(input, other)`: both broadcast to their common shape.
#[pyfunction]
pub fn broadcast<'py>(
    py: Python<'py>,
    input: Obj<'_, 'py>,
    other: Obj<'_, 'py>,
) -> PyResult<Bound<'py, PyTuple>> {
    let what = "metile.broadcast()";
    let (a, b) = with_trace(py, what, |t| {
        let a = t.operand(input, what)?;
        let b = t.operand(other, what)?;
        let (a, b) = t.ir(py, |bld| bld.broadcast_pair(a, b))?;
        Ok((t.wrap_any(py, a)?, t.wrap_any(py, b)?))
    })?;
    PyTuple::new(py, [a, b])
}

/// `join(a, b)`: a new last axis of size 2 holding `a` then `b`.
#[pyfunction]
pub fn join(py: Python<'_>, a: Obj<'_, '_>, b: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    let what = "metile.join()";
    with_trace(py, what, |t| {
        let a = t.operand(a, what)?;
        let b = t.operand(b, what)?;
        let v = t.ir(py, |bld| bld.join(a, b))?;
        t.wrap_any(py, v)
    })
}

/// `split(a)`: the two halves of a last axis of size 2, as a tuple.
#[pyfunction]
pub fn split<'py>(py: Python<'py>, a: Obj<'_, 'py>) -> PyResult<Bound<'py, PyTuple>> {
    split_impl(py, a, "metile.split()")
}

/// `cat(input, other, can_reorder=False)`: `input` then `other` along axis 0.
#[pyfunction]
#[pyo3(signature = (input, other, can_reorder=None))]
pub fn cat(
    py: Python<'_>,
    input: Obj<'_, '_>,
    other: Obj<'_, '_>,
    can_reorder: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    let what = "metile.cat()";
    with_trace(py, what, |t| {
        accepted_flag(t, py, can_reorder, "cat's can_reorder")?;
        let a = t.operand(input, what)?;
        let b = t.operand(other, what)?;
        let v = t.ir(py, |bld| bld.cat(a, b))?;
        t.wrap_any(py, v)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(permute, m)?)?;
    m.add_function(wrap_pyfunction!(trans, m)?)?;
    m.add_function(wrap_pyfunction!(reshape, m)?)?;
    m.add_function(wrap_pyfunction!(view, m)?)?;
    m.add_function(wrap_pyfunction!(expand_dims, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast_to, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast, m)?)?;
    m.add_function(wrap_pyfunction!(join, m)?)?;
    m.add_function(wrap_pyfunction!(split, m)?)?;
    m.add_function(wrap_pyfunction!(cat, m)?)?;
    Ok(())
}
