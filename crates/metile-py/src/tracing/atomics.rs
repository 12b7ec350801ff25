//! Atomics (`metile.atomic_add`, ..., `metile.atomic_cas`) and random numbers
//! (`metile.rand`, `metile.randn`, `metile.randint`, `metile.randint4x`,
//! `metile.rand4x`, `metile.randn4x`) with Triton's names, arguments and
//! defaults (`sem="acq_rel"`, `scope="gpu"`, `n_rounds=10`). The builder owns
//! the typing and spells the random functions with ordinary ops.

use metile_ir::{AtomicFlags, AtomicOp, MemScope, MemSem, ValueId, PHILOX_ROUNDS};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::state::{describe_object, with_trace, Trace};

type Obj<'a, 'py> = &'a Bound<'py, PyAny>;

/// The quoted names of a list, for messages: `"a", "b" or "c"`.
fn quoted(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => quoted.join(""),
    }
}

/// A compile-time string argument naming one of `names` (`None` gives the default).
fn choice<T: Copy>(
    t: &Trace,
    py: Python<'_>,
    obj: Option<Obj<'_, '_>>,
    options: &[T],
    name_of: fn(T) -> &'static str,
    default: T,
    what: &str,
) -> PyResult<T> {
    let Some(obj) = obj.filter(|o| !o.is_none()) else {
        return Ok(default);
    };
    let names: Vec<&str> = options.iter().map(|&o| name_of(o)).collect();
    let text: Option<String> = obj.extract().ok();
    match text.and_then(|s| options.iter().copied().find(|&o| name_of(o) == s)) {
        Some(o) => Ok(o),
        None => Err(t.error(
            py,
            &format!(
                "{what} must be {}, got {}",
                quoted(&names),
                obj.repr()
                    .map(|r| r.to_string())
                    .unwrap_or_else(|_| describe_object(obj))
            ),
        )),
    }
}

fn flags(
    t: &Trace,
    py: Python<'_>,
    name: &str,
    sem: Option<Obj<'_, '_>>,
    scope: Option<Obj<'_, '_>>,
) -> PyResult<AtomicFlags> {
    Ok(AtomicFlags {
        sem: choice(
            t,
            py,
            sem,
            &MemSem::ALL,
            MemSem::name,
            MemSem::AcqRel,
            &format!("{name}'s sem"),
        )?,
        scope: choice(
            t,
            py,
            scope,
            &MemScope::ALL,
            MemScope::name,
            MemScope::Gpu,
            &format!("{name}'s scope"),
        )?,
    })
}

/// Arguments of a read-modify-write atomic.
struct Rmw<'a, 'py> {
    pointer: Obj<'a, 'py>,
    val: Obj<'a, 'py>,
    mask: Option<Obj<'a, 'py>>,
    sem: Option<Obj<'a, 'py>>,
    scope: Option<Obj<'a, 'py>>,
}

fn rmw(py: Python<'_>, op: AtomicOp, args: Rmw<'_, '_>) -> PyResult<Py<PyAny>> {
    let name = format!("atomic_{}", op.name());
    with_trace(py, &format!("metile.{name}()"), |t| {
        let p = t.operand(args.pointer, &format!("{name}'s pointer"))?;
        let v = t.operand(args.val, &format!("{name}'s val"))?;
        let m = t.optional_operand(args.mask, &format!("{name}'s mask"))?;
        let flags = flags(t, py, &name, args.sem, args.scope)?;
        let r = t.ir(py, |bld| bld.atomic(op, p, None, v, m, flags))?;
        t.wrap_any(py, r)
    })
}

macro_rules! rmw_functions {
    ($($name:ident => $op:expr),* $(,)?) => {
        $(
            #[pyfunction]
            #[pyo3(signature = (pointer, val, mask=None, sem=None, scope=None))]
            pub fn $name(
                py: Python<'_>,
                pointer: Obj<'_, '_>,
                val: Obj<'_, '_>,
                mask: Option<Obj<'_, '_>>,
                sem: Option<Obj<'_, '_>>,
                scope: Option<Obj<'_, '_>>,
            ) -> PyResult<Py<PyAny>> {
                rmw(py, $op, Rmw { pointer, val, mask, sem, scope })
            }
        )*
    };
}

rmw_functions!(
    atomic_add => AtomicOp::Add,
    atomic_max => AtomicOp::Max,
    atomic_min => AtomicOp::Min,
    atomic_and => AtomicOp::And,
    atomic_or => AtomicOp::Or,
    atomic_xor => AtomicOp::Xor,
    atomic_xchg => AtomicOp::Xchg,
);

/// `atomic_cas(pointer, cmp, val)`: stores `val` where the old value equals
/// `cmp`; returns the old values (no mask, as in Triton).
#[pyfunction]
#[pyo3(signature = (pointer, cmp, val, sem=None, scope=None))]
pub fn atomic_cas(
    py: Python<'_>,
    pointer: Obj<'_, '_>,
    cmp: Obj<'_, '_>,
    val: Obj<'_, '_>,
    sem: Option<Obj<'_, '_>>,
    scope: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.atomic_cas()", |t| {
        let p = t.operand(pointer, "atomic_cas's pointer")?;
        let c = t.operand(cmp, "atomic_cas's cmp")?;
        let v = t.operand(val, "atomic_cas's val")?;
        let flags = flags(t, py, "atomic_cas", sem, scope)?;
        let r = t.ir(py, |bld| bld.atomic(AtomicOp::Cas, p, Some(c), v, None, flags))?;
        t.wrap_any(py, r)
    })
}

// ---------------------------------------------------------------- random

fn rounds(t: &Trace, py: Python<'_>, n_rounds: Option<Obj<'_, '_>>, what: &str) -> PyResult<u32> {
    let Some(n) = n_rounds.filter(|o| !o.is_none()) else {
        return Ok(PHILOX_ROUNDS);
    };
    let n = t.static_int(n, &format!("{what}'s n_rounds"))?;
    u32::try_from(n).map_err(|_| t.error(py, &format!("{what}'s n_rounds must not be negative, got {n}")))
}

/// Philox's four words for `(seed, offset)`.
fn words(
    t: &mut Trace,
    py: Python<'_>,
    what: &str,
    seed: Obj<'_, '_>,
    offset: Obj<'_, '_>,
    n_rounds: Option<Obj<'_, '_>>,
) -> PyResult<[ValueId; 4]> {
    let s = t.operand(seed, &format!("{what}'s seed"))?;
    let o = t.operand(offset, &format!("{what}'s offset"))?;
    let n = rounds(t, py, n_rounds, what)?;
    t.ir(py, |bld| bld.randint4x(s, o, n, what))
}

fn tuple_of(t: &mut Trace, py: Python<'_>, values: &[ValueId]) -> PyResult<Py<PyAny>> {
    let items: Vec<Py<PyAny>> = values
        .iter()
        .map(|&v| t.wrap_any(py, v))
        .collect::<PyResult<_>>()?;
    Ok(PyTuple::new(py, items)?.into_any().unbind())
}

/// Four blocks of random u32 for `offset` (Philox4x32 with `n_rounds` rounds).
#[pyfunction]
#[pyo3(signature = (seed, offset, n_rounds=None))]
pub fn randint4x(
    py: Python<'_>,
    seed: Obj<'_, '_>,
    offset: Obj<'_, '_>,
    n_rounds: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.randint4x()", |t| {
        let w = words(t, py, "randint4x", seed, offset, n_rounds)?;
        tuple_of(t, py, &w)
    })
}

/// One block of random u32: the first word of `randint4x`.
#[pyfunction]
#[pyo3(signature = (seed, offset, n_rounds=None))]
pub fn randint(
    py: Python<'_>,
    seed: Obj<'_, '_>,
    offset: Obj<'_, '_>,
    n_rounds: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.randint()", |t| {
        let [w, ..] = words(t, py, "randint", seed, offset, n_rounds)?;
        t.wrap_any(py, w)
    })
}

/// A block of f32 uniform in `[0, 1)`.
#[pyfunction]
#[pyo3(signature = (seed, offset, n_rounds=None))]
pub fn rand(
    py: Python<'_>,
    seed: Obj<'_, '_>,
    offset: Obj<'_, '_>,
    n_rounds: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.rand()", |t| {
        let [w, ..] = words(t, py, "rand", seed, offset, n_rounds)?;
        let u = t.ir(py, |bld| bld.uniform_float(w))?;
        t.wrap_any(py, u)
    })
}

/// Four blocks of f32 uniform in `[0, 1)`, one per Philox word.
#[pyfunction]
#[pyo3(signature = (seed, offsets, n_rounds=None))]
pub fn rand4x(
    py: Python<'_>,
    seed: Obj<'_, '_>,
    offsets: Obj<'_, '_>,
    n_rounds: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.rand4x()", |t| {
        let w = words(t, py, "rand4x", seed, offsets, n_rounds)?;
        let mut u = w;
        for (slot, &x) in u.iter_mut().zip(&w) {
            *slot = t.ir(py, |bld| bld.uniform_float(x))?;
        }
        tuple_of(t, py, &u)
    })
}

/// A block of f32 from the standard normal distribution (Box-Muller on the
/// first two words).
#[pyfunction]
#[pyo3(signature = (seed, offset, n_rounds=None))]
pub fn randn(
    py: Python<'_>,
    seed: Obj<'_, '_>,
    offset: Obj<'_, '_>,
    n_rounds: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.randn()", |t| {
        let [w0, w1, ..] = words(t, py, "randn", seed, offset, n_rounds)?;
        let n = t.ir(py, |bld| {
            let (u1, u2) = (bld.uniform_float(w0)?, bld.uniform_float(w1)?);
            Ok(bld.pair_uniform_to_normal(u1, u2)?.0)
        })?;
        t.wrap_any(py, n)
    })
}

/// Four blocks of standard normal f32 (Box-Muller on words 0 and 1, then 2 and 3).
#[pyfunction]
#[pyo3(signature = (seed, offset, n_rounds=None))]
pub fn randn4x(
    py: Python<'_>,
    seed: Obj<'_, '_>,
    offset: Obj<'_, '_>,
    n_rounds: Option<Obj<'_, '_>>,
) -> PyResult<Py<PyAny>> {
    with_trace(py, "metile.randn4x()", |t| {
        let w = words(t, py, "randn4x", seed, offset, n_rounds)?;
        let n = t.ir(py, |bld| {
            let u: Vec<ValueId> = w
                .iter()
                .map(|&x| bld.uniform_float(x))
                .collect::<Result<_, _>>()?;
            let (n1, n2) = bld.pair_uniform_to_normal(u[0], u[1])?;
            let (n3, n4) = bld.pair_uniform_to_normal(u[2], u[3])?;
            Ok([n1, n2, n3, n4])
        })?;
        tuple_of(t, py, &n)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! add {
        ($($f:ident),* $(,)?) => {
            $(m.add_function(wrap_pyfunction!($f, m)?)?;)*
        };
    }
    add!(
        atomic_add,
        atomic_max,
        atomic_min,
        atomic_and,
        atomic_or,
        atomic_xor,
        atomic_xchg,
        atomic_cas,
        randint4x,
        randint,
        rand,
        rand4x,
        randn,
        randn4x
    );
    Ok(())
}
