//! Device allocations and copies for `metile.Buffer` and for staging host
//! arrays. Copies go on the launch stream ([`crate::stream`]) and are waited
//! for, so an upload has landed before later launches on any stream and a
//! download waits for the earlier launches on the launch stream; outside a
//! stream scope they are the synchronous driver calls on the legacy default
//! stream.

use super::driver::{describe, is_sticky};
use super::{current_stream, Context};
use crate::device::{DeviceAllocation, DeviceMemory, Fence};
use crate::error::RuntimeError;
use cudarc::driver::sys as cu;
use std::sync::Arc;

pub struct CudaMemory {
    context: Arc<Context>,
}

impl CudaMemory {
    pub(super) fn new(context: Arc<Context>) -> CudaMemory {
        CudaMemory { context }
    }
}

/// A failed `device_assert` on the GPU, found by a later call: the message the
/// GPU printed names the kernel line (CUDA reports nothing else about it).
pub(super) fn assert_error(kernel: &str) -> RuntimeError {
    RuntimeError::AssertionFailed {
        message: format!(
            "device_assert failed in {kernel}: the GPU printed the assertion's message, kernel line \
             and thread above (on stderr). The CUDA context is now unusable: every later GPU call in \
             this process fails; restart the process to use the GPU again"
        ),
        loc: metile_ir::Loc::unknown(),
    }
}

fn copy_error(code: cu::CUresult, what: &str) -> RuntimeError {
    if code == cu::CUresult::CUDA_ERROR_ASSERT {
        return assert_error("a kernel launched before this copy");
    }
    if is_sticky(code) {
        RuntimeError::Device(format!(
            "a {what} found the GPU faulted by an earlier kernel: {}. The CUDA context is now unusable; \
             restart the process to use the GPU again",
            describe(code)
        ))
    } else {
        RuntimeError::Device(format!("CUDA {what} failed: {}", describe(code)))
    }
}

struct CudaAllocation {
    context: Arc<Context>,
    ptr: u64,
    bytes: usize,
}

impl DeviceAllocation for CudaAllocation {
    fn ptr(&self) -> u64 {
        self.ptr
    }

    fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for CudaAllocation {
    fn drop(&mut self) {
        if self.ptr != 0 && self.context.bind().is_ok() {
            // SAFETY: the allocation came from cuMemAlloc and is freed once; a
            // failure (a faulted context) leaves nothing to do.
            unsafe {
                cu::cuMemFree_v2(self.ptr);
            }
        }
    }
}

impl DeviceMemory for CudaMemory {
    fn alloc(&self, bytes: usize) -> Result<Arc<dyn DeviceAllocation>, RuntimeError> {
        let mut ptr: cu::CUdeviceptr = 0;
        if bytes > 0 {
            self.context.bind()?;
            // SAFETY: the driver writes one device address.
            let code = unsafe { cu::cuMemAlloc_v2(&mut ptr, bytes) };
            if code != cu::CUresult::CUDA_SUCCESS {
                return Err(copy_error(code, &format!("allocation of {bytes} bytes")));
            }
        }
        Ok(Arc::new(CudaAllocation {
            context: self.context.clone(),
            ptr,
            bytes,
        }))
    }

    unsafe fn upload(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), RuntimeError> {
        if bytes == 0 {
            return Ok(());
        }
        self.context.bind()?;
        let stream = current_stream();
        // SAFETY: the caller guarantees `bytes` readable host bytes at `src` and a
        // device allocation of at least `bytes` at `dst`; a copy on a stream is
        // waited for before the host memory is let go.
        let code = unsafe {
            if stream.is_null() {
                cu::cuMemcpyHtoD_v2(dst, src.cast(), bytes)
            } else {
                match cu::cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, stream) {
                    cu::CUresult::CUDA_SUCCESS => cu::cuStreamSynchronize(stream),
                    failed => failed,
                }
            }
        };
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(copy_error(code, "copy to the GPU"));
        }
        Ok(())
    }

    fn owner_of(&self, address: u64) -> Option<u32> {
        let mut managed: u32 = 0;
        let mut ordinal: i32 = -1;
        // SAFETY: each query writes one value of the attribute's documented size
        // (an unsigned int for IS_MANAGED, an int for DEVICE_ORDINAL); an address
        // the driver does not know fails the query, which answers None.
        unsafe {
            let is_managed = cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED;
            if cu::cuPointerGetAttribute((&mut managed as *mut u32).cast(), is_managed, address)
                != cu::CUresult::CUDA_SUCCESS
                || managed != 0
            {
                return None;
            }
            let device = cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL;
            if cu::cuPointerGetAttribute((&mut ordinal as *mut i32).cast(), device, address)
                != cu::CUresult::CUDA_SUCCESS
            {
                return None;
            }
        }
        u32::try_from(ordinal).ok()
    }

    unsafe fn download(&self, src: u64, dst: *mut u8, bytes: usize) -> Result<(), RuntimeError> {
        if bytes == 0 {
            return Ok(());
        }
        self.context.bind()?;
        let stream = current_stream();
        // SAFETY: the caller guarantees `bytes` writable host bytes at `dst` and a
        // device allocation of at least `bytes` at `src`; a copy on a stream is
        // waited for before returning.
        let code = unsafe {
            if stream.is_null() {
                cu::cuMemcpyDtoH_v2(dst.cast(), src, bytes)
            } else {
                match cu::cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, stream) {
                    cu::CUresult::CUDA_SUCCESS => cu::cuStreamSynchronize(stream),
                    failed => failed,
                }
            }
        };
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(copy_error(code, "copy from the GPU"));
        }
        Ok(())
    }

    fn fence(&self) -> Result<Option<Box<dyn Fence>>, RuntimeError> {
        self.context.bind()?;
        let mut event: cu::CUevent = std::ptr::null_mut();
        let flags = cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as std::ffi::c_uint;
        // SAFETY: the driver writes one event handle.
        let code = unsafe { cu::cuEventCreate(&mut event, flags) };
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(copy_error(code, "event creation"));
        }
        let fence = CudaFence {
            context: self.context.clone(),
            event,
        };
        // SAFETY: a live event of this context, recorded on a stream of it.
        let code = unsafe { cu::cuEventRecord(fence.event, current_stream()) };
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(copy_error(code, "event record"));
        }
        Ok(Some(Box::new(fence)))
    }
}

/// An event recorded on the stream a workspace was last used on.
struct CudaFence {
    context: Arc<Context>,
    event: cu::CUevent,
}
// SAFETY: event handles may be used from any thread with their context current.
unsafe impl Send for CudaFence {}
// SAFETY: as above; the driver serialises access internally.
unsafe impl Sync for CudaFence {}

impl Fence for CudaFence {
    fn wait(&self) -> Result<(), RuntimeError> {
        self.context.bind()?;
        // SAFETY: a recorded event of the bound context; the wait is enqueued
        // on a stream of it and needs the event only until it is enqueued.
        let code = unsafe { cu::cuStreamWaitEvent(current_stream(), self.event, 0) };
        if code != cu::CUresult::CUDA_SUCCESS {
            return Err(copy_error(code, "stream wait"));
        }
        Ok(())
    }
}

impl Drop for CudaFence {
    fn drop(&mut self) {
        if self.context.bind().is_ok() {
            // SAFETY: the event is destroyed once; the driver releases it when
            // the work it marks completes.
            unsafe {
                cu::cuEventDestroy_v2(self.event);
            }
        }
    }
}
