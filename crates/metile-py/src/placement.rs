//! Where a launch runs on a device with memory of its own (cuda): which GPU,
//! and which stream.
//!
//! * The GPU: where the process sees several, the one its tensor arguments
//!   live on (arguments on two GPUs are refused).
//! * The stream: a launch that takes a CUDA tensor of torch or CuPy goes on
//!   that framework's current stream for the launch's GPU
//!   (`torch.cuda.current_stream(device)`, `cupy.cuda.get_current_stream()`),
//!   so it is ordered after the framework work queued before it, and the work
//!   queued after it, with no synchronisation. Everything the launch enqueues
//!   goes there ([`metile_runtime::stream`]). Launches without such tensors
//!   keep the stream current on the calling thread (the legacy default stream
//!   outside a timed region).
//!
//! Host values (scalars, numpy arrays, Buffers) are skipped without attribute
//! lookups, and the stream is looked up once per launch through a cached
//! function, so a launch with only numpy or Buffer arguments pays nothing.

use crate::device_args::{dlpack_device, DLPACK_CUDA};
use metile_runtime::{Device, DeviceMemory};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use std::sync::Arc;

/// A framework whose current stream a launch follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framework {
    Torch,
    CuPy,
}

/// The GPU and framework a launch's arguments decide.
#[derive(Default)]
pub struct Placement {
    /// The GPU its tensors live on, where the process sees several.
    pub gpu: Option<u32>,
    /// The framework of its first CUDA tensor of torch or CuPy.
    pub framework: Option<Framework>,
}

/// Scalars, Buffers and numpy arrays: values that go wherever the launch goes.
fn is_host_value(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<pyo3::types::PyInt>()
        || obj.is_instance_of::<pyo3::types::PyFloat>()
        || obj.is_instance_of::<crate::buffer::Buffer>()
        || obj.is_instance_of::<numpy::PyUntypedArray>()
}

/// The framework that defines `ty`, by its module (`torch.Tensor`,
/// `torch.nn.Parameter`, `cupy.ndarray`, ...).
fn framework_of(ty: &Bound<'_, PyType>) -> PyResult<Option<Framework>> {
    let module = ty.module()?;
    let module = module.to_str()?;
    let root = module.split('.').next().unwrap_or(module);
    Ok(match root {
        "torch" => Some(Framework::Torch),
        "cupy" => Some(Framework::CuPy),
        _ => None,
    })
}

/// The GPU `obj` lives on, if it is a tensor in one GPU's memory: torch's
/// device index, DLPack's device id, or the driver's answer for a
/// `__cuda_array_interface__` address.
fn gpu_of(
    obj: &Bound<'_, PyAny>,
    framework: Option<Framework>,
    memory: &dyn DeviceMemory,
) -> PyResult<Option<u32>> {
    let py = obj.py();
    if framework == Some(Framework::Torch) && obj.hasattr(pyo3::intern!(py, "get_device"))? {
        let index: i64 = obj.call_method0(pyo3::intern!(py, "get_device"))?.extract()?;
        return Ok(u32::try_from(index).ok());
    }
    if let Some((kind, id)) = dlpack_device(obj)? {
        return Ok((kind == DLPACK_CUDA).then(|| u32::try_from(id).ok()).flatten());
    }
    if !obj.hasattr("__cuda_array_interface__")? {
        return Ok(None);
    }
    let (address, _): (u64, bool) = obj
        .getattr("__cuda_array_interface__")?
        .get_item("data")?
        .extract()?;
    Ok(memory.owner_of(address))
}

/// The GPU and the framework of a launch's runtime arguments on `current`, a
/// device with memory of its own. Tensors on two GPUs are refused: a kernel
/// reads one GPU's memory.
pub fn placement(
    args: &[(&str, &Bound<'_, PyAny>)],
    current: &Arc<dyn Device>,
    kernel: &str,
) -> PyResult<Placement> {
    let Some(memory) = current.memory() else {
        return Ok(Placement::default());
    };
    let several = current.count() > 1;
    let mut placement = Placement::default();
    let mut first_gpu: Option<(u32, &str)> = None;
    for &(name, obj) in args {
        if is_host_value(obj) {
            continue;
        }
        let framework = framework_of(&obj.get_type())?;
        if framework.is_none() && !several {
            continue;
        }
        let Some(gpu) = gpu_of(obj, framework, memory)? else {
            continue;
        };
        if placement.framework.is_none() {
            placement.framework = framework;
        }
        if !several {
            continue;
        }
        match first_gpu {
            Some((first, first_name)) if first != gpu => {
                return Err(PyValueError::new_err(format!(
                    "{kernel}: argument '{first_name}' is on cuda:{first} and argument '{name}' on cuda:{gpu}; \
                     a kernel runs on one GPU, so move them to one device first (e.g. tensor.to('cuda:{first}'))"
                )));
            }
            Some(_) => {}
            None => first_gpu = Some((gpu, name)),
        }
    }
    placement.gpu = first_gpu.map(|(gpu, _)| gpu);
    Ok(placement)
}

/// `framework`'s current stream on GPU `gpu`, as a raw `CUstream` handle (0:
/// the legacy default stream).
pub fn framework_stream(py: Python<'_>, framework: Framework, gpu: u32) -> PyResult<u64> {
    match framework {
        Framework::Torch => {
            // torch's C accessor (what Triton's launcher calls): one call, no
            // Stream object; `torch.cuda.current_stream` where it is missing.
            static RAW_STREAM: PyOnceLock<Option<Py<PyAny>>> = PyOnceLock::new();
            let raw = RAW_STREAM.get_or_try_init(py, || -> PyResult<Option<Py<PyAny>>> {
                let c = py.import("torch")?.getattr("_C")?;
                Ok(c.getattr("_cuda_getCurrentRawStream").ok().map(Bound::unbind))
            })?;
            match raw {
                Some(raw) => raw.bind(py).call1((gpu,))?.extract(),
                None => py
                    .import("torch")?
                    .getattr("cuda")?
                    .call_method1("current_stream", (gpu,))?
                    .getattr("cuda_stream")?
                    .extract(),
            }
        }
        Framework::CuPy => {
            static CURRENT_STREAM: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
            let current = CURRENT_STREAM.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(py
                    .import("cupy")?
                    .getattr("cuda")?
                    .getattr("get_current_stream")?
                    .unbind())
            })?;
            current.bind(py).call0()?.getattr("ptr")?.extract()
        }
    }
}

/// The stream a timed region on GPU `gpu` measures, where no argument says:
/// torch's current stream once torch has started CUDA, else CuPy's where it
/// is imported, else `None` (the legacy default stream).
pub fn ambient_stream(py: Python<'_>, gpu: u32) -> PyResult<Option<u64>> {
    let modules = py.import("sys")?.getattr("modules")?;
    if let Some(torch) = modules.get_item("torch").ok().filter(|m| !m.is_none()) {
        let started: bool = torch.getattr("cuda")?.call_method0("is_initialized")?.extract()?;
        if started {
            return framework_stream(py, Framework::Torch, gpu).map(Some);
        }
    }
    if modules.get_item("cupy").ok().is_some_and(|m| !m.is_none()) {
        return framework_stream(py, Framework::CuPy, gpu).map(Some);
    }
    Ok(None)
}
