//! The math, reduction, scan and sort functions of the language at Triton's
//! breadth (`metile.sin`, `metile.fma`, `metile.argmax`, `metile.cumsum`,
//! `metile.sort`, ...), with Triton's names and arguments. Each converts its
//! arguments and asks the builder, which owns the typing rules.

use metile_ir::{BinaryOp, Operand, ReduceOp, ScanOp, UnaryOp};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::ops::elementwise;
use super::state::{describe_object, dtype_arg, python_number, with_trace, Trace};
use super::tile::Tile;

type Obj<'a, 'py> = &'a Bound<'py, PyAny>;

/// A compile-time flag (`keep_dims`, `reverse`, `descending`): a Python bool
/// or int, or a constexpr holding one.
fn static_flag(t: &Trace, py: Python<'_>, obj: Option<Obj<'_, '_>>, what: &str) -> PyResult<bool> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(false);
    };
    if obj.cast::<Tile>().is_ok() {
        return Err(t.error(
            py,
            &format!(
                "{what} must be known when the kernel is compiled (a bool or a metile.constexpr), not a tile"
            ),
        ));
    }
    match python_number(obj) {
        Some(Ok(Operand::Bool(b))) => Ok(b),
        Some(Ok(Operand::Int(i))) => Ok(i != 0),
        _ => Err(t.error(
            py,
            &format!("{what} must be a bool, got {}", describe_object(obj)),
        )),
    }
}

fn static_axis(t: &Trace, obj: Option<Obj<'_, '_>>, what: &str) -> PyResult<Option<i64>> {
    match obj {
        Some(a) if !a.is_none() => Ok(Some(t.static_int(a, what)?)),
        _ => Ok(None),
    }
}

/// `x` converted to `dtype` first, when one is given (Triton's `dtype=`);
/// without one, a sum or max/min widens narrow integers (`Builder::reduction_input`).
fn with_dtype(
    t: &mut Trace,
    py: Python<'_>,
    x: Operand,
    dtype: Option<Obj<'_, '_>>,
    widen: Option<bool>,
) -> PyResult<Operand> {
    match dtype.filter(|d| !d.is_none()) {
        None => match widen {
            Some(sums) => t.ir(py, |bld| bld.reduction_input(x, sums)),
            None => Ok(x),
        },
        Some(d) => {
            let d = dtype_arg(d).map_err(|m| t.error(py, &m))?;
            let v = t.builder.materialize(x, None);
            Ok(Operand::Value(t.ir(py, |bld| bld.cast(v, d))?))
        }
    }
}

fn unary(py: Python<'_>, what: &'static str, op: UnaryOp, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let v = t.ir(py, |bld| bld.unary(op, x))?;
        t.wrap_any(py, v)
    })
}

macro_rules! unary_functions {
    ($($name:ident => $op:ident),* $(,)?) => {
        $(
            #[pyfunction]
            pub fn $name(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
                unary(py, concat!("metile.", stringify!($name), "()"), UnaryOp::$op, x)
            }
        )*
    };
}

unary_functions!(
    exp2 => Exp2,
    log2 => Log2,
    log1p => Log1p,
    expm1 => Expm1,
    sin => Sin,
    cos => Cos,
    tan => Tan,
    asin => Asin,
    acos => Acos,
    atan => Atan,
    sinh => Sinh,
    cosh => Cosh,
    erf => Erf,
    rsqrt => Rsqrt,
    floor => Floor,
    ceil => Ceil,
    round => Round,
    rint => Rint,
    sqrt_rn => Sqrt,
    fast_expf => FastExp,
);

/// `pow(x, y)`: `x ** y` on floats (integers compute in f32).
#[pyfunction]
pub fn pow(py: Python<'_>, x: Obj<'_, '_>, y: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    elementwise(py, "metile.pow()", BinaryOp::Pow, x, y)
}

/// `atan2(y, x)`, as C's.
#[pyfunction]
pub fn atan2(py: Python<'_>, y: Obj<'_, '_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    elementwise(py, "metile.atan2()", BinaryOp::Atan2, y, x)
}

/// `fast_dividef(x, y)`: `x / y` within 2 ulp (the GPU's approximation on
/// NVIDIA GPUs, the exact quotient elsewhere).
#[pyfunction]
pub fn fast_dividef(py: Python<'_>, x: Obj<'_, '_>, y: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    elementwise(py, "metile.fast_dividef()", BinaryOp::FastDiv, x, y)
}

/// `umulhi(x, y)`: the high half of the unsigned double-width product.
#[pyfunction]
pub fn umulhi(py: Python<'_>, x: Obj<'_, '_>, y: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    elementwise(py, "metile.umulhi()", BinaryOp::MulHi, x, y)
}

/// `fdiv(x, y, ieee_rounding=False)`: `x / y`, correctly rounded on every
/// backend whatever `ieee_rounding` says.
#[pyfunction]
#[pyo3(signature = (x, y, ieee_rounding=None))]
pub fn fdiv(
    py: Python<'_>,
    x: Obj<'_, '_>,
    y: Obj<'_, '_>,
    ieee_rounding: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.fdiv()", |t| {
        static_flag(t, py, ieee_rounding, "fdiv's ieee_rounding")?;
        Ok(())
    })?;
    elementwise(py, "metile.fdiv()", BinaryOp::Div, x, y)
}

/// `div_rn(x, y)`: `x / y` rounded to nearest (every backend's `/`).
#[pyfunction]
pub fn div_rn(py: Python<'_>, x: Obj<'_, '_>, y: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    elementwise(py, "metile.div_rn()", BinaryOp::Div, x, y)
}

#[pyfunction]
pub fn fma(py: Python<'_>, x: Obj<'_, '_>, y: Obj<'_, '_>, z: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.fma()", |t| {
        let (a, b, c) = (
            t.operand(x, "fma's x")?,
            t.operand(y, "fma's y")?,
            t.operand(z, "fma's z")?,
        );
        let v = t.ir(py, |bld| bld.fma(a, b, c))?;
        t.wrap_any(py, v)
    })
}

/// `clamp(x, min, max)`: `minimum(maximum(x, min), max)`.
#[pyfunction]
#[pyo3(signature = (x, min, max))]
pub fn clamp(py: Python<'_>, x: Obj<'_, '_>, min: Obj<'_, '_>, max: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.clamp()", |t| {
        let x = t.operand(x, "clamp's x")?;
        let lo = t.operand(min, "clamp's min")?;
        let hi = t.operand(max, "clamp's max")?;
        let v = t.ir(py, |bld| bld.clamp(x, lo, hi))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn sigmoid(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.sigmoid()", |t| {
        let x = t.operand(x, "sigmoid's x")?;
        let v = t.ir(py, |bld| bld.sigmoid(x))?;
        t.wrap_any(py, v)
    })
}

/// `softmax(x, dim=None, keep_dims=False, ieee_rounding=False)` along `dim`
/// (0 when `None`, as in Triton); the result has `x`'s shape.
#[pyfunction]
#[pyo3(signature = (x, dim=None, keep_dims=None, ieee_rounding=None))]
pub fn softmax(
    py: Python<'_>,
    x: Obj<'_, '_>,
    dim: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
    ieee_rounding: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.softmax()", |t| {
        static_flag(t, py, keep_dims, "softmax's keep_dims")?;
        static_flag(t, py, ieee_rounding, "softmax's ieee_rounding")?;
        let axis = static_axis(t, dim, "softmax's dim")?.unwrap_or(0);
        let x = t.operand(x, "softmax's x")?;
        let v = t.ir(py, |bld| bld.softmax(x, axis))?;
        t.wrap_any(py, v)
    })
}

// ------------------------------------------------------------ reductions

fn reduce(
    py: Python<'_>,
    what: &'static str,
    op: ReduceOp,
    x: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
    dtype: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let axis = static_axis(t, axis, "the reduction axis")?;
        let keep = static_flag(t, py, keep_dims, "keep_dims")?;
        let widen = match op {
            ReduceOp::Sum => Some(true),
            ReduceOp::Max | ReduceOp::Min => Some(false),
            ReduceOp::Xor => None,
        };
        let x = with_dtype(t, py, x, dtype, widen)?;
        let v = t.ir(py, |bld| bld.reduce_keep_dims(op, x, axis, keep))?;
        t.wrap_any(py, v)
    })
}

/// `max`/`min` with `return_indices=True`: the extreme and its first index.
fn reduce_with_index(
    py: Python<'_>,
    what: &'static str,
    op: ReduceOp,
    x: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    let (value, index) = with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let axis = static_axis(t, axis, "the reduction axis")?;
        let keep = static_flag(t, py, keep_dims, "keep_dims")?;
        let v = t.ir(py, |bld| bld.reduce_keep_dims(op, x, axis, keep))?;
        let i = t.ir(py, |bld| bld.arg_reduce(op, x, axis, keep))?;
        Ok((t.wrap_any(py, v)?, t.wrap_any(py, i)?))
    })?;
    Ok(PyTuple::new(py, [value, index])?.into_any().unbind())
}

/// `sum(input, axis=None, keep_dims=False, dtype=None)`; `dtype` converts
/// the input first.
#[pyfunction]
#[pyo3(signature = (input, axis=None, keep_dims=None, dtype=None))]
pub fn sum(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
    dtype: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    reduce(py, "metile.sum()", ReduceOp::Sum, input, axis, keep_dims, dtype)
}

/// `max(input, axis=None, return_indices=False,
/// return_indices_tie_break_left=True, keep_dims=False)`.
#[pyfunction]
#[pyo3(signature = (input, axis=None, return_indices=None, return_indices_tie_break_left=None, keep_dims=None))]
pub fn max(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    return_indices: Option<Obj<'_, '_>>,
    return_indices_tie_break_left: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    extreme(
        py,
        ("metile.max()", ReduceOp::Max),
        input,
        axis,
        (return_indices, return_indices_tie_break_left),
        keep_dims,
    )
}

/// `min(input, axis=None, return_indices=False,
/// return_indices_tie_break_left=True, keep_dims=False)`.
#[pyfunction]
#[pyo3(signature = (input, axis=None, return_indices=None, return_indices_tie_break_left=None, keep_dims=None))]
pub fn min(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    return_indices: Option<Obj<'_, '_>>,
    return_indices_tie_break_left: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    extreme(
        py,
        ("metile.min()", ReduceOp::Min),
        input,
        axis,
        (return_indices, return_indices_tie_break_left),
        keep_dims,
    )
}

fn extreme(
    py: Python<'_>,
    (what, op): (&'static str, ReduceOp),
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    (return_indices, tie_break_left): (Option<Obj<'_, '_>>, Option<Obj<'_, '_>>),
    keep_dims: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    let indices = with_trace(py, what, |t| {
        // Every backend returns the first index of a tie, whatever this says.
        static_flag(t, py, tie_break_left, "return_indices_tie_break_left")?;
        static_flag(t, py, return_indices, "return_indices")
    })?;
    if indices {
        reduce_with_index(py, what, op, input, axis, keep_dims)
    } else {
        reduce(py, what, op, input, axis, keep_dims, None)
    }
}

fn arg_reduce(
    py: Python<'_>,
    what: &'static str,
    op: ReduceOp,
    x: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    (tie_break_left, keep_dims): (Option<Obj<'_, '_>>, Option<Obj<'_, '_>>),
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let axis = static_axis(t, axis, "the reduction axis")?;
        static_flag(t, py, tie_break_left, "tie_break_left")?;
        let keep = static_flag(t, py, keep_dims, "keep_dims")?;
        let v = t.ir(py, |bld| bld.arg_reduce(op, x, axis, keep))?;
        t.wrap_any(py, v)
    })
}

/// `argmax(input, axis=None, tie_break_left=True, keep_dims=False)`: the
/// first index of the maximum (an i32), NaNs skipped as `max` skips them.
#[pyfunction]
#[pyo3(signature = (input, axis=None, tie_break_left=None, keep_dims=None))]
pub fn argmax(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    tie_break_left: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    arg_reduce(
        py,
        "metile.argmax()",
        ReduceOp::Max,
        input,
        axis,
        (tie_break_left, keep_dims),
    )
}

#[pyfunction]
#[pyo3(signature = (input, axis=None, tie_break_left=None, keep_dims=None))]
pub fn argmin(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    tie_break_left: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    arg_reduce(
        py,
        "metile.argmin()",
        ReduceOp::Min,
        input,
        axis,
        (tie_break_left, keep_dims),
    )
}

#[pyfunction]
#[pyo3(signature = (input, axis=None, keep_dims=None))]
pub fn xor_sum(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    keep_dims: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    reduce(
        py,
        "metile.xor_sum()",
        ReduceOp::Xor,
        input,
        axis,
        keep_dims,
        None,
    )
}

// ------------------------------------------------------------ scans and sort

fn scan(
    py: Python<'_>,
    what: &'static str,
    op: ScanOp,
    x: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    reverse: Option<Obj<'_, '_>>,
    dtype: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let axis = static_axis(t, axis, "the scan axis")?.unwrap_or(0);
        let reverse = static_flag(t, py, reverse, "reverse")?;
        let x = with_dtype(t, py, x, dtype, (op == ScanOp::Sum).then_some(true))?;
        let v = t.ir(py, |bld| bld.scan(op, x, axis, reverse))?;
        t.wrap_any(py, v)
    })
}

/// `cumsum(input, axis=0, reverse=False, dtype=None)`: inclusive prefix sums.
#[pyfunction]
#[pyo3(signature = (input, axis=None, reverse=None, dtype=None))]
pub fn cumsum(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    reverse: Option<Obj<'_, '_>>,
    dtype: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    scan(py, "metile.cumsum()", ScanOp::Sum, input, axis, reverse, dtype)
}

/// `cumprod(input, axis=0, reverse=False, dtype=None)`: inclusive prefix products.
#[pyfunction]
#[pyo3(signature = (input, axis=None, reverse=None, dtype=None))]
pub fn cumprod(
    py: Python<'_>,
    input: Obj<'_, '_>,
    axis: Option<Obj<'_, '_>>,
    reverse: Option<Obj<'_, '_>>,
    dtype: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    scan(py, "metile.cumprod()", ScanOp::Prod, input, axis, reverse, dtype)
}

/// `sort(x, dim=None, descending=False)` along `dim` (the last axis when
/// `None`), whose length must be a power of two.
#[pyfunction]
#[pyo3(signature = (x, dim=None, descending=None))]
pub fn sort(
    py: Python<'_>,
    x: Obj<'_, '_>,
    dim: Option<Obj<'_, '_>>,
    descending: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.sort()", |t| {
        let x = t.operand(x, "sort's x")?;
        let axis = static_axis(t, dim, "sort's dim")?;
        let descending = static_flag(t, py, descending, "sort's descending")?;
        let v = t.ir(py, |bld| bld.sort(x, axis, descending))?;
        t.wrap_any(py, v)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => {
            $(m.add_function(wrap_pyfunction!($f, m)?)?;)*
        };
    }
    add!(
        exp2,
        log2,
        log1p,
        expm1,
        sin,
        cos,
        tan,
        asin,
        acos,
        atan,
        sinh,
        cosh,
        erf,
        rsqrt,
        floor,
        ceil,
        round,
        rint,
        sqrt_rn,
        fast_expf,
        pow,
        atan2,
        umulhi,
        fdiv,
        div_rn,
        fast_dividef,
        fma,
        clamp,
        sigmoid,
        softmax,
        sum,
        max,
        min,
        argmax,
        argmin,
        xor_sum,
        cumsum,
        cumprod,
        sort
    );
    Ok(())
}
