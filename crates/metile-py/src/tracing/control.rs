//! Control flow at trace time. The frontend's AST rewrite turns loops and `if`s
//! into calls of these helpers, passing the body as a Python function of the
//! carried variables. Python values (ints, constexprs) keep Python semantics —
//! loops unroll and branches are chosen while tracing; run-time values become
//! Tile IR `for` and `if` ops whose regions yield the carried variables.

use metile_ir::{DType, Elem, Operand, Type, ValueId};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use super::state::{describe_object, discard_region, python_number, with_trace, ClosedBlock, Trace};
use super::tile::Tile;

/// The value of a variable that has not been assigned yet (the rewrite passes
/// it for carried names that are unbound before a loop or an `if`).
#[pyclass(module = "metile._metile", name = "Undefined", frozen)]
pub struct Undefined;

#[pymethods]
impl Undefined {
    fn __repr__(&self) -> &'static str {
        "<undefined variable>"
    }
}

/// `metile.tile_range(start, end, step)`: a loop compiled into the kernel (not
/// unrolled), whatever its bounds. Only the frontend's loop rewrite iterates it.
#[pyclass(module = "metile._metile", name = "TileRange", frozen)]
pub struct TileRange {
    start: Py<PyAny>,
    end: Py<PyAny>,
    step: Py<PyAny>,
    /// The pipelining hint (`num_stages=`), if given.
    num_stages: Option<u32>,
}

#[pymethods]
impl TileRange {
    /// Reached only by loops the frontend did not rewrite: in comprehensions,
    /// lambdas, and helpers that run as plain Python (the kernel's own loops
    /// and its helpers' are rewritten or checked by `python_loop`).
    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        with_trace(py, "metile.tile_range()", |t| {
            Err(t.error(
                py,
                "a loop over metile.tile_range(...) (or over range() with bounds only known at run \
                 time) must be a `for` statement of the kernel or of a helper function it calls; \
                 comprehensions, lambdas and helpers that run as plain Python (one using `try`, \
                 `global` or `yield`, or a library's) cannot compile it",
            ))
        })
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let show = |o: &Py<PyAny>| o.bind(py).repr().map(|r| r.to_string()).unwrap_or_default();
        format!(
            "tile_range({}, {}, {})",
            show(&self.start),
            show(&self.end),
            show(&self.step)
        )
    }
}

fn check_bound(t: &Trace, obj: &Bound<'_, PyAny>, what: &str) -> PyResult<()> {
    t.operand(obj, what).map(|_| ())
}

/// Most stages a `num_stages` hint may ask for (the compiler clamps further to
/// what fits the target's threadgroup memory).
const MAX_NUM_STAGES: i64 = 16;

/// Triton's scheduling hints of `tl.range` that meTile accepts and checks but
/// does not act on: `loop_unroll_factor` (an int from 1), `flatten`,
/// `warp_specialize` and `disallow_acc_multi_buffer` (bools).
fn check_ignored_hints(
    t: &Trace,
    py: Python<'_>,
    hints: &[(&str, Option<&Bound<'_, PyAny>>)],
) -> PyResult<()> {
    for &(name, value) in hints {
        let Some(value) = value.filter(|v| !v.is_none()) else {
            continue;
        };
        let valid = if name == "loop_unroll_factor" {
            value.extract::<i64>().is_ok_and(|n| n >= 1) && value.cast::<pyo3::types::PyBool>().is_err()
        } else {
            value.cast::<pyo3::types::PyBool>().is_ok()
        };
        if !valid {
            let wanted = if name == "loop_unroll_factor" {
                "an int from 1"
            } else {
                "True or False"
            };
            return Err(t.error(
                py,
                &format!(
                    "tile_range's {name} must be {wanted} known when the kernel is compiled, got {}",
                    describe_object(value)
                ),
            ));
        }
    }
    Ok(())
}

/// `tile_range(end)`, `tile_range(start, end)` or `tile_range(start, end,
/// step)`, with an optional pipelining hint `num_stages` (Triton's `tl.range`,
/// whose other hints are accepted and have no effect).
#[pyfunction]
#[pyo3(signature = (start, end=None, step=None, *, num_stages=None, loop_unroll_factor=None,
    disallow_acc_multi_buffer=None, flatten=None, warp_specialize=None))]
#[allow(clippy::too_many_arguments)]
pub fn tile_range(
    py: Python<'_>,
    start: Bound<'_, PyAny>,
    end: Option<Bound<'_, PyAny>>,
    step: Option<Bound<'_, PyAny>>,
    num_stages: Option<Bound<'_, PyAny>>,
    loop_unroll_factor: Option<Bound<'_, PyAny>>,
    disallow_acc_multi_buffer: Option<Bound<'_, PyAny>>,
    flatten: Option<Bound<'_, PyAny>>,
    warp_specialize: Option<Bound<'_, PyAny>>,
) -> PyResult<TileRange> {
    let one = || 1i64.into_pyobject(py).map(|o| o.into_any());
    let zero = || 0i64.into_pyobject(py).map(|o| o.into_any());
    let (start, end) = match end {
        Some(e) if !e.is_none() => (start, e),
        _ => (zero()?, start),
    };
    let step = match step {
        Some(s) if !s.is_none() => s,
        _ => one()?,
    };
    with_trace(py, "metile.tile_range()", |t| {
        check_ignored_hints(
            t,
            py,
            &[
                ("loop_unroll_factor", loop_unroll_factor.as_ref()),
                ("disallow_acc_multi_buffer", disallow_acc_multi_buffer.as_ref()),
                ("flatten", flatten.as_ref()),
                ("warp_specialize", warp_specialize.as_ref()),
            ],
        )?;
        check_bound(t, &start, "tile_range's start")?;
        check_bound(t, &end, "tile_range's end")?;
        check_bound(t, &step, "tile_range's step")?;
        if let Some(Ok(Operand::Int(s))) = python_number(&step) {
            if s <= 0 {
                return Err(t.error(py, &format!("tile_range's step must be positive, got {s}")));
            }
        }
        let num_stages = match num_stages.filter(|n| !n.is_none()) {
            None => None,
            Some(n) => {
                let n = t.static_int(&n, "num_stages")?;
                if !(1..=MAX_NUM_STAGES).contains(&n) {
                    return Err(t.error(
                        py,
                        &format!(
                            "num_stages must be an int from 1 (no pipelining) to {MAX_NUM_STAGES}, got {n}"
                        ),
                    ));
                }
                Some(n as u32)
            }
        };
        Ok(TileRange {
            start: start.unbind(),
            end: end.unbind(),
            step: step.unbind(),
            num_stages,
        })
    })
}

/// `range(...)` in a `for` statement: Python's range for Python ints (the loop
/// unrolls while tracing), a [`TileRange`] when a bound is a run-time value.
#[pyfunction]
#[pyo3(signature = (range_fn, *args, **kwargs))]
pub fn loop_range<'py>(
    range_fn: &Bound<'py, PyAny>,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = range_fn.py();
    static BUILTIN_RANGE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let builtin = BUILTIN_RANGE.import(py, "builtins", "range")?;
    let traced = args.iter().any(|a| a.cast::<Tile>().is_ok());
    if !range_fn.is(builtin) {
        return range_fn.call(args, kwargs);
    }
    // `num_stages=` (as on Triton's `tl.range`) asks for a compiled loop.
    let num_stages = match kwargs {
        None => None,
        Some(k) => {
            let stages = k.get_item("num_stages")?;
            if k.len() != usize::from(stages.is_some()) {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "range() in a kernel takes one keyword argument, num_stages",
                ));
            }
            stages
        }
    };
    if !traced && num_stages.is_none() {
        return range_fn.call1(args);
    }
    let get = |i: usize| args.get_item(i).ok();
    let range = match args.len() {
        1 => tile_range(
            py,
            args.get_item(0)?,
            None,
            None,
            num_stages,
            None,
            None,
            None,
            None,
        )?,
        2 => tile_range(
            py,
            args.get_item(0)?,
            get(1),
            None,
            num_stages,
            None,
            None,
            None,
            None,
        )?,
        3 => tile_range(
            py,
            args.get_item(0)?,
            get(1),
            get(2),
            num_stages,
            None,
            None,
            None,
            None,
        )?,
        n => {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "range expected 1 to 3 arguments, got {n}"
            )))
        }
    };
    Ok(Bound::new(py, range)?.into_any())
}

/// The iterable of a kernel loop that stays a Python loop because it contains
/// `break`, `continue` or `return` or has an `else:` clause: refuses run-time ranges.
#[pyfunction]
pub fn python_loop<'py>(iterable: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = iterable.py();
    if iterable.cast::<TileRange>().is_err() {
        return Ok(iterable.clone());
    }
    with_trace(py, "metile.tile_range()", |t| {
        Err(t.error(
            py,
            "this loop runs over metile.tile_range(...) (or over range() with bounds only known at run \
             time) but contains `break`, `continue` or `return`, or has an `else:` clause, which \
             compiled loops cannot; compute a mask and use metile.where, or bound the loop with \
             compile-time values",
        ))
    })
}

/// A `while` condition, an `if` that contains `return`/`break`/`continue`, or
/// the condition of `x if c else y`: these need a value known while tracing.
#[pyfunction]
pub fn static_condition(py: Python<'_>, cond: &Bound<'_, PyAny>, construct: &str) -> PyResult<bool> {
    if cond.cast::<Tile>().is_err() {
        return cond.is_truthy();
    }
    let message = match construct {
        "while" => {
            "this `while` loop depends on a value computed at run time and contains `break`, \
             `continue` or `return`, or has an `else:` clause (or a walrus in its condition), which \
             compiled loops cannot; fold the exit into the loop's condition"
        }
        "ifexp" => {
            "`x if c else y` with an assignment (`:=`) in a branch needs a condition known when the \
             kernel is compiled, but c is computed at run time; use metile.where(c, x, y)"
        }
        _ => {
            "this `if` depends on a value computed at run time and contains `return`, `break` or \
             `continue`, which compiled branches cannot; assign variables in the branches instead (or \
             select with metile.where), and return after the `if`"
        }
    };
    with_trace(py, "a control-flow statement", |t| Err(t.error(py, message)))
}

// ------------------------------------------------------------- carried values

/// What a carried variable is while a loop is traced.
enum Slot {
    /// A Python value passed through as is; it must come back unchanged.
    Python(Py<PyAny>),
    /// A block argument of this type.
    Carried(Type),
}

/// The type of a Python number on its own: bool, i32 (i64 if it does not fit), f32.
fn number_type(op: Operand) -> Type {
    Type::scalar(match op {
        Operand::Bool(_) => DType::Bool,
        Operand::Int(i) if i32::try_from(i).is_err() => DType::I64,
        Operand::Int(_) => DType::I32,
        _ => DType::F32,
    })
}

fn same_python_value(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> bool {
    a.is(b) || (a.get_type().is(b.get_type()) && a.eq(b).unwrap_or(false))
}

fn is_undefined(obj: &Bound<'_, PyAny>) -> bool {
    obj.cast::<Undefined>().is_ok()
}

/// A Tile IR operand for a carried value: a proxy or a Python number.
enum Carriable {
    Value(ValueId),
    Number(Operand),
}

fn carriable(
    t: &Trace,
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    name: &str,
    construct: &str,
) -> PyResult<Carriable> {
    if let Ok(tile) = obj.cast::<Tile>() {
        return Ok(Carriable::Value(t.value_of(py, tile.get())?));
    }
    match python_number(obj) {
        Some(Ok(n)) => Ok(Carriable::Number(n)),
        _ => Err(t.error(
            py,
            &format!(
                "`{name}` is carried out of {construct}, so it must be a tile or a number, but it is {}",
                describe_object(obj)
            ),
        )),
    }
}

/// The type a carried slot of type `ty` needs to also hold `value`. Python
/// numbers are weak: an int keeps an f16 tile f16, a float turns an int tile f32.
fn join_with(t: &Trace, py: Python<'_>, ty: &Type, value: &Carriable, name: &str) -> PyResult<Type> {
    let other = match *value {
        Carriable::Value(v) => t.ty(v).clone(),
        Carriable::Number(n) => {
            let keeps = match (ty.elem, n) {
                (Elem::Scalar(d), Operand::Float(_)) => d.is_float(),
                (Elem::Scalar(d), Operand::Int(_)) => d != DType::Bool,
                (Elem::Scalar(_), _) => true,
                (Elem::Ptr(..), _) => false,
            };
            if keeps {
                return Ok(ty.clone());
            }
            number_type(n)
        }
    };
    t.builder
        .join_types(ty, &other, name)
        .map_err(|e| t.error(py, &e.0))
}

/// Materialises `value` as type `ty` in the current block.
fn convert(t: &mut Trace, py: Python<'_>, value: &Carriable, ty: &Type) -> PyResult<ValueId> {
    let v = match *value {
        Carriable::Value(v) => v,
        Carriable::Number(n) => t.builder.materialize(n, ty.dtype()),
    };
    t.ir(py, |bld| bld.convert_to(v, ty))
}

fn names_of(names: &Bound<'_, PyTuple>) -> Vec<String> {
    names
        .iter()
        .map(|n| n.extract::<String>().unwrap_or_else(|_| "?".to_string()))
        .collect()
}

fn results_tuple(result: Bound<'_, PyAny>, expected: usize) -> PyResult<Bound<'_, PyTuple>> {
    match result.cast_into::<PyTuple>() {
        Ok(t) if t.len() == expected => Ok(t),
        _ => Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "internal: a rewritten block returned something other than {expected} carried values"
        ))),
    }
}

// ------------------------------------------------------------------ loops

/// `for target in iterable: body` with `body(target, *carried) -> carried`.
#[pyfunction]
pub fn trace_for<'py>(
    iterable: &Bound<'py, PyAny>,
    body: &Bound<'py, PyAny>,
    inits: &Bound<'py, PyTuple>,
    names: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = iterable.py();
    if let Ok(range) = iterable.cast::<TileRange>() {
        return compiled_loop(py, range.get(), body, inits, names);
    }
    let names = names_of(names);
    let mut values = inits.clone();
    for item in iterable.try_iter()? {
        let mut args = vec![item?];
        args.extend(values.iter());
        let result = body.call1(PyTuple::new(py, args)?)?;
        let result = results_tuple(result, inits.len())?;
        let mut merged = Vec::with_capacity(names.len());
        for ((old, new), name) in values.iter().zip(result.iter()).zip(&names) {
            merged.push(keep_where_absent(py, &new, &old, name)?);
        }
        values = PyTuple::new(py, merged)?;
    }
    Ok(values)
}

/// The value a carried variable has after an unrolled iteration or a branch
/// that assigned it: `new`, keeping `old` in the lanes where `new` is absent (a
/// `carry_merge`, resolved by the absent-lane pass). Values that are not tiles,
/// an unassigned or undefined `old`, and an `old` that cannot take `new`'s type
/// (the variable changed shape) leave `new` as it is.
fn keep_where_absent<'py>(
    py: Python<'py>,
    new: &Bound<'py, PyAny>,
    old: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let Ok(tile) = new.cast::<Tile>() else {
        return Ok(new.clone());
    };
    if new.is(old) || is_undefined(old) {
        return Ok(new.clone());
    }
    let merged = with_trace(py, "a loop-carried variable", |t| {
        let v = t.value_of(py, tile.get())?;
        let ty = t.ty(v).clone();
        if ty.is_ptr() {
            return Ok(None);
        }
        let Ok(previous) = carriable(t, py, old, name, "this loop") else {
            return Ok(None);
        };
        let Ok(previous) = convert(t, py, &previous, &ty) else {
            return Ok(None);
        };
        let m = t.ir(py, |bld| bld.carry_merge(v, previous))?;
        Ok(Some(t.wrap_any(py, m)?))
    })?;
    Ok(merged.map_or_else(|| new.clone(), |m| m.into_bound(py)))
}

fn compiled_loop<'py>(
    py: Python<'py>,
    range: &TileRange,
    body: &Bound<'py, PyAny>,
    inits: &Bound<'py, PyTuple>,
    names: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    const WHAT: &str = "a loop over metile.tile_range()";
    let names = names_of(names);
    let inits: Vec<Bound<'py, PyAny>> = inits.iter().collect();
    let (bounds, mut slots) = with_trace(py, WHAT, |t| {
        let mut bounds = vec![];
        for (obj, what) in [
            (&range.start, "start"),
            (&range.end, "end"),
            (&range.step, "step"),
        ] {
            let op = t.operand(obj.bind(py), &format!("tile_range's {what}"))?;
            bounds.push(t.ir(py, |bld| bld.loop_bound(op, &format!("tile_range's {what}")))?);
        }
        let mut slots = vec![];
        for (init, name) in inits.iter().zip(&names) {
            if is_undefined(init) {
                return Err(t.error(
                    py,
                    &format!(
                        "`{name}` is assigned inside this loop and used after it (or in the next \
                         iteration), but has no value before the loop; give it an initial value before \
                         the loop, e.g. `{name} = 0.0` or `{name} = metile.zeros(...)`"
                    ),
                ));
            }
            slots.push(match init.cast::<Tile>() {
                Ok(tile) => Slot::Carried(t.ty(t.value_of(py, tile.get())?).clone()),
                Err(_) => Slot::Python(init.clone().unbind()),
            });
        }
        Ok((bounds, slots))
    })?;

    const MAX_ATTEMPTS: usize = 16;
    for _ in 0..MAX_ATTEMPTS {
        // Trace the body against block arguments of the current carried types.
        let mut arg_types = vec![Type::scalar(DType::I32)];
        arg_types.extend(slots.iter().filter_map(|s| match s {
            Slot::Carried(ty) => Some(ty.clone()),
            Slot::Python(_) => None,
        }));
        let block_args = with_trace(py, WHAT, |t| {
            let args = t.push_region(&arg_types);
            args.into_iter()
                .map(|a| t.wrap_any(py, a))
                .collect::<PyResult<Vec<_>>>()
        })?;
        let mut block_args = block_args.into_iter();
        let mut call_args: Vec<Py<PyAny>> = block_args.next().into_iter().collect();
        for slot in &slots {
            call_args.push(match slot {
                Slot::Carried(_) => block_args.next().ok_or_else(internal_arity)?,
                Slot::Python(obj) => obj.clone_ref(py),
            });
        }
        let results = match body
            .call1(PyTuple::new(py, call_args)?)
            .and_then(|r| results_tuple(r, slots.len()))
        {
            Ok(r) => r,
            Err(e) => {
                discard_region(py);
                return Err(e);
            }
        };

        let finished = with_trace(py, WHAT, |t| {
            // Learn the types the body yields; widen the slots that changed.
            let mut changed = false;
            let mut yields = Vec::with_capacity(slots.len());
            for ((slot, name), result) in slots.iter_mut().zip(&names).zip(results.iter()) {
                match slot {
                    Slot::Python(obj) if same_python_value(obj.bind(py), &result) => yields.push(None),
                    Slot::Python(obj) => {
                        let initial = match carriable(t, py, obj.bind(py), name, "this loop")? {
                            Carriable::Number(n) => number_type(n),
                            Carriable::Value(v) => t.ty(v).clone(),
                        };
                        let value = carriable(t, py, &result, name, "this loop")?;
                        *slot = Slot::Carried(join_with(t, py, &initial, &value, name)?);
                        changed = true;
                        yields.push(None);
                    }
                    Slot::Carried(ty) => {
                        let value = carriable(t, py, &result, name, "this loop")?;
                        let joined = join_with(t, py, ty, &value, name)?;
                        if joined != *ty {
                            *ty = joined;
                            changed = true;
                        }
                        yields.push(Some(value));
                    }
                }
            }
            if changed {
                t.pop_region(py)?;
                return Ok(None);
            }
            let mut yielded = vec![];
            for (slot, value) in slots.iter().zip(&yields) {
                if let (Slot::Carried(ty), Some(value)) = (slot, value) {
                    yielded.push(convert(t, py, value, ty)?);
                }
            }
            t.builder.yield_values(&yielded);
            let ClosedBlock { block, .. } = t.pop_region(py)?;
            let mut init_values = vec![];
            for (slot, (init, name)) in slots.iter().zip(inits.iter().zip(&names)) {
                if let Slot::Carried(ty) = slot {
                    let value = carriable(t, py, init, name, "this loop")?;
                    init_values.push(convert(t, py, &value, ty)?);
                }
            }
            let outs = t.ir(py, |bld| {
                bld.finish_pipelined_for(
                    (bounds[0], bounds[1], bounds[2]),
                    &init_values,
                    block,
                    range.num_stages,
                )
            })?;
            let mut outs = outs.into_iter();
            let mut finals: Vec<Py<PyAny>> = vec![];
            for slot in &slots {
                finals.push(match slot {
                    Slot::Carried(_) => t.wrap_any(py, outs.next().ok_or_else(internal_arity)?)?,
                    Slot::Python(obj) => obj.clone_ref(py),
                });
            }
            Ok(Some(finals))
        })?;
        if let Some(finals) = finished {
            return PyTuple::new(py, finals);
        }
    }
    with_trace(py, WHAT, |t| {
        Err(t.error(
            py,
            "internal: the types of this loop's carried variables did not settle",
        ))
    })
}

/// `while cond(*carried): carried = body(*carried)`. While the condition is a
/// Python value the loop runs in Python (unrolled); once it is a traced value,
/// the rest of the loop becomes a Tile IR `while` from the values it has then.
#[pyfunction]
pub fn trace_while<'py>(
    cond_fn: &Bound<'py, PyAny>,
    body_fn: &Bound<'py, PyAny>,
    inits: &Bound<'py, PyTuple>,
    names: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    const WHAT: &str = "a `while` loop";
    let py = cond_fn.py();
    let names = names_of(names);
    let mut values = inits.clone();
    loop {
        // The condition is traced in a region of its own: a traced condition is
        // traced again inside the loop, so these ops are dropped; a Python one
        // keeps whatever ops it emitted, where they were emitted.
        with_trace(py, WHAT, |t| {
            t.push_region(&[]);
            Ok(())
        })?;
        let cond = match cond_fn.call1(&values) {
            Ok(c) => c,
            Err(e) => {
                discard_region(py);
                return Err(e);
            }
        };
        if cond.cast::<Tile>().is_ok() {
            discard_region(py);
            return compiled_while(py, cond_fn, body_fn, &values, &names);
        }
        with_trace(py, WHAT, |t| {
            let closed = t.pop_region(py)?;
            t.builder.splice_block(closed.block);
            Ok(())
        })?;
        if !cond.is_truthy()? {
            return Ok(values);
        }
        let result = results_tuple(body_fn.call1(&values)?, values.len())?;
        let mut merged = Vec::with_capacity(names.len());
        for ((old, new), name) in values.iter().zip(result.iter()).zip(&names) {
            merged.push(keep_where_absent(py, &new, &old, name)?);
        }
        values = PyTuple::new(py, merged)?;
    }
}

/// The Tile IR `while` of [`trace_while`]: the carried types are learnt by
/// tracing the body, as for a compiled `for`, and the condition and the body
/// are traced against block arguments of those types.
fn compiled_while<'py>(
    py: Python<'py>,
    cond_fn: &Bound<'py, PyAny>,
    body_fn: &Bound<'py, PyAny>,
    inits: &Bound<'py, PyTuple>,
    names: &[String],
) -> PyResult<Bound<'py, PyTuple>> {
    const WHAT: &str = "a `while` loop on a run-time condition";
    let inits: Vec<Bound<'py, PyAny>> = inits.iter().collect();
    let mut slots = with_trace(py, WHAT, |t| {
        let mut slots = vec![];
        for (init, name) in inits.iter().zip(names) {
            if is_undefined(init) {
                return Err(t.error(
                    py,
                    &format!(
                        "`{name}` is assigned inside this loop and used by its condition, after it or in \
                         the next iteration, but has no value before the loop; give it an initial value \
                         before the loop, e.g. `{name} = 0`"
                    ),
                ));
            }
            slots.push(match init.cast::<Tile>() {
                Ok(tile) => Slot::Carried(t.ty(t.value_of(py, tile.get())?).clone()),
                Err(_) => Slot::Python(init.clone().unbind()),
            });
        }
        Ok(slots)
    })?;
    // Block arguments for the carried slots, then the call arguments (Python
    // values stand for themselves).
    let open_region = |slots: &[Slot]| -> PyResult<Vec<Py<PyAny>>> {
        let arg_types: Vec<Type> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Carried(ty) => Some(ty.clone()),
                Slot::Python(_) => None,
            })
            .collect();
        let block_args = with_trace(py, WHAT, |t| {
            let args = t.push_region(&arg_types);
            args.into_iter()
                .map(|a| t.wrap_any(py, a))
                .collect::<PyResult<Vec<_>>>()
        })?;
        let mut block_args = block_args.into_iter();
        let mut call_args = Vec::with_capacity(slots.len());
        for slot in slots {
            call_args.push(match slot {
                Slot::Carried(_) => block_args.next().ok_or_else(internal_arity)?,
                Slot::Python(obj) => obj.clone_ref(py),
            });
        }
        Ok(call_args)
    };

    const MAX_ATTEMPTS: usize = 16;
    for _ in 0..MAX_ATTEMPTS {
        let cond_args = open_region(&slots)?;
        let cond = match cond_fn.call1(PyTuple::new(py, cond_args)?) {
            Ok(c) => c,
            Err(e) => {
                discard_region(py);
                return Err(e);
            }
        };
        let cond_block = with_trace(py, WHAT, |t| {
            let c = t.operand(&cond, "the `while` condition")?;
            let flag = t.ir(py, |bld| bld.scalar_condition(c, "a `while` condition"));
            let flag = match flag {
                Ok(f) => f,
                Err(e) => {
                    t.pop_region(py)?;
                    return Err(e);
                }
            };
            t.builder.yield_values(&[flag]);
            Ok(t.pop_region(py)?.block)
        })?;

        let body_args = open_region(&slots)?;
        let results = match body_fn
            .call1(PyTuple::new(py, body_args)?)
            .and_then(|r| results_tuple(r, slots.len()))
        {
            Ok(r) => r,
            Err(e) => {
                discard_region(py);
                return Err(e);
            }
        };
        let finished = with_trace(py, WHAT, |t| {
            let mut changed = false;
            let mut yields = Vec::with_capacity(slots.len());
            for ((slot, name), result) in slots.iter_mut().zip(names).zip(results.iter()) {
                match slot {
                    Slot::Python(obj) if same_python_value(obj.bind(py), &result) => yields.push(None),
                    Slot::Python(obj) => {
                        let initial = match carriable(t, py, obj.bind(py), name, "this loop")? {
                            Carriable::Number(n) => number_type(n),
                            Carriable::Value(v) => t.ty(v).clone(),
                        };
                        let value = carriable(t, py, &result, name, "this loop")?;
                        *slot = Slot::Carried(join_with(t, py, &initial, &value, name)?);
                        changed = true;
                        yields.push(None);
                    }
                    Slot::Carried(ty) => {
                        let value = carriable(t, py, &result, name, "this loop")?;
                        let joined = join_with(t, py, ty, &value, name)?;
                        if joined != *ty {
                            *ty = joined;
                            changed = true;
                        }
                        yields.push(Some(value));
                    }
                }
            }
            if changed {
                t.pop_region(py)?;
                return Ok(None);
            }
            let mut yielded = vec![];
            for (slot, value) in slots.iter().zip(&yields) {
                if let (Slot::Carried(ty), Some(value)) = (slot, value) {
                    yielded.push(convert(t, py, value, ty)?);
                }
            }
            t.builder.yield_values(&yielded);
            let ClosedBlock { block, .. } = t.pop_region(py)?;
            let mut init_values = vec![];
            for (slot, (init, name)) in slots.iter().zip(inits.iter().zip(names)) {
                if let Slot::Carried(ty) = slot {
                    let value = carriable(t, py, init, name, "this loop")?;
                    init_values.push(convert(t, py, &value, ty)?);
                }
            }
            let outs = t.builder.finish_while(&init_values, cond_block.clone(), block);
            let mut outs = outs.into_iter();
            let mut finals: Vec<Py<PyAny>> = vec![];
            for slot in &slots {
                finals.push(match slot {
                    Slot::Carried(_) => t.wrap_any(py, outs.next().ok_or_else(internal_arity)?)?,
                    Slot::Python(obj) => obj.clone_ref(py),
                });
            }
            Ok(Some(finals))
        })?;
        if let Some(finals) = finished {
            return PyTuple::new(py, finals);
        }
    }
    with_trace(py, WHAT, |t| {
        Err(t.error(
            py,
            "internal: the types of this loop's carried variables did not settle",
        ))
    })
}

fn internal_arity() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("internal: carried values and block arguments disagree")
}

// -------------------------------------------------------------------- if

/// `if cond: then_fn(*inits) else: else_fn(*inits)`, each returning the
/// variables `names` assigned in the branches that are used after the `if`;
/// `inits` are the values of `param_names` before it.
#[pyfunction]
pub fn trace_if<'py>(
    cond: &Bound<'py, PyAny>,
    then_fn: &Bound<'py, PyAny>,
    else_fn: &Bound<'py, PyAny>,
    inits: &Bound<'py, PyTuple>,
    names: &Bound<'py, PyTuple>,
    param_names: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyTuple>> {
    let py = cond.py();
    if cond.cast::<Tile>().is_err() {
        let branch = if cond.is_truthy()? { then_fn } else { else_fn };
        return branch.call1(inits)?.cast_into::<PyTuple>().map_err(Into::into);
    }
    const WHAT: &str = "an `if` on a run-time condition";
    let names = names_of(names);
    let param_names = names_of(param_names);
    // Each result's value before the `if` (results are a subset of the params).
    let befores: Vec<Option<Bound<'py, PyAny>>> = names
        .iter()
        .map(|n| {
            let i = param_names.iter().position(|p| p == n)?;
            inits.get_item(i).ok().filter(|v| !is_undefined(v))
        })
        .collect();
    let condition = with_trace(py, WHAT, |t| {
        let c = t.operand(cond, "the `if` condition")?;
        t.ir(py, |bld| bld.condition(c))
    })?;
    // Each branch's results, read while its region is open (its values are only
    // usable there): None for an undefined variable, else a carriable or the
    // error to raise if it has to be carried.
    let mut branches = vec![];
    for branch in [then_fn, else_fn] {
        with_trace(py, WHAT, |t| {
            t.push_region(&[]);
            Ok(())
        })?;
        let results = match branch.call1(inits).and_then(|r| results_tuple(r, names.len())) {
            Ok(r) => r,
            Err(e) => {
                discard_region(py);
                return Err(e);
            }
        };
        let (closed, values) = with_trace(py, WHAT, |t| {
            let values: Vec<Option<PyResult<Carriable>>> = results
                .iter()
                .zip(&names)
                .map(|(r, name)| (!is_undefined(&r)).then(|| carriable(t, py, &r, name, "this `if`")))
                .collect();
            Ok((t.pop_region(py)?, values))
        })?;
        branches.push((closed, results, values));
    }
    let (else_closed, else_results, else_values) = branches.pop().ok_or_else(internal_arity)?;
    let (then_closed, then_results, then_values) = branches.pop().ok_or_else(internal_arity)?;

    with_trace(py, WHAT, |t| {
        // Per variable: the same Python value on both sides, or an IR result.
        let mut merged: Vec<Option<(Carriable, Carriable, Type)>> = vec![];
        let sides = then_results.iter().zip(else_results.iter());
        for (((a, b), (va, vb)), name) in sides.zip(then_values.into_iter().zip(else_values)).zip(&names) {
            if same_python_value(&a, &b) {
                merged.push(None);
                continue;
            }
            let (Some(ca), Some(cb)) = (va, vb) else {
                return Err(t.error(
                    py,
                    &format!(
                        "`{name}` is assigned in only one branch of this `if`, whose condition is only \
                         known at run time, and has no value before it; assign it before the `if` or \
                         in both branches"
                    ),
                ));
            };
            let (ca, cb) = (ca?, cb?);
            // Start from a side's own type (a proxy's, else the other side's, else
            // the number's), then widen it to hold both sides.
            let ty_a = match ca {
                Carriable::Value(v) => t.ty(v).clone(),
                Carriable::Number(n) => match cb {
                    Carriable::Value(v) => t.ty(v).clone(),
                    Carriable::Number(_) => number_type(n),
                },
            };
            let ty = join_with(t, py, &join_with(t, py, &ty_a, &ca, name)?, &cb, name)?;
            merged.push(Some((ca, cb, ty)));
        }
        let mut blocks = vec![];
        for (closed, results) in [(then_closed, &then_results), (else_closed, &else_results)] {
            let pick_then = results.is(&then_results);
            t.resume_region(closed);
            let mut yielded = vec![];
            for (i, m) in merged.iter().enumerate() {
                let Some((a, b, ty)) = m else { continue };
                let mut v = convert(t, py, if pick_then { a } else { b }, ty)?;
                // A branch that assigned the variable keeps its value from before
                // the `if` where the new value is absent.
                let assigned = results.get_item(i)?;
                if let Some(before) = befores[i].as_ref().filter(|b| !assigned.is(b)) {
                    if let Some(old) = carriable(t, py, before, &names[i], "this `if`")
                        .ok()
                        .and_then(|c| convert(t, py, &c, ty).ok())
                    {
                        v = t.ir(py, |bld| bld.carry_merge(v, old))?;
                    }
                }
                yielded.push(v);
            }
            t.builder.yield_values(&yielded);
            blocks.push(t.pop_region(py)?.block);
        }
        let types: Vec<Type> = merged.iter().flatten().map(|(_, _, ty)| ty.clone()).collect();
        let else_block = blocks.pop().unwrap_or_default();
        let then_block = blocks.pop().unwrap_or_default();
        let outs = t.builder.finish_if(condition, then_block, else_block, types);
        let mut outs = outs.into_iter();
        let mut finals: Vec<Py<PyAny>> = vec![];
        for (m, a) in merged.iter().zip(then_results.iter()) {
            finals.push(match m {
                Some(_) => t.wrap_any(py, outs.next().ok_or_else(internal_arity)?)?,
                None => a.unbind(),
            });
        }
        PyTuple::new(py, finals)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TileRange>()?;
    m.add("UNDEFINED", Py::new(m.py(), Undefined)?)?;
    m.add_function(wrap_pyfunction!(tile_range, m)?)?;
    m.add_function(wrap_pyfunction!(loop_range, m)?)?;
    m.add_function(wrap_pyfunction!(static_condition, m)?)?;
    m.add_function(wrap_pyfunction!(python_loop, m)?)?;
    m.add_function(wrap_pyfunction!(trace_for, m)?)?;
    m.add_function(wrap_pyfunction!(trace_if, m)?)?;
    m.add_function(wrap_pyfunction!(trace_while, m)?)?;
    Ok(())
}
