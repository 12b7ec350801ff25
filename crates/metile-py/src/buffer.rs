//! `metile.Buffer`: memory that kernels and numpy share. On the CPU backends (and
//! on Apple's unified memory) a buffer is one C-contiguous numpy array used in
//! place, so `numpy()` is a view, not a copy.
//!
//! On a device with memory of its own (cuda) the buffer also owns a device
//! allocation, made at its first launch there. Launches use it in place; the
//! host array is refreshed from it only when Python reads the buffer
//! (`numpy()`, `__array__`, a launch on a CPU backend), which waits for the
//! kernels writing it. Handing out the host view may let Python change it, so the
//! next launch uploads it again: alternate kernel launches with `numpy()` calls
//! and every call pays a round trip over PCIe.

use crate::args::{array_arg, dtype_of_descr, ArgKind};
use metile_interp::KernelArg;
use metile_runtime::{DeviceAllocation, DeviceMemory};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::sync::{Arc, Mutex};

#[pyclass(module = "metile._metile", name = "Buffer", frozen)]
pub struct Buffer {
    pub array: Py<PyAny>,
    device: Mutex<Option<DeviceCopy>>,
}

/// Which of the two copies holds the buffer's current contents.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Current {
    Both,
    /// Kernels may have written the device copy since the last download.
    Device,
    /// Python may have written the host array since the last upload.
    Host,
}

struct DeviceCopy {
    alloc: Arc<dyn DeviceAllocation>,
    /// The device that owns the allocation (kept for downloads).
    device: Arc<dyn metile_runtime::Device>,
    current: Current,
}

fn runtime_err(e: metile_runtime::RuntimeError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// numpy's name for a meTile dtype string (`"f32"`, `"float32"`, `np.float32`, ...).
fn numpy_dtype<'py>(py: Python<'py>, dtype: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    let Some(dtype) = dtype else {
        return np.getattr("float32");
    };
    if let Ok(name) = dtype.extract::<String>() {
        if let Some(d) = metile_ir::DType::parse(&name) {
            use metile_ir::DType;
            let numpy_name = match d {
                DType::Bool => "bool_",
                DType::I8 => "int8",
                DType::U8 => "uint8",
                DType::I16 => "int16",
                DType::U16 => "uint16",
                DType::I32 => "int32",
                DType::U32 => "uint32",
                DType::I64 => "int64",
                DType::U64 => "uint64",
                DType::F16 => "float16",
                DType::F32 => "float32",
                DType::F64 => "float64",
                DType::BF16 | DType::F8E4M3 | DType::F8E5M2 => {
                    let name = match d {
                        DType::BF16 => "bfloat16",
                        DType::F8E4M3 => "float8_e4m3fn",
                        _ => "float8_e5m2",
                    };
                    return py.import("ml_dtypes").and_then(|m| m.getattr(name)).map_err(|_| {
                        PyTypeError::new_err(format!(
                            "{name} buffers need the ml_dtypes package (numpy has no {name}); without it, \
                             pass uint8 storage to a kernel parameter annotated with the fp8 dtype"
                        ))
                    });
                }
            };
            return np.getattr(numpy_name);
        }
    }
    np.call_method1("dtype", (dtype,))
}

impl Buffer {
    fn wrap(array: Bound<'_, PyAny>) -> PyResult<Buffer> {
        let arr = array.cast::<PyUntypedArray>()?;
        dtype_of_descr(&arr.dtype(), &|| "the buffer's data".to_string())?;
        Ok(Buffer {
            array: array.unbind(),
            device: Mutex::new(None),
        })
    }

    fn host_array<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyUntypedArray>, *mut u8, usize)> {
        let arr = self.array.bind(py).cast::<PyUntypedArray>()?.clone();
        let bytes = arr.len() * arr.dtype().itemsize();
        // SAFETY: a live C-contiguous array (the constructor made it so).
        let ptr = unsafe { (*arr.as_array_ptr()).fields.data } as *mut u8;
        Ok((arr, ptr, bytes))
    }

    /// Brings the host array up to date; `handing_out` marks it as possibly
    /// changed by Python afterwards.
    fn sync_to_host(&self, py: Python<'_>, handing_out: bool) -> PyResult<()> {
        let mut guard = self
            .device
            .lock()
            .map_err(|_| PyRuntimeError::new_err("buffer state poisoned"))?;
        let Some(copy) = guard.as_mut() else {
            return Ok(());
        };
        if copy.current == Current::Device {
            let (_arr, ptr, bytes) = self.host_array(py)?;
            let memory = copy
                .device
                .memory()
                .ok_or_else(|| PyRuntimeError::new_err("the buffer's device has no memory of its own"))?;
            let src = copy.alloc.ptr();
            let (ptr, bytes) = (ptr as usize, bytes);
            let device = &copy.device;
            // Kernels that wrote it may be queued on any stream (a framework's,
            // `placement.rs`), not only on the one the copy goes on: wait for all.
            // SAFETY: the host array has `bytes` bytes and stays alive (self holds
            // it); the allocation was made with the same size.
            py.detach(|| {
                device
                    .synchronize()
                    .and_then(|()| unsafe { memory.download(src, ptr as *mut u8, bytes) })
            })
            .map_err(runtime_err)?;
            copy.current = Current::Both;
        }
        if handing_out {
            copy.current = Current::Host;
        }
        Ok(())
    }

    /// The buffer as a kernel argument on the launch's device (with its memory,
    /// where it has memory of its own). A device copy on another GPU comes back
    /// to the host first and moves.
    pub fn kernel_arg(
        &self,
        py: Python<'_>,
        on_device: Option<(&dyn DeviceMemory, &Arc<dyn metile_runtime::Device>)>,
        what: &dyn Fn() -> String,
    ) -> PyResult<(ArgKind, KernelArg)> {
        let Some((memory, device)) = on_device else {
            // A host launch reads and may write the host array.
            self.sync_to_host(py, true)?;
            return array_arg(self.array.bind(py).cast::<PyUntypedArray>()?, what);
        };
        let (arr, ptr, bytes) = self.host_array(py)?;
        let (kind, _) = array_arg(&arr, what)?;
        let ArgKind::Pointer(dtype) = kind else {
            return Err(PyTypeError::new_err("a buffer is not a scalar"));
        };
        let elsewhere = self
            .device
            .lock()
            .map_err(|_| PyRuntimeError::new_err("buffer state poisoned"))?
            .as_ref()
            .is_some_and(|c| c.device.name() != device.name() || c.device.ordinal() != device.ordinal());
        if elsewhere {
            self.sync_to_host(py, true)?;
            if let Ok(mut guard) = self.device.lock() {
                *guard = None;
            }
        }
        let mut guard = self
            .device
            .lock()
            .map_err(|_| PyRuntimeError::new_err("buffer state poisoned"))?;
        if guard.is_none() {
            let alloc = memory.alloc(bytes).map_err(runtime_err)?;
            *guard = Some(DeviceCopy {
                alloc,
                device: device.clone(),
                current: Current::Host,
            });
        }
        let copy = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("no device copy"))?;
        if copy.current == Current::Host {
            // SAFETY: the host array has `bytes` bytes; so has the allocation.
            unsafe { memory.upload(copy.alloc.ptr(), ptr, bytes) }.map_err(runtime_err)?;
        }
        copy.current = Current::Device;
        Ok((
            kind,
            KernelArg::Buffer {
                ptr: copy.alloc.ptr() as *mut u8,
                len: arr.len(),
                dtype,
            },
        ))
    }
}

#[pymethods]
impl Buffer {
    /// `Buffer(data=array)`: wraps a numpy array without copying when it is
    /// C-contiguous (a strided array is copied into contiguous memory first).
    #[new]
    #[pyo3(signature = (data=None, *, shape=None, dtype=None))]
    fn new(
        py: Python<'_>,
        data: Option<&Bound<'_, PyAny>>,
        shape: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Buffer> {
        let np = py.import("numpy")?;
        match (data, shape) {
            (Some(data), None) => {
                if !data.is_instance(&np.getattr("ndarray")?)? {
                    return Err(PyTypeError::new_err(format!(
                        "Buffer(data=...) needs a numpy array, got {}",
                        data.get_type().name()?
                    )));
                }
                let data = match dtype {
                    Some(d) => data.call_method1("astype", (numpy_dtype(py, Some(d))?,))?,
                    None => data.clone(),
                };
                Buffer::wrap(np.call_method1("ascontiguousarray", (data,))?)
            }
            (None, Some(shape)) => Buffer::zeros(py, shape, dtype),
            (Some(_), Some(_)) => Err(PyTypeError::new_err("Buffer takes data= or shape=, not both")),
            (None, None) => Err(PyTypeError::new_err(
                "Buffer needs data=array (or use Buffer.zeros(shape))",
            )),
        }
    }

    /// A zero-filled buffer; float32 unless `dtype` says otherwise. In the
    /// current device's shared memory where it has some (see `shared_buffer`).
    #[staticmethod]
    #[pyo3(signature = (shape, dtype=None))]
    fn zeros(py: Python<'_>, shape: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Buffer> {
        let np = py.import("numpy")?;
        let dtype = numpy_dtype(py, dtype)?;
        match crate::shared_buffer::shared_zeros(py, shape, &dtype)? {
            Some(shared) => Buffer::wrap(shared),
            None => Buffer::wrap(np.call_method1("zeros", (shape, dtype))?),
        }
    }

    /// The same as `Buffer(data=array)`.
    #[staticmethod]
    fn from_numpy(py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<Buffer> {
        Buffer::new(py, Some(array), None, None)
    }

    /// The buffer's memory as a numpy array (a view: writes go both ways; on
    /// cuda, the host copy brought up to date first).
    fn numpy(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.sync_to_host(py, true)?;
        Ok(self.array.clone_ref(py))
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let arr = self.array.bind(py).cast::<PyUntypedArray>()?;
        PyTuple::new(py, arr.shape())
    }

    #[getter]
    fn dtype(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.array.bind(py).getattr("dtype")?.unbind())
    }

    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.array.bind(py).cast::<PyUntypedArray>()?.len())
    }

    #[getter]
    fn nbytes(&self, py: Python<'_>) -> PyResult<usize> {
        self.array.bind(py).getattr("nbytes")?.extract()
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.array.bind(py).len()
    }

    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__(
        &self,
        py: Python<'_>,
        dtype: Option<&Bound<'_, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        self.sync_to_host(py, true)?;
        let arr = self.array.bind(py);
        let out = match (dtype, copy) {
            (Some(d), _) => arr.call_method1("astype", (d,))?,
            (None, Some(true)) => arr.call_method0("copy")?,
            _ => arr.clone(),
        };
        Ok(out.unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let arr = self.array.bind(py);
        Ok(format!(
            "metile.Buffer(shape={}, dtype={})",
            arr.getattr("shape")?.repr()?,
            arr.getattr("dtype")?.str()?
        ))
    }
}
