//! `metile.Buffer.zeros` on a device with shared memory (metal: an MTLBuffer
//! with shared storage; msl-emu: page-aligned host pages, as on Metal): the
//! buffer's array is a numpy view of the device allocation, which the view
//! keeps alive. `Buffer(data=array)` is unaffected: it wraps the caller's
//! array, so both see every write (the memory model's promise).

use crate::device_state::{current_device, runtime_error_to_py};
use metile_runtime::shared_memory::SharedMemory;
use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::sync::Arc;

/// A device allocation seen by numpy as bytes (`__array_interface__`); the
/// arrays made from it keep it, and so the allocation, alive.
#[pyclass(module = "metile._metile", name = "SharedBytes", frozen)]
struct SharedBytes {
    memory: Arc<dyn SharedMemory>,
}

#[pymethods]
impl SharedBytes {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let interface = PyDict::new(py);
        interface.set_item("shape", (self.memory.len(),))?;
        interface.set_item("typestr", "|u1")?;
        interface.set_item("data", (self.memory.as_ptr() as usize, false))?;
        interface.set_item("version", 3)?;
        Ok(interface)
    }
}

/// A zero-filled array of `shape` and numpy `dtype` in the current device's
/// shared memory, or `None` where the device has none.
pub fn shared_zeros<'py>(
    py: Python<'py>,
    shape: &Bound<'py, PyAny>,
    dtype: &Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let np = py.import("numpy")?;
    let itemsize: usize = np
        .call_method1("dtype", (dtype,))?
        .getattr("itemsize")?
        .extract()?;
    let dims: Vec<usize> = match shape.extract::<usize>() {
        Ok(n) => vec![n],
        Err(_) => shape.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "a buffer's shape must be a non-negative int or a tuple of them, got {}",
                shape.repr().map_or_else(|_| "?".to_string(), |r| r.to_string())
            ))
        })?,
    };
    let bytes = dims
        .iter()
        .try_fold(itemsize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| PyOverflowError::new_err(format!("a buffer of shape {dims:?} is too large")))?;
    let device = current_device(py)?;
    let Some(allocated) = py.detach(|| device.allocate_shared(bytes)) else {
        return Ok(None);
    };
    let memory = allocated.map_err(|e| runtime_error_to_py(py, e))?;
    let raw = np.call_method1("asarray", (Bound::new(py, SharedBytes { memory })?,))?;
    let typed = raw
        .call_method1("view", (dtype,))?
        .call_method1("reshape", (PyTuple::new(py, dims)?,))?;
    Ok(Some(typed))
}
