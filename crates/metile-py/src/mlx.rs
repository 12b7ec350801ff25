//! MLX arrays (`mlx.core.array`) as kernel arguments.
//!
//! An MLX array's memory is host memory on every MLX device this module
//! meets: the CPU, and Apple GPUs, whose unified memory MLX allocates as
//! shared Metal buffers (DLPack device `kDLMetal`, a host address). Its
//! `__dlpack__` evaluates the array if it is still lazy and hands out that
//! memory, with any dtype MLX has (bfloat16 included, which the buffer
//! protocol cannot describe to numpy). The kernel uses it in place as it does
//! a numpy array, so its stores are what MLX reads afterwards, as MLX's own
//! writes through `np.array(a, copy=False)` are; on a device with memory of
//! its own (cuda) it is staged as a numpy array is. MLX arrays built for CUDA
//! (`kDLCUDA`) are CUDA tensors, handled by `device_args`.

use crate::args::ArgKind;
use crate::device_args::{read_dlpack, ArgContext, TensorKind};
use metile_interp::KernelArg;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

const MLX_ARRAY: TensorKind = TensorKind {
    name: "MLX array",
    contiguous_copy: "mx.contiguous(x)",
};

/// DLPack device types whose addresses the host reads: CPU, pinned CUDA host
/// memory, and Metal (unified memory on Apple silicon).
const HOST_DEVICE_TYPES: [i32; 3] = [1, 3, 8];

/// Whether `obj` is an `mlx.core.array`.
pub fn is_mlx_array(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let ty = obj.get_type();
    Ok(ty.name()? == "array" && ty.module()? == "mlx.core")
}

/// An MLX array as a kernel buffer, used in place (staged on cuda).
pub fn mlx_arg(
    obj: &Bound<'_, PyAny>,
    ctx: &mut ArgContext<'_>,
    what: &dyn Fn() -> String,
) -> PyResult<(ArgKind, KernelArg)> {
    let memory = read_dlpack(obj, None, &MLX_ARRAY, what)?;
    if !HOST_DEVICE_TYPES.contains(&memory.device_type) {
        return Err(PyTypeError::new_err(format!(
            "{} is an MLX array on DLPack device type {}, which meTile cannot address from the host; \
             pass an array on MLX's cpu or gpu device (mx.cpu, mx.gpu on Apple silicon)",
            what(),
            memory.device_type
        )));
    }
    // An empty array may have no memory at all; the kernel reads none of it,
    // but a buffer still needs an address.
    let ptr = if memory.address == 0 {
        std::ptr::NonNull::<u64>::dangling().as_ptr().cast::<u8>()
    } else {
        memory.address as usize as *mut u8
    };
    let arg = KernelArg::Buffer {
        ptr,
        len: memory.len,
        dtype: memory.dtype,
    };
    let arg = crate::args::host_memory_arg(obj.py(), arg, ctx)?;
    Ok((ArgKind::Pointer(memory.dtype), arg))
}
