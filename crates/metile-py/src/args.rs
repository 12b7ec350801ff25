//! Turning Python launch arguments into kernel arguments: numpy arrays and
//! `metile.Buffer`s become buffers used in place, Python numbers become scalars.
//! Each argument also yields the part of the specialisation key it decides
//! (pointer or scalar, and the dtype).

use crate::buffer::Buffer;
use metile_interp::{KernelArg, ScalarValue};
use metile_ir::DType;
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

/// How an argument is passed; part of the specialisation key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    Pointer(DType),
    Scalar(DType),
}

impl ArgKind {
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            ArgKind::Pointer(d) => ("ptr", d.name()),
            ArgKind::Scalar(d) => ("scalar", d.name()),
        }
    }
}

pub const SUPPORTED_DTYPES: &str = "bool, int32, uint32, int64, float16, bfloat16, float32";

/// The meTile dtype of a numpy dtype, or a TypeError naming what is supported.
pub fn dtype_of_descr(descr: &Bound<'_, numpy::PyArrayDescr>, what: &dyn Fn() -> String) -> PyResult<DType> {
    let native = matches!(descr.byteorder(), b'=' | b'|')
        || cfg!(target_endian = "little") == (descr.byteorder() == b'<');
    let found = match (descr.kind(), descr.itemsize()) {
        (b'b', 1) => Some(DType::Bool),
        (b'i', 4) => Some(DType::I32),
        (b'u', 4) => Some(DType::U32),
        (b'i', 8) => Some(DType::I64),
        (b'f', 2) => Some(DType::F16),
        (b'f', 4) => Some(DType::F32),
        (_, 2) if descr.to_string() == "bfloat16" => Some(DType::BF16),
        _ => None,
    };
    match found {
        Some(d) if native => Ok(d),
        Some(_) => Err(PyTypeError::new_err(format!(
            "{} has a non-native byte order ({descr}); convert it with .astype(dtype.newbyteorder('='))",
            what()
        ))),
        None => Err(PyTypeError::new_err(format!(
            "{} has dtype {descr}, which meTile does not support; supported dtypes: {SUPPORTED_DTYPES}",
            what()
        ))),
    }
}

/// A C-contiguous numpy array of a supported dtype, as a kernel buffer.
pub fn array_arg(
    arr: &Bound<'_, PyUntypedArray>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    let dtype = dtype_of_descr(&arr.dtype(), what)?;
    if !arr.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{} is a non-contiguous array (shape {:?}, strides {:?}); kernels address memory linearly, \
             so pass np.ascontiguousarray(...) instead",
            what(),
            arr.shape(),
            arr.strides()
        )));
    }
    // SAFETY: `arr` is a live numpy array; `data` and the element count describe its memory.
    let ptr = unsafe { (*arr.as_array_ptr()).fields.data } as *mut u8;
    Ok((
        ArgKind::Pointer(dtype),
        KernelArg::Buffer {
            ptr,
            len: arr.len(),
            dtype,
        },
    ))
}

fn scalar_from_int(obj: &Bound<'_, PyAny>, what: &dyn Fn() -> String) -> PyResult<(ArgKind, KernelArg)> {
    let value: i64 = obj.extract()?;
    let v = i32::try_from(value).map_err(|_| {
        PyOverflowError::new_err(format!(
            "{} = {value} does not fit in a 32-bit int, the type of integer kernel arguments",
            what()
        ))
    })?;
    Ok((
        ArgKind::Scalar(DType::I32),
        KernelArg::Scalar(ScalarValue::I32(v)),
    ))
}

/// Converts the runtime argument for parameter `name`.
pub fn convert_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<(ArgKind, KernelArg)> {
    let describe = || format!("argument '{name}'");
    let what: &dyn Fn() -> String = &describe;
    if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        if arr.ndim() == 0 {
            return numpy_scalar_arg(obj, &arr.dtype(), what);
        }
        return array_arg(arr, what);
    }
    if let Ok(buf) = obj.cast::<Buffer>() {
        let array = buf.get().array.bind(obj.py());
        return array_arg(array.cast::<PyUntypedArray>()?, what);
    }
    if obj.is_instance_of::<PyBool>() {
        let b: bool = obj.extract()?;
        return Ok((
            ArgKind::Scalar(DType::Bool),
            KernelArg::Scalar(ScalarValue::Bool(b)),
        ));
    }
    if obj.is_instance_of::<PyInt>() {
        return scalar_from_int(obj, what);
    }
    if obj.is_instance_of::<PyFloat>() {
        let x: f64 = obj.extract()?;
        return Ok((
            ArgKind::Scalar(DType::F32),
            KernelArg::Scalar(ScalarValue::F32(x as f32)),
        ));
    }
    slow_arg(obj, what)
}

fn numpy_scalar_arg(
    obj: &Bound<'_, PyAny>,
    descr: &Bound<'_, numpy::PyArrayDescr>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    let d = dtype_of_descr(descr, what)?;
    let item = obj.call_method0("item")?;
    let s = match d {
        DType::Bool => ScalarValue::Bool(item.extract()?),
        DType::I32 => ScalarValue::I32(item.extract()?),
        DType::U32 => ScalarValue::U32(item.extract()?),
        DType::I64 => ScalarValue::I64(item.extract()?),
        DType::F16 => ScalarValue::F16(half::f16::from_f64(item.extract()?)),
        DType::BF16 => ScalarValue::BF16(half::bf16::from_f64(item.extract::<f64>()?)),
        DType::F32 => ScalarValue::F32(item.extract::<f64>()? as f32),
    };
    Ok((ArgKind::Scalar(d), KernelArg::Scalar(s)))
}

/// Refuses a read-only array for a parameter the kernel stores through: numpy's
/// contract is that such an array never changes.
pub fn ensure_writable(obj: &Bound<'_, PyAny>, name: &str, kernel: &str) -> PyResult<()> {
    let array = if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        arr.clone()
    } else if let Ok(buf) = obj.cast::<Buffer>() {
        buf.get().array.bind(obj.py()).cast::<PyUntypedArray>()?.clone()
    } else if let Some(view) = array_view(obj)? {
        view.cast_into::<PyUntypedArray>()?
    } else {
        return Ok(());
    };
    // SAFETY: `array` is a live numpy array.
    let flags = unsafe { (*array.as_array_ptr()).fields.flags };
    if flags & numpy::npyffi::NPY_ARRAY_WRITEABLE != 0 {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "argument '{name}' is read-only (its writeable flag is False), but kernel {kernel} stores through \
         it; pass a writable array, e.g. a copy"
    )))
}

/// The numpy view of a DLPack or `__array_interface__` producer (None for other objects).
fn array_view<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    let np = obj.py().import("numpy")?;
    Ok(if obj.hasattr("__dlpack__")? {
        Some(np.call_method1("from_dlpack", (obj,))?)
    } else if obj.hasattr("__array_interface__")? {
        Some(np.call_method1("asarray", (obj,))?)
    } else {
        None
    })
}

/// numpy scalars, DLPack producers and other array-likes; refuses the rest.
fn slow_arg(obj: &Bound<'_, PyAny>, what: &dyn Fn() -> String) -> PyResult<(ArgKind, KernelArg)> {
    let py = obj.py();
    let np = py.import("numpy")?;
    if obj.is_instance(&np.getattr("generic")?)? {
        let descr = obj.getattr("dtype")?;
        return numpy_scalar_arg(obj, descr.cast::<numpy::PyArrayDescr>()?, what);
    }
    if let Some(array) = array_view(obj)? {
        // Both conversions are views of the producer's memory, so stores reach it.
        return array_arg(array.cast::<PyUntypedArray>()?, what);
    }
    let type_name = obj.get_type().name()?;
    let hint = if obj.is_instance_of::<pyo3::types::PyList>() || obj.is_instance_of::<pyo3::types::PyTuple>()
    {
        " (a kernel writes through its buffers, so a copy of a list would lose the results)"
    } else {
        ""
    };
    Err(PyTypeError::new_err(format!(
        "{} of type {type_name} cannot be passed to a kernel{hint}; pass a numpy array, a metile.Buffer, \
         an int or a float",
        what()
    )))
}
