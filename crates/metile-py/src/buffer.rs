//! `metile.Buffer`: memory that kernels and numpy share. On the CPU backends (and
//! on Apple's unified memory) a buffer is one C-contiguous numpy array used in
//! place, so `numpy()` is a view, not a copy.

use crate::args::dtype_of_descr;
use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

#[pyclass(module = "metile._metile", name = "Buffer", frozen)]
pub struct Buffer {
    pub array: Py<PyAny>,
}

/// numpy's name for a meTile dtype string (`"f32"`, `"float32"`, `np.float32`, ...).
fn numpy_dtype<'py>(py: Python<'py>, dtype: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
    let np = py.import("numpy")?;
    let Some(dtype) = dtype else {
        return np.getattr("float32");
    };
    if let Ok(name) = dtype.extract::<String>() {
        if let Some(d) = metile_ir::DType::parse(&name) {
            let numpy_name = match d {
                metile_ir::DType::Bool => "bool_",
                metile_ir::DType::I32 => "int32",
                metile_ir::DType::U32 => "uint32",
                metile_ir::DType::I64 => "int64",
                metile_ir::DType::F16 => "float16",
                metile_ir::DType::F32 => "float32",
                metile_ir::DType::BF16 => {
                    return py
                        .import("ml_dtypes")
                        .and_then(|m| m.getattr("bfloat16"))
                        .map_err(|_| {
                            PyTypeError::new_err(
                                "bfloat16 buffers need the ml_dtypes package (numpy has no bfloat16)",
                            )
                        })
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
        })
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

    /// The buffer's memory as a numpy array (a view: writes go both ways).
    fn numpy(&self, py: Python<'_>) -> Py<PyAny> {
        self.array.clone_ref(py)
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
