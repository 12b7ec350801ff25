//! The eDSL functions (`metile.load`, `metile.dot`, ...). Each one converts its
//! arguments, tags the op with the caller's source line and asks the builder,
//! which owns every typing rule.

use metile_ir::{BinaryOp, DType, Operand, SwizzlePattern, UnaryOp};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::state::{describe_object, dtype_arg, python_number, type_error, with_trace, Trace};
use super::tile::{cast_value, Tile};

type Obj<'a, 'py> = &'a Bound<'py, PyAny>;

fn dtype_or(t: &Trace, py: Python<'_>, dtype: Option<Obj<'_, '_>>, default: DType) -> PyResult<DType> {
    match dtype {
        Some(d) if !d.is_none() => dtype_arg(d).map_err(|m| t.error(py, &m)),
        _ => Ok(default),
    }
}

#[pyfunction]
pub fn program_id(py: Python<'_>, axis: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.program_id()", |t| {
        let axis = t.static_int(axis, "program_id's axis")?;
        let v = t.ir(py, |bld| bld.program_id(axis))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn num_programs(py: Python<'_>, axis: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.num_programs()", |t| {
        let axis = t.static_int(axis, "num_programs's axis")?;
        let v = t.ir(py, |bld| bld.num_programs(axis))?;
        t.wrap_any(py, v)
    })
}

/// `arange(start, size)`: the `size` consecutive integers from `start` (the seed's
/// definition). `size` is part of the tile's type, so it must be known at compile
/// time; `start` may be a run-time scalar.
#[pyfunction]
pub fn arange(py: Python<'_>, start: Obj<'_, '_>, size: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.arange()", |t| {
        let n = t.static_int(size, "arange's size (the tile's length)")?;
        if n <= 0 {
            return Err(t.error(py, &format!("arange's size must be a positive int, got {n}")));
        }
        let v = if start.cast::<Tile>().is_ok() {
            let s = t.operand(start, "arange's start")?;
            t.ir(py, |bld| {
                let r = bld.arange(0, n)?;
                bld.binary(metile_ir::BinaryOp::Add, s, r.into())
            })?
        } else {
            let s = t.static_int(start, "arange's start")?;
            t.ir(py, |bld| bld.arange(s, s + n))?
        };
        t.wrap_any(py, v)
    })
}

#[pyfunction]
#[pyo3(signature = (ptr, mask=None, other=None))]
pub fn load(
    py: Python<'_>,
    ptr: Obj<'_, '_>,
    mask: Option<Obj<'_, '_>>,
    other: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.load()", |t| {
        let p = t.operand(ptr, "load's pointer")?;
        let m = t.optional_operand(mask, "load's mask")?;
        let o = t.optional_operand(other, "load's other")?;
        let v = t.ir(py, |bld| bld.load(p, m, o))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
#[pyo3(signature = (ptr, value, mask=None))]
pub fn store(
    py: Python<'_>,
    ptr: Obj<'_, '_>,
    value: Obj<'_, '_>,
    mask: Option<Obj<'_, '_>>,
) -> PyResult<()> {
    with_trace(py, "metile.store()", |t| {
        let p = t.operand(ptr, "store's pointer")?;
        let v = t.operand(value, "store's value")?;
        let m = t.optional_operand(mask, "store's mask")?;
        t.ir(py, |bld| bld.store(p, v, m))
    })
}

fn tile_shape_2d(t: &Trace, py: Python<'_>, shape: Obj<'_, '_>, what: &str) -> PyResult<(i64, i64)> {
    match t.static_shape(shape, what)?.as_slice() {
        &[rows, cols] => Ok((rows as i64, cols as i64)),
        other => Err(t.error(py, &format!("{what} must be (rows, cols), got {other:?}"))),
    }
}

/// The `bounds=(rows, cols)` of a bounded block access: two integers or
/// run-time integer scalars.
fn block_bounds(t: &Trace, py: Python<'_>, bounds: Obj<'_, '_>, what: &str) -> PyResult<(Operand, Operand)> {
    let items: Option<Vec<Bound<'_, PyAny>>> = bounds
        .cast::<pyo3::types::PyTuple>()
        .map(|tup| tup.iter().collect())
        .ok()
        .or_else(|| {
            bounds
                .cast::<pyo3::types::PyList>()
                .map(|l| l.iter().collect())
                .ok()
        });
    match items.as_deref() {
        Some([rows, cols]) => Ok((
            t.operand(rows, &format!("{what}'s row bound"))?,
            t.operand(cols, &format!("{what}'s column bound"))?,
        )),
        _ => Err(t.error(
            py,
            &format!(
                "{what}'s bounds must be (rows, cols), the extent of the matrix, got {}",
                bounds.repr().map(|r| r.to_string()).unwrap_or_default()
            ),
        )),
    }
}

#[pyfunction]
#[pyo3(signature = (ptr, row, col, stride, shape, bounds=None))]
pub fn tile_load(
    py: Python<'_>,
    ptr: Obj<'_, '_>,
    row: Obj<'_, '_>,
    col: Obj<'_, '_>,
    stride: Obj<'_, '_>,
    shape: Obj<'_, '_>,
    bounds: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.tile_load()", |t| {
        let shape = tile_shape_2d(t, py, shape, "tile_load's shape")?;
        let p = t.operand(ptr, "tile_load's pointer")?;
        let r = t.operand(row, "tile_load's row offset")?;
        let c = t.operand(col, "tile_load's column offset")?;
        let s = t.operand(stride, "tile_load's stride")?;
        let v = match bounds.filter(|b| !b.is_none()) {
            Some(b) => {
                let b = block_bounds(t, py, b, "tile_load")?;
                t.ir(py, |bld| bld.tile_load_bounded(p, (r, c, s), shape, b))?
            }
            None => t.ir(py, |bld| bld.tile_load(p, r, c, s, shape))?,
        };
        t.wrap_any(py, v)
    })
}

#[pyfunction]
#[pyo3(signature = (ptr, row, col, stride, value, shape, bounds=None))]
#[allow(clippy::too_many_arguments)]
pub fn tile_store(
    py: Python<'_>,
    ptr: Obj<'_, '_>,
    row: Obj<'_, '_>,
    col: Obj<'_, '_>,
    stride: Obj<'_, '_>,
    value: Obj<'_, '_>,
    shape: Obj<'_, '_>,
    bounds: Option<Obj<'_, '_>>,
) -> PyResult<()> {
    with_trace(py, "metile.tile_store()", |t| {
        let shape = tile_shape_2d(t, py, shape, "tile_store's shape")?;
        let p = t.operand(ptr, "tile_store's pointer")?;
        let r = t.operand(row, "tile_store's row offset")?;
        let c = t.operand(col, "tile_store's column offset")?;
        let s = t.operand(stride, "tile_store's stride")?;
        let v = t.operand(value, "tile_store's value")?;
        match bounds.filter(|b| !b.is_none()) {
            Some(b) => {
                let b = block_bounds(t, py, b, "tile_store")?;
                t.ir(py, |bld| bld.tile_store_bounded(p, (r, c, s), v, shape, b))
            }
            None => t.ir(py, |bld| bld.tile_store(p, r, c, s, v, shape)),
        }
    })
}

#[pyfunction]
#[pyo3(signature = (shape, dtype=None))]
pub fn zeros(py: Python<'_>, shape: Obj<'_, '_>, dtype: Option<Obj<'_, '_>>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.zeros()", |t| {
        let shape = t.static_shape(shape, "zeros' shape")?;
        let dtype = dtype_or(t, py, dtype, DType::F32)?;
        let v = t.ir(py, |bld| bld.full(&shape, Operand::Int(0), dtype))?;
        t.wrap_any(py, v)
    })
}

/// `full(shape, value, dtype=None)`: the dtype defaults to the value's (a
/// Python int is i32, a float f32).
#[pyfunction]
#[pyo3(signature = (shape, value, dtype=None))]
pub fn full(
    py: Python<'_>,
    shape: Obj<'_, '_>,
    value: Obj<'_, '_>,
    dtype: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.full()", |t| {
        let shape = t.static_shape(shape, "full's shape")?;
        let value = t.operand(value, "full's value")?;
        let default = match value {
            Operand::Value(v) => t.ty(v).dtype().unwrap_or(DType::F32),
            Operand::Bool(_) => DType::Bool,
            Operand::Int(_) => DType::I32,
            Operand::Float(_) => DType::F32,
        };
        let dtype = dtype_or(t, py, dtype, default)?;
        let v = t.ir(py, |bld| bld.full(&shape, value, dtype))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
#[pyo3(signature = (a, b, acc=None))]
pub fn dot(py: Python<'_>, a: Obj<'_, '_>, b: Obj<'_, '_>, acc: Option<Obj<'_, '_>>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.dot()", |t| {
        let a = t.operand(a, "dot's a")?;
        let b = t.operand(b, "dot's b")?;
        let acc = t.optional_operand(acc, "dot's acc")?;
        let v = t.ir(py, |bld| bld.dot(a, b, acc))?;
        t.wrap_any(py, v)
    })
}

fn unary(py: Python<'_>, what: &'static str, op: UnaryOp, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let x = t.operand(x, what)?;
        let v = t.ir(py, |bld| bld.unary(op, x))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn exp(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    unary(py, "metile.exp()", UnaryOp::Exp, x)
}

#[pyfunction]
pub fn log(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    unary(py, "metile.log()", UnaryOp::Log, x)
}

#[pyfunction]
pub fn sqrt(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    unary(py, "metile.sqrt()", UnaryOp::Sqrt, x)
}

#[pyfunction]
pub fn abs(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    unary(py, "metile.abs()", UnaryOp::Abs, x)
}

#[pyfunction]
pub fn tanh(py: Python<'_>, x: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    unary(py, "metile.tanh()", UnaryOp::Tanh, x)
}

#[pyfunction]
#[pyo3(name = "where")]
pub fn where_(py: Python<'_>, cond: Obj<'_, '_>, x: Obj<'_, '_>, y: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.where()", |t| {
        let c = t.operand(cond, "where's condition")?;
        let a = t.operand(x, "where's x")?;
        let b = t.operand(y, "where's y")?;
        let v = t.ir(py, |bld| bld.select(c, a, b))?;
        t.wrap_any(py, v)
    })
}

/// A binary element-wise op (`maximum`, `pow`, ...) on two operands.
pub(crate) fn elementwise(
    py: Python<'_>,
    what: &'static str,
    op: BinaryOp,
    a: Obj<'_, '_>,
    b: Obj<'_, '_>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, what, |t| {
        let a = t.operand(a, what)?;
        let b = t.operand(b, what)?;
        let v = t.ir(py, |bld| bld.binary(op, a, b))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn maximum(py: Python<'_>, a: Obj<'_, '_>, b: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    elementwise(py, "metile.maximum()", BinaryOp::Max, a, b)
}

#[pyfunction]
pub fn minimum(py: Python<'_>, a: Obj<'_, '_>, b: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    elementwise(py, "metile.minimum()", BinaryOp::Min, a, b)
}

#[pyfunction]
#[pyo3(signature = (pid_m, pid_n, pattern="morton", block_size=None))]
pub fn tile_swizzle<'py>(
    py: Python<'py>,
    pid_m: Obj<'_, 'py>,
    pid_n: Obj<'_, 'py>,
    pattern: &str,
    block_size: Option<Obj<'_, 'py>>,
) -> PyResult<Bound<'py, PyTuple>> {
    let (m, n) = with_trace(py, "metile.tile_swizzle()", |t| {
        let pattern = match pattern {
            "morton" => SwizzlePattern::Morton,
            "diagonal" => SwizzlePattern::Diagonal,
            other => {
                return Err(t.error(
                    py,
                    &format!("tile_swizzle: unknown pattern {other:?}; use \"morton\" or \"diagonal\""),
                ))
            }
        };
        let block_size = match block_size {
            Some(b) if !b.is_none() => t.static_int(b, "tile_swizzle's block_size")?,
            _ => 2,
        };
        let m = t.operand(pid_m, "tile_swizzle's pid_m")?;
        let n = t.operand(pid_n, "tile_swizzle's pid_n")?;
        let (m, n) = t.ir(py, |bld| bld.swizzle(m, n, pattern, block_size))?;
        Ok((t.wrap_any(py, m)?, t.wrap_any(py, n)?))
    })?;
    PyTuple::new(py, [m, n])
}

#[pyfunction]
pub fn cast(py: Python<'_>, x: Obj<'_, '_>, dtype: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.cast()", |t| {
        let x = t.operand(x, "cast's value")?;
        let v = t.builder.materialize(x, None);
        cast_value(t, py, v, dtype)
    })
}

// ------------------------------------------------------------ integer helpers

fn plain_int(obj: Obj<'_, '_>) -> Option<i64> {
    if obj.cast::<Tile>().is_ok() {
        return None;
    }
    match python_number(obj) {
        Some(Ok(Operand::Int(i))) => Some(i),
        _ => None,
    }
}

/// ceil(x / y) on integers, `None` for division by zero or overflow.
fn ceil_div(x: i64, y: i64) -> Option<i64> {
    let q = x.checked_div(y)?;
    let r = x.checked_rem(y)?;
    Some(q + i64::from(r != 0 && (r > 0) == (y > 0)))
}

/// `cdiv(a, b)`: ceil(a / b). On Python ints (on the host or in a kernel) it
/// is a Python int; on run-time values it traces `(a + b - 1) // b`.
#[pyfunction]
pub fn cdiv(py: Python<'_>, a: Obj<'_, '_>, b: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    if let (Some(x), Some(y)) = (plain_int(a), plain_int(b)) {
        return match ceil_div(x, y) {
            Some(q) => Ok(q.into_pyobject(py)?.into_any().unbind()),
            None if y == 0 => Err(pyo3::exceptions::PyZeroDivisionError::new_err(
                "cdiv(a, b) with b == 0",
            )),
            None => Err(pyo3::exceptions::PyOverflowError::new_err(format!(
                "cdiv({x}, {y}) overflows"
            ))),
        };
    }
    if !super::state::tracing_active() {
        return Err(type_error(format!(
            "metile.cdiv(a, b) on the host takes two ints, got {} and {}",
            describe_object(a),
            describe_object(b)
        )));
    }
    with_trace(py, "metile.cdiv()", |t| {
        let a = t.operand(a, "cdiv's a")?;
        let b = t.operand(b, "cdiv's b")?;
        let sum = t.ir(py, |bld| bld.binary(BinaryOp::Add, a, b))?;
        let bumped = t.ir(py, |bld| bld.binary(BinaryOp::Sub, sum.into(), Operand::Int(1)))?;
        let v = t.ir(py, |bld| bld.binary(BinaryOp::FloorDiv, bumped.into(), b))?;
        t.wrap_any(py, v)
    })
}

/// The smallest power of 2 that is >= n (1 for n <= 1); compile-time ints only.
#[pyfunction]
pub fn next_power_of_2(py: Python<'_>, n: Obj<'_, '_>) -> PyResult<i64> {
    match plain_int(n) {
        Some(n) if n <= 1 => Ok(1),
        Some(n) if n <= 1 << 62 => Ok((n as u64).next_power_of_two() as i64),
        Some(n) => Err(pyo3::exceptions::PyOverflowError::new_err(format!(
            "next_power_of_2({n}) does not fit in 64 bits"
        ))),
        None if n.cast::<Tile>().is_ok() => with_trace(py, "metile.next_power_of_2()", |t| {
            Err(t.error(
                py,
                "next_power_of_2 needs a compile-time int (a Python int or a metile.constexpr), \
                     not a value computed at run time",
            ))
        }),
        None => Err(type_error(format!(
            "next_power_of_2 takes an int, got {}",
            describe_object(n)
        ))),
    }
}

// ------------------------------------------------------------ thread level

#[pyfunction]
pub fn thread_id(py: Python<'_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.thread_id()", |t| {
        let v = t.ir(py, |bld| bld.thread_id())?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn simd_lane_id(py: Python<'_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.simd_lane_id()", |t| {
        let v = t.ir(py, |bld| bld.simd_lane_id())?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn simd_shuffle_xor(py: Python<'_>, value: Obj<'_, '_>, mask: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.simd_shuffle_xor()", |t| {
        let x = t.operand(value, "simd_shuffle_xor's value")?;
        let m = t.operand(mask, "simd_shuffle_xor's mask")?;
        let v = t.ir(py, |bld| bld.simd_shuffle_xor(x, m))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn simd_broadcast(py: Python<'_>, value: Obj<'_, '_>, lane: Obj<'_, '_>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.simd_broadcast()", |t| {
        let x = t.operand(value, "simd_broadcast's value")?;
        let l = t.operand(lane, "simd_broadcast's lane")?;
        let v = t.ir(py, |bld| bld.simd_broadcast(x, l))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
#[pyo3(signature = (size, dtype=None))]
pub fn shared(py: Python<'_>, size: Obj<'_, '_>, dtype: Option<Obj<'_, '_>>) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.shared()", |t| {
        let size = t.static_int(size, "shared's size")?;
        let dtype = dtype_or(t, py, dtype, DType::F32)?;
        let v = t.ir(py, |bld| bld.shared(size, dtype))?;
        t.wrap_any(py, v)
    })
}

#[pyfunction]
pub fn barrier(py: Python<'_>) -> PyResult<()> {
    with_trace(py, "metile.barrier()", |t| {
        t.builder.barrier();
        Ok(())
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(program_id, m)?)?;
    m.add_function(wrap_pyfunction!(num_programs, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(store, m)?)?;
    m.add_function(wrap_pyfunction!(tile_load, m)?)?;
    m.add_function(wrap_pyfunction!(tile_store, m)?)?;
    m.add_function(wrap_pyfunction!(zeros, m)?)?;
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(dot, m)?)?;
    m.add_function(wrap_pyfunction!(exp, m)?)?;
    m.add_function(wrap_pyfunction!(log, m)?)?;
    m.add_function(wrap_pyfunction!(sqrt, m)?)?;
    m.add_function(wrap_pyfunction!(abs, m)?)?;
    m.add_function(wrap_pyfunction!(tanh, m)?)?;
    m.add_function(wrap_pyfunction!(where_, m)?)?;
    m.add_function(wrap_pyfunction!(maximum, m)?)?;
    m.add_function(wrap_pyfunction!(minimum, m)?)?;
    m.add_function(wrap_pyfunction!(tile_swizzle, m)?)?;
    m.add_function(wrap_pyfunction!(cast, m)?)?;
    m.add_function(wrap_pyfunction!(cdiv, m)?)?;
    m.add_function(wrap_pyfunction!(next_power_of_2, m)?)?;
    m.add_function(wrap_pyfunction!(thread_id, m)?)?;
    m.add_function(wrap_pyfunction!(simd_lane_id, m)?)?;
    m.add_function(wrap_pyfunction!(simd_shuffle_xor, m)?)?;
    m.add_function(wrap_pyfunction!(simd_broadcast, m)?)?;
    m.add_function(wrap_pyfunction!(shared, m)?)?;
    m.add_function(wrap_pyfunction!(barrier, m)?)?;
    Ok(())
}
