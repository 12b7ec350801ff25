//! Launch arguments for a device with memory of its own (cuda).
//!
//! * CUDA tensors (torch, CuPy, ...), through DLPack (`__dlpack__` with a CUDA
//!   `__dlpack_device__`) or `__cuda_array_interface__`, are used in place: the
//!   kernel gets their device address.
//! * numpy arrays are copied to a fresh device allocation before the launch and,
//!   when the kernel stores through them, copied back after it (which waits for
//!   the kernel). This costs two trips over PCIe, so the first time it happens a
//!   `metile.MetileWarning` says so; `metile.Buffer` or a CUDA tensor avoids it.
//! * `metile.Buffer` keeps a device copy of its own (see `buffer.rs`).
//!
//! On a device without memory of its own, a CUDA tensor is refused with a
//! message naming the device to switch to.

use crate::args::{dtype_of_descr, ArgKind, SUPPORTED_DTYPES};
use metile_interp::KernelArg;
use metile_ir::DType;
use metile_runtime::{Device, DeviceAllocation, DeviceMemory};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict, PyType};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A host array copied to the device for one launch.
pub struct Staged {
    /// The argument's position among the kernel's runtime arguments.
    pub index: usize,
    host: *mut u8,
    bytes: usize,
    alloc: Arc<dyn DeviceAllocation>,
}

/// Per-launch state of argument conversion.
pub struct ArgContext<'d> {
    /// The device the launch runs on.
    pub device: &'d Arc<dyn Device>,
    /// Its memory, where kernels cannot read host memory.
    pub memory: Option<&'d dyn DeviceMemory>,
    pub device_name: &'static str,
    /// Whether host arrays are staged (a launch) or only classified (`warmup`).
    pub stage: bool,
    pub staged: Vec<Staged>,
    /// The runtime argument being converted.
    pub index: usize,
    /// The stream the launch goes on (`metile_runtime::stream`), for DLPack
    /// producers to order their pending work before.
    pub stream: Option<u64>,
}

static STAGING_WARNED: AtomicBool = AtomicBool::new(false);

fn runtime_err(e: metile_runtime::RuntimeError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// Copies the host array at `ptr` to the device and records it for the copy back.
pub fn stage_host(
    py: Python<'_>,
    ctx: &mut ArgContext<'_>,
    memory: &dyn DeviceMemory,
    (ptr, len, dtype): (*mut u8, usize, DType),
) -> PyResult<KernelArg> {
    if !STAGING_WARNED.swap(true, Ordering::Relaxed) {
        crate::errors::warn(
            py,
            &format!(
                "numpy arrays passed to a {} kernel are copied to the GPU and back on every launch; \
                 use metile.Buffer or a CUDA tensor (torch, CuPy) to keep data on the GPU",
                ctx.device_name
            ),
            1,
        )?;
    }
    let bytes = len * dtype.size_bytes();
    let alloc = memory.alloc(bytes).map_err(runtime_err)?;
    // SAFETY: `ptr` is a live C-contiguous array of `bytes` bytes; the
    // allocation has `bytes` bytes.
    unsafe { memory.upload(alloc.ptr(), ptr, bytes) }.map_err(runtime_err)?;
    let arg = KernelArg::Buffer {
        ptr: alloc.ptr() as *mut u8,
        len,
        dtype,
    };
    ctx.staged.push(Staged {
        index: ctx.index,
        host: ptr,
        bytes,
        alloc,
    });
    Ok(arg)
}

/// Copies the staged arrays the kernel stores through (`written`: positions
/// among the runtime arguments) back to the host.
pub fn copy_back(
    memory: &dyn DeviceMemory,
    staged: &[Staged],
    written: &[usize],
) -> Result<(), metile_runtime::RuntimeError> {
    for s in staged.iter().filter(|s| written.contains(&s.index)) {
        // SAFETY: `host` is the live array staged for this launch (its owner is
        // an argument of the launching call); the allocation has `bytes` bytes.
        unsafe { memory.download(s.alloc.ptr(), s.host, s.bytes) }?;
    }
    Ok(())
}

/// `len` elements of `dtype` at device address `address`, as a kernel argument.
fn device_buffer(address: u64, len: usize, dtype: DType) -> (ArgKind, KernelArg) {
    let arg = KernelArg::Buffer {
        ptr: address as *mut u8,
        len,
        dtype,
    };
    (ArgKind::Pointer(dtype), arg)
}

pub const DLPACK_CUDA: i64 = 2;
const DLPACK_CUDA_MANAGED: i64 = 13;

/// `(device_type, device_id)` of a DLPack producer, if it has one.
pub fn dlpack_device(obj: &Bound<'_, PyAny>) -> PyResult<Option<(i64, i64)>> {
    if !obj.hasattr("__dlpack_device__")? {
        return Ok(None);
    }
    Ok(Some(obj.call_method0("__dlpack_device__")?.extract()?))
}

/// Whether `obj` lives in CUDA memory (DLPack CUDA device or a CUDA array interface).
pub fn is_cuda_object(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Some((ty, _)) = dlpack_device(obj)? {
        return Ok(ty == DLPACK_CUDA || ty == DLPACK_CUDA_MANAGED);
    }
    obj.hasattr("__cuda_array_interface__")
}

/// What a non-contiguous tensor is called, and what to pass instead.
pub struct TensorKind {
    pub name: &'static str,
    pub contiguous_copy: &'static str,
}

pub const CUDA_TENSOR: TensorKind = TensorKind {
    name: "CUDA tensor",
    contiguous_copy: ".contiguous()",
};

/// The C-contiguity check both protocols share: `strides` in elements.
fn check_contiguous(
    shape: &[i64],
    strides: Option<&[i64]>,
    kind: &TensorKind,
    what: &dyn Fn() -> String,
) -> PyResult<()> {
    let Some(strides) = strides else {
        return Ok(());
    };
    let mut expected = 1i64;
    for (&n, &s) in shape.iter().zip(strides).rev() {
        if n != 1 && s != expected {
            return Err(PyValueError::new_err(format!(
                "{} is a non-contiguous {} (shape {shape:?}, strides {strides:?} in elements); \
                 kernels address memory linearly, so pass {} instead",
                what(),
                kind.name,
                kind.contiguous_copy
            )));
        }
        expected *= n;
    }
    Ok(())
}

fn dtype_from_dlpack(code: u8, bits: u8, lanes: u16, what: &dyn Fn() -> String) -> PyResult<DType> {
    let d = match (code, bits, lanes) {
        (0, 8, 1) => Some(DType::I8),
        (0, 16, 1) => Some(DType::I16),
        (0, 32, 1) => Some(DType::I32),
        (0, 64, 1) => Some(DType::I64),
        (1, 8, 1) => Some(DType::U8),
        (1, 16, 1) => Some(DType::U16),
        (1, 32, 1) => Some(DType::U32),
        (1, 64, 1) => Some(DType::U64),
        (2, 16, 1) => Some(DType::F16),
        (2, 32, 1) => Some(DType::F32),
        (2, 64, 1) => Some(DType::F64),
        (4, 16, 1) => Some(DType::BF16),
        // DLPack's kDLFloat8_e4m3fn and kDLFloat8_e5m2.
        (10, 8, 1) => Some(DType::F8E4M3),
        (12, 8, 1) => Some(DType::F8E5M2),
        (6, 8, 1) | (1, 1, 1) => Some(DType::Bool),
        _ => None,
    };
    d.ok_or_else(|| {
        PyTypeError::new_err(format!(
            "{} has DLPack dtype (code {code}, {bits} bits, {lanes} lanes), which meTile does not support; \
             supported dtypes: {SUPPORTED_DTYPES}",
            what()
        ))
    })
}

/// The DLPack tensor header (DLPack 0.x `DLTensor`, the first field of `DLManagedTensor`).
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device_type: i32,
    device_id: i32,
    ndim: i32,
    dtype_code: u8,
    dtype_bits: u8,
    dtype_lanes: u16,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// A DLPack producer's memory: its address, element count and dtype, and its
/// DLPack device type.
pub struct DlpackMemory {
    pub address: u64,
    pub len: usize,
    pub dtype: DType,
    pub device_type: i32,
}

/// Reads the DLPack tensor `obj` exports (`stream`: the consumer's stream
/// argument, `None` for host memory); `kind` names it in errors.
pub fn read_dlpack(
    obj: &Bound<'_, PyAny>,
    stream: Option<u64>,
    kind: &TensorKind,
    what: &dyn Fn() -> String,
) -> PyResult<DlpackMemory> {
    let py = obj.py();
    let capsule = match stream {
        Some(stream) => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("stream", stream)?;
            obj.call_method("__dlpack__", (), Some(&kwargs))?
        }
        None => obj.call_method0("__dlpack__")?,
    };
    let capsule = capsule.cast::<PyCapsule>()?;
    let header = capsule.pointer_checked(Some(c"dltensor"))?;
    // SAFETY: a "dltensor" capsule points at a DLManagedTensor, whose first field
    // is the DLTensor; the capsule (and so the tensor) is alive here.
    let t = unsafe { &*header.as_ptr().cast::<DlTensor>() };
    let ndim = usize::try_from(t.ndim).unwrap_or(0);
    // SAFETY: `shape` has `ndim` entries; `strides` too when non-null.
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let strides = (!t.strides.is_null() && ndim > 0)
        // SAFETY: as above.
        .then(|| unsafe { std::slice::from_raw_parts(t.strides, ndim) });
    check_contiguous(shape, strides, kind, what)?;
    let dtype = dtype_from_dlpack(t.dtype_code, t.dtype_bits, t.dtype_lanes, what)?;
    let len = shape.iter().map(|&n| n.max(0) as usize).product::<usize>();
    let address = (t.data as u64).wrapping_add(t.byte_offset);
    // Dropping the unconsumed capsule returns the producer's reference; the
    // tensor itself stays alive as an argument of the launching call.
    Ok(DlpackMemory {
        address,
        len,
        dtype,
        device_type: t.device_type,
    })
}

fn dlpack_arg(
    obj: &Bound<'_, PyAny>,
    stream: Option<u64>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    // The producer orders its pending work before the launch's stream. DLPack
    // names the legacy default stream 1 (its handle, 0, is refused there).
    let consumer = match stream {
        Some(s) if s != 0 => s,
        _ => 1,
    };
    let m = read_dlpack(obj, Some(consumer), &CUDA_TENSOR, what)?;
    Ok(device_buffer(m.address, m.len, m.dtype))
}

fn cuda_array_interface_arg(
    obj: &Bound<'_, PyAny>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    let py = obj.py();
    let cai = obj.getattr("__cuda_array_interface__")?;
    let (address, _readonly): (u64, bool) = cai.get_item("data")?.extract()?;
    let shape: Vec<i64> = cai.get_item("shape")?.extract()?;
    let typestr: String = cai.get_item("typestr")?.extract()?;
    let descr = py.import("numpy")?.call_method1("dtype", (typestr.as_str(),))?;
    let dtype = dtype_of_descr(descr.cast::<numpy::PyArrayDescr>()?, what)?;
    let strides = cai.get_item("strides").ok().filter(|s| !s.is_none());
    if let Some(strides) = strides {
        let bytes: Vec<i64> = strides.extract()?;
        let size = dtype.size_bytes() as i64;
        let elems: Vec<i64> = bytes.iter().map(|b| b / size).collect();
        if bytes.iter().any(|b| b % size != 0) {
            return Err(PyValueError::new_err(format!(
                "{} has strides that are not whole elements",
                what()
            )));
        }
        check_contiguous(&shape, Some(&elems), &CUDA_TENSOR, what)?;
    }
    let len = shape.iter().map(|&n| n.max(0) as usize).product::<usize>();
    Ok(device_buffer(address, len, dtype))
}

/// Whether `obj` is a `torch.Tensor` (an `nn.Parameter`, another subclass);
/// torch is not imported for this: without it in `sys.modules`, nothing is.
pub fn is_torch_tensor(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    static TENSOR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    let py = obj.py();
    let ty = obj.get_type();
    if ty.name()? == "Tensor" && ty.module()? == "torch" {
        return Ok(true);
    }
    let tensor = match TENSOR.get(py) {
        Some(tensor) => tensor,
        None => {
            let modules = py.import("sys")?.getattr("modules")?;
            let Some(torch) = modules.get_item("torch").ok().filter(|m| !m.is_none()) else {
                return Ok(false);
            };
            let tensor = torch.getattr("Tensor")?.cast_into::<PyType>()?.unbind();
            TENSOR.get_or_init(py, || tensor)
        }
    };
    obj.is_instance(tensor.bind(py))
}

/// Where a torch tensor's memory is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum TorchMemory {
    Cuda,
    Host,
}

/// A CUDA or CPU `torch.Tensor` read through torch's C-implemented accessors,
/// the fast path for the most common producer (its `__dlpack__` is Python code
/// costing tens of microseconds per tensor, and refuses tensors that require
/// grad, which a launch inside an autograd formula or a custom operator gets);
/// `None` for anything else (tensors on other torch devices included).
pub fn torch_tensor_arg(
    obj: &Bound<'_, PyAny>,
    what: &dyn Fn() -> String,
) -> PyResult<Option<(ArgKind, KernelArg, TorchMemory)>> {
    let py = obj.py();
    if !is_torch_tensor(obj)? {
        return Ok(None);
    }
    let memory = if obj.getattr(pyo3::intern!(py, "is_cuda"))?.extract::<bool>()? {
        TorchMemory::Cuda
    } else if obj.getattr(pyo3::intern!(py, "is_cpu"))?.extract::<bool>()? {
        TorchMemory::Host
    } else {
        return Ok(None);
    };
    let dtype_name = obj.getattr(pyo3::intern!(py, "dtype"))?.str()?;
    let dtype = match dtype_name.to_str()? {
        "torch.float32" => DType::F32,
        "torch.float16" => DType::F16,
        "torch.bfloat16" => DType::BF16,
        "torch.float64" => DType::F64,
        "torch.float8_e4m3fn" => DType::F8E4M3,
        "torch.float8_e5m2" => DType::F8E5M2,
        "torch.int8" => DType::I8,
        "torch.uint8" => DType::U8,
        "torch.int16" => DType::I16,
        "torch.uint16" => DType::U16,
        "torch.int32" => DType::I32,
        "torch.uint32" => DType::U32,
        "torch.int64" => DType::I64,
        "torch.uint64" => DType::U64,
        "torch.bool" => DType::Bool,
        other => {
            return Err(PyTypeError::new_err(format!(
                "{} has dtype {other}, which meTile does not support; supported dtypes: {SUPPORTED_DTYPES}",
                what()
            )))
        }
    };
    if !obj
        .call_method0(pyo3::intern!(py, "is_contiguous"))?
        .extract::<bool>()?
    {
        return Err(PyValueError::new_err(format!(
            "{} is a non-contiguous {} (shape {}, strides {}); kernels address memory linearly, \
             so pass .contiguous() instead",
            what(),
            match memory {
                TorchMemory::Cuda => "CUDA tensor",
                TorchMemory::Host => "tensor",
            },
            obj.getattr("shape")?.str()?,
            obj.call_method0("stride")?.str()?
        )));
    }
    let ptr: u64 = obj.call_method0(pyo3::intern!(py, "data_ptr"))?.extract()?;
    let len: usize = obj.call_method0(pyo3::intern!(py, "numel"))?.extract()?;
    // An empty CPU tensor may have no memory; host backends still need an
    // address, and read nothing there.
    let ptr = match (ptr, memory) {
        (0, TorchMemory::Host) => std::ptr::NonNull::<u64>::dangling().as_ptr() as u64,
        _ => ptr,
    };
    let (kind, arg) = device_buffer(ptr, len, dtype);
    Ok(Some((kind, arg, memory)))
}

/// A CUDA tensor as a kernel argument used in place, or a TypeError when the
/// current device cannot read CUDA memory.
pub fn cuda_object_arg(
    obj: &Bound<'_, PyAny>,
    ctx: &ArgContext<'_>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    if ctx.memory.is_none() {
        return Err(PyTypeError::new_err(format!(
            "{} is in CUDA memory, but the current device is {}, which cannot read it; \
             call metile.set_device('cuda') (or set METILE_DEVICE=cuda), or pass a numpy array",
            what(),
            ctx.device_name
        )));
    }
    if dlpack_device(obj)?.is_some() {
        return dlpack_arg(obj, ctx.stream, what);
    }
    cuda_array_interface_arg(obj, what)
}
