//! `metile.simdgroup_role`: a region of the kernel that only some of the
//! threadgroup's simdgroups run (producer/consumer specialisation).

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::prelude::*;

use super::state::{describe_object, discard_region, with_trace, ClosedBlock, Trace};

/// `with metile.simdgroup_role(role=0, num_roles=2): ...`: the block runs only
/// on the simdgroups of `role`.
#[pyclass(module = "metile._metile", name = "SimdgroupRole", frozen)]
pub struct SimdgroupRole {
    role: u32,
    num_roles: u32,
    /// The builder's depth inside the region, set by `__enter__`.
    depth: AtomicUsize,
}

#[pymethods]
impl SimdgroupRole {
    fn __enter__(&self, py: Python<'_>) -> PyResult<()> {
        with_trace(py, "metile.simdgroup_role()", |t| {
            t.push_region(&[]);
            self.depth.store(t.builder.depth(), Ordering::Relaxed);
            Ok(())
        })
    }

    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        with_trace(py, "metile.simdgroup_role()", |t| {
            if t.builder.depth() != self.depth.load(Ordering::Relaxed) {
                return Err(t.error(py, "internal: a region was left open inside simdgroup_role"));
            }
            if exc_type.is_some_and(|e| !e.is_none()) {
                t.pop_region(py)?;
                return Ok(false);
            }
            close_role(t, py, self.role, self.num_roles)?;
            Ok(false)
        })
    }
}

fn close_role(t: &mut Trace, py: Python<'_>, role: u32, num_roles: u32) -> PyResult<()> {
    t.builder.yield_values(&[]);
    let ClosedBlock { block, .. } = t.pop_region(py)?;
    t.ir(py, |bld| bld.finish_simdgroup_role(role, num_roles, block))
}

/// `simdgroup_role(role, num_roles, body=None, num_sgs=0)`: with `body`, runs
/// it inside the role's region; without, returns a context manager.
#[pyfunction]
#[pyo3(signature = (role, num_roles, body=None, num_sgs=None))]
pub fn simdgroup_role(
    py: Python<'_>,
    role: &Bound<'_, PyAny>,
    num_roles: &Bound<'_, PyAny>,
    body: Option<&Bound<'_, PyAny>>,
    num_sgs: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let (role, num_roles) = with_trace(py, "metile.simdgroup_role()", |t| {
        let role = t.static_int(role, "simdgroup_role's role")?;
        let num_roles = t.static_int(num_roles, "simdgroup_role's num_roles")?;
        if let Some(n) = num_sgs.filter(|n| !n.is_none()) {
            if t.static_int(n, "simdgroup_role's num_sgs")? != 0 {
                return Err(t.error(
                    py,
                    "simdgroup_role: num_sgs (a fixed number of simdgroups for this role) is not \
                     supported; leave it 0 to split the threadgroup's simdgroups evenly between the roles",
                ));
            }
        }
        if num_roles < 1 || !(0..num_roles).contains(&role) || num_roles > i64::from(u32::MAX) {
            return Err(t.error(
                py,
                &format!(
                    "simdgroup_role: role must be in [0, num_roles), got role={role}, num_roles={num_roles}"
                ),
            ));
        }
        Ok((role as u32, num_roles as u32))
    })?;
    let Some(body) = body.filter(|b| !b.is_none()) else {
        let ctx = SimdgroupRole {
            role,
            num_roles,
            depth: AtomicUsize::new(0),
        };
        return Ok(Py::new(py, ctx)?.into_any());
    };
    with_trace(py, "metile.simdgroup_role()", |t| {
        t.push_region(&[]);
        Ok(())
    })?;
    if let Err(e) = body.call0() {
        discard_region(py);
        return Err(e);
    }
    with_trace(py, "metile.simdgroup_role()", |t| {
        close_role(t, py, role, num_roles)
    })?;
    Ok(py.None())
}

/// What a kernel's `with` statement enters (the rewrite wraps each context
/// expression in it): `metile.simdgroup_role(...)`, the one context manager with
/// a meaning in a kernel; anything else would run at trace time, and is refused.
#[pyfunction]
pub fn kernel_context<'py>(py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if value.cast::<SimdgroupRole>().is_ok() {
        return Ok(value.clone());
    }
    with_trace(py, "a kernel's `with` statement", |t| {
        Err(t.error(
            py,
            &format!(
                "`with` on {} is not supported in a kernel: a context manager would run when the \
                 kernel is traced, not when it runs; the one context manager of a kernel is \
                 metile.simdgroup_role(...)",
                describe_object(value)
            ),
        ))
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SimdgroupRole>()?;
    m.add_function(wrap_pyfunction!(kernel_context, m)?)?;
    m.add_function(wrap_pyfunction!(simdgroup_role, m)?)?;
    Ok(())
}
