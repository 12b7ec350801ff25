//! `Tile`: the proxy a kernel computes with while it is traced. It names one
//! Tile IR value; Python operators on it append ops to the trace.

use metile_ir::{BinaryOp, CmpOp, Elem, Operand, UnaryOp, ValueId};
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyTuple};

use super::shape_ops;
use super::state::{describe_object, dtype_arg, with_trace, Trace};

#[pyclass(module = "metile._metile", name = "Tile", frozen)]
pub struct Tile {
    pub trace_id: u64,
    pub value: ValueId,
}

impl Tile {
    pub fn new(trace_id: u64, value: ValueId) -> Tile {
        Tile { trace_id, value }
    }
}

const ARITHMETIC: &str = "tile arithmetic";

fn binary(
    slf: &Bound<'_, Tile>,
    other: &Bound<'_, PyAny>,
    op: BinaryOp,
    reflected: bool,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    with_trace(py, ARITHMETIC, |t| {
        let me = Operand::Value(t.value_of(py, slf.get())?);
        let them = t.operand(other, "the other operand")?;
        let (a, b) = if reflected { (them, me) } else { (me, them) };
        let v = t.ir(py, |bld| bld.binary(op, a, b))?;
        t.wrap_any(py, v)
    })
}

fn unary(slf: &Bound<'_, Tile>, op: UnaryOp) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    with_trace(py, ARITHMETIC, |t| {
        let me = Operand::Value(t.value_of(py, slf.get())?);
        let v = t.ir(py, |bld| bld.unary(op, me))?;
        t.wrap_any(py, v)
    })
}

/// A `metile.CompilationError` at the caller's line, for Python protocols a
/// tile cannot support (`bool(tile)`, `int(tile)`, iteration...).
fn refuse(py: Python<'_>, message: &str) -> PyErr {
    match with_trace(py, "tile conversion", |t| Ok(t.error(py, message))) {
        Ok(e) | Err(e) => e,
    }
}

const NO_TRUTH_VALUE: &str = "a tile has no truth value while the kernel is traced (its value is only \
known when the kernel runs): a chained comparison (`a < x < b`), `bool(x)`, and Python that runs \
as is (comprehensions, library functions) cannot branch on it. Write `(a < x) & (x < b)`, select \
with `metile.where(c, x, y)`, or compare with a compile-time value (a metile.constexpr) to branch \
while tracing";

#[pymethods]
impl Tile {
    fn __add__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Add, false)
    }
    fn __radd__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Add, true)
    }
    fn __sub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Sub, false)
    }
    fn __rsub__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Sub, true)
    }
    fn __mul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Mul, false)
    }
    fn __rmul__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Mul, true)
    }
    fn __truediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Div, false)
    }
    fn __rtruediv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Div, true)
    }
    fn __floordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::FloorDiv, false)
    }
    fn __rfloordiv__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::FloorDiv, true)
    }
    fn __mod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Rem, false)
    }
    fn __rmod__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Rem, true)
    }
    fn __and__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::And, false)
    }
    fn __rand__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::And, true)
    }
    fn __or__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Or, false)
    }
    fn __ror__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Or, true)
    }
    fn __xor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Xor, false)
    }
    fn __rxor__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Xor, true)
    }
    fn __lshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Shl, false)
    }
    fn __rlshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Shl, true)
    }
    fn __rshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Shr, false)
    }
    fn __rrshift__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        binary(slf, other, BinaryOp::Shr, true)
    }

    /// `x ** n` for a small non-negative int `n`: repeated multiplication.
    fn __pow__(
        slf: &Bound<'_, Self>,
        exponent: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        with_trace(py, ARITHMETIC, |t| {
            const MAX_EXPONENT: i64 = 64;
            let exponent = match exponent.extract::<i64>() {
                Ok(n) if (0..=MAX_EXPONENT).contains(&n) && modulo.is_none_or(|m| m.is_none()) => n,
                _ => {
                    return Err(t.error(
                        py,
                        &format!(
                        "`**` on a tile needs a constant integer exponent from 0 to {MAX_EXPONENT}, got {}; \
                             use metile.exp(y * metile.log(x)) for a general power",
                        describe_object(exponent)
                    ),
                    ))
                }
            };
            let x = t.value_of(py, slf.get())?;
            let v = power(t, py, x, exponent)?;
            t.wrap_any(py, v)
        })
    }

    fn __rpow__(
        slf: &Bound<'_, Self>,
        _base: &Bound<'_, PyAny>,
        _modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        Err(refuse(
            slf.py(),
            "a number raised to a tile power (`c ** x`) is not supported; use metile.exp(x * math.log(c))",
        ))
    }

    fn __neg__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        unary(slf, UnaryOp::Neg)
    }
    fn __pos__(slf: &Bound<'_, Self>) -> Py<PyAny> {
        slf.clone().into_any().unbind()
    }
    fn __invert__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        unary(slf, UnaryOp::Not)
    }
    fn __abs__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        unary(slf, UnaryOp::Abs)
    }

    fn __richcmp__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let op = match op {
            CompareOp::Lt => CmpOp::Lt,
            CompareOp::Le => CmpOp::Le,
            CompareOp::Gt => CmpOp::Gt,
            CompareOp::Ge => CmpOp::Ge,
            CompareOp::Eq => CmpOp::Eq,
            CompareOp::Ne => CmpOp::Ne,
        };
        with_trace(py, "tile comparison", |t| {
            let me = Operand::Value(t.value_of(py, slf.get())?);
            let them = t.operand(other, "the other side of the comparison")?;
            let v = t.ir(py, |bld| bld.compare(op, me, them))?;
            t.wrap_any(py, v)
        })
    }

    /// `x[:, None]`, `x[None, :]`, `x[None]`: insert size-1 axes.
    fn __getitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        with_trace(py, "tile indexing", |t| {
            let items: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
                Ok(tuple) => tuple.iter().collect(),
                Err(_) => vec![key.clone()],
            };
            let mut v = t.value_of(py, slf.get())?;
            let rank = t.ty(v).shape.len();
            let mut axis = 0i64;
            let mut kept = 0usize;
            for item in &items {
                if item.is_none() {
                    v = t.ir(py, |bld| bld.expand_dims(v, axis))?;
                    axis += 1;
                } else if is_full_slice(item) {
                    kept += 1;
                    axis += 1;
                } else {
                    return Err(t.error(
                        py,
                        &format!(
                            "tiles can only be indexed with `:` and `None` to add an axis (x[:, None], \
                             x[None, :]); got {} in the index",
                            describe_object(item)
                        ),
                    ));
                }
            }
            if kept > rank {
                return Err(t.error(py, &format!("too many `:` in the index of a tile of rank {rank}")));
            }
            t.wrap_any(py, v)
        })
    }

    /// `x.T`: the transpose of a 2-D tile, `trans(x)`.
    #[getter(T)]
    fn transposed(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        shape_ops::trans_impl(py, slf.as_any(), &PyTuple::empty(py), "Tile.T")
    }

    /// `x.trans(*dims)`, as `metile.trans(x, *dims)`.
    #[pyo3(signature = (*dims))]
    fn trans(slf: &Bound<'_, Self>, dims: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        shape_ops::trans_impl(slf.py(), slf.as_any(), dims, "Tile.trans()")
    }

    /// `x.permute(*dims)`, as `metile.permute(x, *dims)`.
    #[pyo3(signature = (*dims))]
    fn permute(slf: &Bound<'_, Self>, dims: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        shape_ops::permute_impl(slf.py(), slf.as_any(), dims, "Tile.permute()")
    }

    /// `x.reshape(*shape, can_reorder=False)`, as `metile.reshape`.
    #[pyo3(signature = (*shape, can_reorder=None))]
    fn reshape(
        slf: &Bound<'_, Self>,
        shape: &Bound<'_, PyTuple>,
        can_reorder: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        shape_ops::reshape_impl(slf.py(), slf.as_any(), shape, can_reorder, "Tile.reshape()")
    }

    /// `x.view(*shape)`, Triton's deprecated spelling of `x.reshape`.
    #[pyo3(signature = (*shape))]
    fn view(slf: &Bound<'_, Self>, shape: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        shape_ops::view_impl(slf.py(), slf.as_any(), shape)
    }

    /// `x.expand_dims(axis)`, as `metile.expand_dims`.
    fn expand_dims(slf: &Bound<'_, Self>, axis: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        shape_ops::expand_dims_impl(slf.py(), slf.as_any(), axis, "Tile.expand_dims()")
    }

    /// `x.broadcast_to(*shape)`, as `metile.broadcast_to`.
    #[pyo3(signature = (*shape))]
    fn broadcast_to(slf: &Bound<'_, Self>, shape: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        shape_ops::broadcast_to_impl(slf.py(), slf.as_any(), shape, "Tile.broadcast_to()")
    }

    /// `x.sum(...)`: `metile.sum(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn sum(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "sum", args, kwargs)
    }

    /// `x.max(...)`: `metile.max(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn max(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "max", args, kwargs)
    }

    /// `x.min(...)`: `metile.min(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn min(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "min", args, kwargs)
    }

    /// `x.argmax(...)`: `metile.argmax(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn argmax(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "argmax", args, kwargs)
    }

    /// `x.argmin(...)`: `metile.argmin(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn argmin(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "argmin", args, kwargs)
    }

    /// `x.cumsum(...)`: `metile.cumsum(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn cumsum(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "cumsum", args, kwargs)
    }

    /// `x.cumprod(...)`: `metile.cumprod(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn cumprod(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "cumprod", args, kwargs)
    }

    /// `x.xor_sum(...)`: `metile.xor_sum(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn xor_sum(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "xor_sum", args, kwargs)
    }

    /// `x.sort(...)`: `metile.sort(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn sort(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "sort", args, kwargs)
    }

    /// `x.softmax(...)`: `metile.softmax(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn softmax(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "softmax", args, kwargs)
    }

    /// `x.sigmoid(...)`: `metile.sigmoid(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn sigmoid(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "sigmoid", args, kwargs)
    }

    /// `x.exp(...)`: `metile.exp(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn exp(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "exp", args, kwargs)
    }

    /// `x.exp2(...)`: `metile.exp2(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn exp2(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "exp2", args, kwargs)
    }

    /// `x.log(...)`: `metile.log(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn log(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "log", args, kwargs)
    }

    /// `x.log2(...)`: `metile.log2(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn log2(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "log2", args, kwargs)
    }

    /// `x.sqrt(...)`: `metile.sqrt(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn sqrt(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "sqrt", args, kwargs)
    }

    /// `x.rsqrt(...)`: `metile.rsqrt(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn rsqrt(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "rsqrt", args, kwargs)
    }

    /// `x.sin(...)`: `metile.sin(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn sin(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "sin", args, kwargs)
    }

    /// `x.cos(...)`: `metile.cos(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn cos(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "cos", args, kwargs)
    }

    /// `x.abs(...)`: `metile.abs(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn abs(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "abs", args, kwargs)
    }

    /// `x.floor(...)`: `metile.floor(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn floor(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "floor", args, kwargs)
    }

    /// `x.ceil(...)`: `metile.ceil(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn ceil(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "ceil", args, kwargs)
    }

    /// `x.erf(...)`: `metile.erf(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn erf(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "erf", args, kwargs)
    }

    /// `x.fma(...)`: `metile.fma(x, ...)`, as Triton's tensor method.
    #[pyo3(signature = (*args, **kwargs))]
    fn fma(
        slf: &Bound<'_, Self>,
        args: &Bound<'_, PyTuple>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        language_function(slf, "fma", args, kwargs)
    }

    /// `x.split()`, as `metile.split(x)`.
    fn split<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        shape_ops::split_impl(slf.py(), slf.as_any(), "Tile.split()")
    }

    /// The tile's shape as a tuple of ints (`()` for a scalar).
    #[getter]
    fn shape<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let shape = with_trace(py, "Tile.shape", |t| {
            Ok(t.ty(t.value_of(py, slf.get())?).shape.clone())
        })?;
        PyTuple::new(py, shape)
    }

    /// The element type's name: "f32", "i32", ...; "ptr<f32>" for pointers.
    #[getter]
    fn dtype(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        with_trace(py, "Tile.dtype", |t| {
            Ok(t.ty(t.value_of(py, slf.get())?).elem.to_string())
        })
    }

    /// Converts to another dtype, like `metile.cast(x, dtype)`; Triton's
    /// `x.to(dtype, fp_downcast_rounding=None, bitcast=False)`.
    #[pyo3(signature = (dtype, fp_downcast_rounding=None, bitcast=false))]
    fn to(
        slf: &Bound<'_, Self>,
        dtype: &Bound<'_, PyAny>,
        fp_downcast_rounding: Option<&Bound<'_, PyAny>>,
        bitcast: bool,
    ) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        with_trace(py, "Tile.to()", |t| {
            conversion_options(t, py, fp_downcast_rounding, bitcast)?;
            let v = t.value_of(py, slf.get())?;
            cast_value(t, py, v, dtype)
        })
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let py = slf.py();
        let ty = with_trace(py, "Tile", |t| Ok(t.ty(t.value_of(py, slf.get())?).to_string()));
        match ty {
            Ok(ty) => format!("<metile tile {} : {ty}>", slf.get().value),
            Err(_) => "<metile tile from a finished trace>".to_string(),
        }
    }

    fn __bool__(slf: &Bound<'_, Self>) -> PyResult<bool> {
        Err(refuse(slf.py(), NO_TRUTH_VALUE))
    }

    fn __index__(slf: &Bound<'_, Self>) -> PyResult<i64> {
        Err(refuse(
            slf.py(),
            "a tile cannot be used as a Python int (in range(), as a list index or a shape) because \
             its value is only known when the kernel runs; loop with metile.tile_range(...) and pass \
             sizes as metile.constexpr parameters",
        ))
    }

    fn __int__(slf: &Bound<'_, Self>) -> PyResult<i64> {
        Err(refuse(
            slf.py(),
            "int() of a tile is not available while tracing (its value is only known when the kernel \
             runs); use x.to(\"i32\") to convert its dtype",
        ))
    }

    fn __float__(slf: &Bound<'_, Self>) -> PyResult<f64> {
        Err(refuse(
            slf.py(),
            "float() of a tile is not available while tracing (its value is only known when the kernel \
             runs); use x.to(\"f32\") to convert its dtype",
        ))
    }

    fn __iter__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        Err(refuse(
            slf.py(),
            "a tile cannot be iterated or unpacked in Python; operate on the whole tile, or reduce it \
             with metile.sum/max/min",
        ))
    }

    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        Err(refuse(
            slf.py(),
            "len() of a tile is not available; use x.shape[0]",
        ))
    }
}

fn is_full_slice(item: &Bound<'_, PyAny>) -> bool {
    item.cast::<PySlice>().is_ok_and(|s| {
        ["start", "stop", "step"]
            .iter()
            .all(|a| s.getattr(*a).is_ok_and(|v| v.is_none()))
    })
}

/// `x ** n` by binary exponentiation; `x ** 0` is ones of `x`'s type.
fn power(t: &mut Trace, py: Python<'_>, x: ValueId, mut n: i64) -> PyResult<ValueId> {
    let ty = t.ty(x).clone();
    if n == 0 {
        let dtype = match ty.elem {
            Elem::Scalar(d) => d,
            Elem::Ptr(..) => return Err(t.error(py, "`**` is not defined on pointers")),
        };
        return t.ir(py, |bld| bld.full(&ty.shape, Operand::Int(1), dtype));
    }
    let mut base = x;
    let mut acc: Option<ValueId> = None;
    loop {
        if n & 1 == 1 {
            acc = Some(match acc {
                None => base,
                Some(a) => t.ir(py, |bld| bld.binary(BinaryOp::Mul, a.into(), base.into()))?,
            });
        }
        n >>= 1;
        if n == 0 {
            break;
        }
        base = t.ir(py, |bld| bld.binary(BinaryOp::Mul, base.into(), base.into()))?;
    }
    Ok(acc.unwrap_or(x))
}

/// The shared body of `metile.cast(x, dtype)` and `x.to(dtype)`.
/// Checks `.to()`'s options: conversions round to nearest even (`"rtne"`, the
/// default); other roundings and bit casts are refused.
pub fn conversion_options(
    t: &mut Trace,
    py: Python<'_>,
    rounding: Option<&Bound<'_, PyAny>>,
    bitcast: bool,
) -> PyResult<()> {
    if bitcast {
        return Err(t.error(
            py,
            "to(..., bitcast=True) is not supported; a parameter annotated with its dtype \
             (X: metile.float8e4nv) reads uint8 memory as fp8 without a bit cast",
        ));
    }
    match rounding.filter(|r| !r.is_none()).map(|r| r.extract::<String>()) {
        None => Ok(()),
        Some(Ok(r)) if r == "rtne" => Ok(()),
        Some(_) => Err(t.error(
            py,
            &format!(
                "fp_downcast_rounding={} is not supported; conversions round to nearest even (\"rtne\")",
                rounding.map_or_else(String::new, |r| r
                    .repr()
                    .map(|s| s.to_string())
                    .unwrap_or_default())
            ),
        )),
    }
}

pub fn cast_value(
    t: &mut Trace,
    py: Python<'_>,
    v: ValueId,
    dtype: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    // `metile.pointer_type(d)` names a pointer type: "ptr<d>".
    let pointee = dtype
        .extract::<String>()
        .ok()
        .and_then(|s| Some(s.strip_prefix("ptr<")?.strip_suffix('>')?.to_string()));
    if let Some(pointee) = pointee {
        let pointee = metile_ir::DType::parse(&pointee).ok_or_else(|| {
            t.error(
                py,
                &format!("unknown pointee dtype in pointer type ptr<{pointee}>"),
            )
        })?;
        let r = t.ir(py, |bld| bld.int_to_ptr(v, pointee))?;
        return t.wrap_any(py, r);
    }
    let dtype = dtype_arg(dtype).map_err(|m| t.error(py, &m))?;
    let r = t.ir(py, |bld| bld.cast(v, dtype))?;
    t.wrap_any(py, r)
}

/// Calls `metile.<name>(slf, *args, **kwargs)`: the tensor methods Triton
/// defines as its module functions with the tile first.
fn language_function(
    slf: &Bound<'_, Tile>,
    name: &str,
    args: &Bound<'_, PyTuple>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let mut all = vec![slf.clone().into_any()];
    all.extend(args.iter());
    let function = py.import("metile")?.getattr(name)?;
    Ok(function.call(PyTuple::new(py, all)?, kwargs)?.unbind())
}
