//! Turning Python launch arguments into kernel arguments: numpy arrays and
//! `metile.Buffer`s become buffers used in place, Python numbers become scalars.
//! Each argument also yields the part of the specialisation key it decides
//! (pointer or scalar, and the dtype).

use crate::buffer::Buffer;
use crate::device_args::{
    cuda_object_arg, is_cuda_object, stage_host, torch_tensor_arg, ArgContext, TorchMemory,
};
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
    /// An i32 that is a multiple of the given one of [`SPECIALIZED_DIVISORS`]
    /// (the kernel is specialised on it, so offsets like `row * N` are
    /// provably aligned).
    DivisibleScalar(DType, u64),
    /// An i32 equal to 1, as Triton specialises: the kernel is traced with
    /// the constant, so `offs * stride` with `stride == 1` is provably
    /// consecutive (the argument is still passed).
    One(DType),
}

/// Integer arguments that are multiples of one of these get their own
/// specialisation (the largest that divides them): 16 as Triton does, and 8,
/// which is enough for 16-byte vectors of 2-byte elements (`N = 3000` rows of
/// f16 then load and copy 16 bytes at a time).
pub const SPECIALIZED_DIVISORS: [u64; 2] = [16, 8];

impl ArgKind {
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            ArgKind::Pointer(d) => ("ptr", d.name()),
            ArgKind::Scalar(d) | ArgKind::DivisibleScalar(d, _) => ("scalar", d.name()),
            ArgKind::One(d) => ("one", d.name()),
        }
    }

    /// What the argument is known to be a multiple of (1: nothing known).
    pub fn divisibility(self) -> u64 {
        match self {
            ArgKind::DivisibleScalar(_, by) => by,
            _ => 1,
        }
    }
}

pub const SUPPORTED_DTYPES: &str =
    "bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64, float16, \
     bfloat16, float32, float64, float8_e4m3fn, float8_e5m2";

/// The meTile dtype of a numpy dtype, or a TypeError naming what is supported.
pub fn dtype_of_descr(descr: &Bound<'_, numpy::PyArrayDescr>, what: &dyn Fn() -> String) -> PyResult<DType> {
    let native = matches!(descr.byteorder(), b'=' | b'|')
        || cfg!(target_endian = "little") == (descr.byteorder() == b'<');
    let found = match (descr.kind(), descr.itemsize()) {
        (b'b', 1) => Some(DType::Bool),
        (b'i', 1) => Some(DType::I8),
        (b'u', 1) => Some(DType::U8),
        (b'i', 2) => Some(DType::I16),
        (b'u', 2) => Some(DType::U16),
        (b'i', 4) => Some(DType::I32),
        (b'u', 4) => Some(DType::U32),
        (b'i', 8) => Some(DType::I64),
        (b'u', 8) => Some(DType::U64),
        (b'f', 2) => Some(DType::F16),
        (b'f', 4) => Some(DType::F32),
        (b'f', 8) => Some(DType::F64),
        // ml_dtypes' extension types, known by name.
        (_, 2) if descr.to_string() == "bfloat16" => Some(DType::BF16),
        (_, 1) if descr.to_string() == "float8_e4m3fn" => Some(DType::F8E4M3),
        (_, 1) if descr.to_string() == "float8_e5m2" => Some(DType::F8E5M2),
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

/// A Python int is an i32 when it fits, else an i64, else a u64 (Triton's rule).
fn scalar_from_int(obj: &Bound<'_, PyAny>, what: &dyn Fn() -> String) -> PyResult<(ArgKind, KernelArg)> {
    let value: i128 = obj.extract().map_err(|_| {
        PyOverflowError::new_err(format!(
            "{} = {obj} does not fit in 64 bits, the widest integer kernel argument",
            what()
        ))
    })?;
    let Ok(v) = i32::try_from(value) else {
        return match (i64::try_from(value), u64::try_from(value)) {
            (Ok(v), _) => Ok((
                ArgKind::Scalar(DType::I64),
                KernelArg::Scalar(ScalarValue::I64(v)),
            )),
            (_, Ok(v)) => Ok((
                ArgKind::Scalar(DType::U64),
                KernelArg::Scalar(ScalarValue::U64(v)),
            )),
            _ => Err(PyOverflowError::new_err(format!(
                "{} = {value} does not fit in 64 bits, the widest integer kernel argument",
                what()
            ))),
        };
    };
    let kind = match SPECIALIZED_DIVISORS
        .iter()
        .find(|&&d| i64::from(v) % d as i64 == 0)
    {
        Some(&by) => ArgKind::DivisibleScalar(DType::I32, by),
        None if v == 1 => ArgKind::One(DType::I32),
        None => ArgKind::Scalar(DType::I32),
    };
    Ok((kind, KernelArg::Scalar(ScalarValue::I32(v))))
}

/// A host array argument: used in place, or staged on a device with memory of its own.
fn host_arg(
    arr: &Bound<'_, PyUntypedArray>,
    ctx: &mut ArgContext<'_>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    let (kind, arg) = array_arg(arr, what)?;
    Ok((kind, host_memory_arg(arr.py(), arg, ctx)?))
}

/// Host memory as a kernel argument: in place, or staged on a device with
/// memory of its own.
pub fn host_memory_arg(py: Python<'_>, arg: KernelArg, ctx: &mut ArgContext<'_>) -> PyResult<KernelArg> {
    match (ctx.memory.filter(|_| ctx.stage), arg) {
        (Some(memory), KernelArg::Buffer { ptr, len, dtype }) => {
            stage_host(py, ctx, memory, (ptr, len, dtype))
        }
        (_, arg) => Ok(arg),
    }
}

/// Converts the runtime argument for parameter `name`, whose annotation may
/// declare its dtype (`declared.rs`).
pub fn convert_arg(
    obj: &Bound<'_, PyAny>,
    name: &str,
    ctx: &mut ArgContext<'_>,
    declared: Option<DType>,
) -> PyResult<(ArgKind, KernelArg)> {
    let describe = || format!("argument '{name}'");
    let what: &dyn Fn() -> String = &describe;
    let Some(d) = declared else {
        return convert_untyped(obj, ctx, what);
    };
    if let Some(arg) = crate::declared::python_scalar(obj, d, what)? {
        return Ok(arg);
    }
    let arg = convert_untyped(obj, ctx, what)?;
    crate::declared::matches(d, arg, what)
}

fn convert_untyped(
    obj: &Bound<'_, PyAny>,
    ctx: &mut ArgContext<'_>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        if arr.ndim() == 0 {
            return numpy_scalar_arg(obj, &arr.dtype(), what);
        }
        return host_arg(arr, ctx, what);
    }
    if let Ok(buf) = obj.cast::<Buffer>() {
        if ctx.memory.is_some() && !ctx.stage {
            // Only the specialisation key is needed: no copy either way.
            return array_arg(buf.get().array.bind(obj.py()).cast::<PyUntypedArray>()?, what);
        }
        return buf
            .get()
            .kernel_arg(obj.py(), ctx.memory.map(|m| (m, ctx.device)), what);
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
    match torch_tensor_arg(obj, what)? {
        // A CUDA tensor on a host device: the error saying which device reads it.
        Some((_, _, TorchMemory::Cuda)) if ctx.memory.is_none() => return cuda_object_arg(obj, ctx, what),
        Some((kind, arg, TorchMemory::Cuda)) => return Ok((kind, arg)),
        Some((kind, arg, TorchMemory::Host)) => return Ok((kind, host_memory_arg(obj.py(), arg, ctx)?)),
        None => {}
    }
    slow_arg(obj, ctx, what)
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
        DType::I8 => ScalarValue::I8(item.extract()?),
        DType::U8 => ScalarValue::U8(item.extract()?),
        DType::I16 => ScalarValue::I16(item.extract()?),
        DType::U16 => ScalarValue::U16(item.extract()?),
        DType::I32 => ScalarValue::I32(item.extract()?),
        DType::U32 => ScalarValue::U32(item.extract()?),
        DType::I64 => ScalarValue::I64(item.extract()?),
        DType::U64 => ScalarValue::U64(item.extract()?),
        DType::F16 => ScalarValue::F16(half::f16::from_f64(item.extract()?)),
        DType::BF16 => ScalarValue::BF16(half::bf16::from_f64(item.extract::<f64>()?)),
        DType::F32 => ScalarValue::F32(item.extract::<f64>()? as f32),
        DType::F64 => ScalarValue::F64(item.extract()?),
        // An ml_dtypes fp8 scalar: its value is exact in f64, its bits are the encoding of it.
        DType::F8E4M3 => ScalarValue::F8E4M3(metile_ir::fp8::Fp8::E4M3.encode(item.extract()?)),
        DType::F8E5M2 => ScalarValue::F8E5M2(metile_ir::fp8::Fp8::E5M2.encode(item.extract()?)),
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
    } else if crate::device_args::is_torch_tensor(obj)? || is_cuda_object(obj)? {
        // CUDA memory and torch tensors have no read-only flag to honour.
        return Ok(());
    } else if crate::mlx::is_mlx_array(obj)? {
        // MLX exports its memory writable (its buffer protocol), and a store
        // is seen by MLX as numpy's writes through `np.array(a, copy=False)` are.
        return Ok(());
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
fn slow_arg(
    obj: &Bound<'_, PyAny>,
    ctx: &mut ArgContext<'_>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    let py = obj.py();
    let np = py.import("numpy")?;
    if obj.is_instance(&np.getattr("generic")?)? {
        let descr = obj.getattr("dtype")?;
        return numpy_scalar_arg(obj, descr.cast::<numpy::PyArrayDescr>()?, what);
    }
    if is_cuda_object(obj)? {
        return cuda_object_arg(obj, ctx, what);
    }
    if crate::mlx::is_mlx_array(obj)? {
        return crate::mlx::mlx_arg(obj, ctx, what);
    }
    if let Some(array) = array_view(obj)? {
        // Both conversions are views of the producer's memory, so stores reach it.
        return host_arg(array.cast::<PyUntypedArray>()?, ctx, what);
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
