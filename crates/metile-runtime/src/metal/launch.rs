//! Dispatching a compiled kernel, the command buffers in flight, and the
//! memory kernels read and write.
//!
//! Buffer arguments are bound by where their memory lives:
//! - inside a `metile.Buffer` (an MTLBuffer with shared storage): that buffer,
//!   at the argument's offset, with no copy; such launches are asynchronous;
//! - a page-aligned numpy array: wrapped in place with
//!   `newBufferWithBytesNoCopy`;
//! - any other numpy array: copied into a staging buffer and, if the kernel
//!   writes it, copied back (a one-time warning says so).
//!
//! Launches that touch numpy memory wait for the GPU before returning, since
//! nothing keeps that memory alive afterwards.

use super::{Inner, Shared};
use crate::device::{CompiledKernel, KernelResources};
use crate::error::RuntimeError;
use crate::msl_launch::{span_ms, ArgBinding, BoundArg};
use crate::shared_memory::{page_rounded, page_size, plan_buffers, BufferSource, Registry, SharedMemory};
use metile_interp::KernelArg;
use objc2::rc::autoreleasepool;
use objc2::runtime::ProtocolObject;
use objc2_metal::{
    MTLBuffer, MTLCommandBuffer, MTLCommandBufferStatus, MTLCommandEncoder, MTLCommandQueue,
    MTLComputeCommandEncoder, MTLComputePipelineState, MTLDevice, MTLResourceOptions, MTLSize,
};
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

type CommandBuffer = Shared<ProtocolObject<dyn MTLCommandBuffer>>;
type Buffer = Shared<ProtocolObject<dyn MTLBuffer>>;

/// A `metile.Buffer`'s memory: an MTLBuffer with shared storage, registered so
/// that launches find it from a pointer into it.
pub(crate) struct MetalMemory {
    buffer: Buffer,
    len: usize,
    registry: Arc<Registry<Buffer>>,
}

impl MetalMemory {
    pub fn register(buffer: Buffer, len: usize, registry: Arc<Registry<Buffer>>) -> MetalMemory {
        registry.insert(buffer.contents().as_ptr().cast(), buffer.length(), buffer.clone());
        MetalMemory {
            buffer,
            len,
            registry,
        }
    }
}

impl SharedMemory for MetalMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.buffer.contents().as_ptr().cast()
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for MetalMemory {
    fn drop(&mut self) {
        // Command buffers still running retain the MTLBuffer themselves.
        self.registry.remove(self.as_ptr());
    }
}

struct InFlight {
    kernel: String,
    command_buffer: CommandBuffer,
}

/// Command buffers committed and not yet known to have finished, and those
/// recorded for `time_ms`.
#[derive(Default)]
pub(crate) struct QueueState {
    in_flight: Vec<InFlight>,
    recording: Option<Vec<CommandBuffer>>,
}

/// The outcome of a finished command buffer: an error names the kernel.
fn outcome(kernel: &str, command_buffer: &ProtocolObject<dyn MTLCommandBuffer>) -> Result<(), RuntimeError> {
    if command_buffer.status() != MTLCommandBufferStatus::Error {
        return Ok(());
    }
    let reason = command_buffer.error().map_or_else(
        || "unknown error".to_string(),
        |e| e.localizedDescription().to_string(),
    );
    Err(RuntimeError::Device(format!(
        "kernel `{kernel}` failed on the GPU: {reason}"
    )))
}

impl Inner {
    fn lock_queue(&self) -> Result<std::sync::MutexGuard<'_, QueueState>, RuntimeError> {
        self.queue_state
            .lock()
            .map_err(|_| RuntimeError::Device("the Metal queue state is poisoned".to_string()))
    }

    /// Waits for every command buffer in flight; the first failure is reported.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        let in_flight = std::mem::take(&mut self.lock_queue()?.in_flight);
        let mut result = Ok(());
        for launch in &in_flight {
            launch.command_buffer.waitUntilCompleted();
            if result.is_ok() {
                result = outcome(&launch.kernel, &launch.command_buffer);
            }
        }
        result
    }

    /// The GPU time from the start of the first command buffer `run` commits
    /// to the end of the last.
    pub fn time_ms(&self, run: &mut dyn FnMut() -> Result<(), RuntimeError>) -> Result<f64, RuntimeError> {
        self.synchronize()?;
        self.lock_queue()?.recording = Some(Vec::new());
        let ran = run().and_then(|()| self.synchronize());
        let recorded = self.lock_queue()?.recording.take().unwrap_or_default();
        ran?;
        Ok(span_ms(recorded.iter().map(|cb| (cb.GPUStartTime(), cb.GPUEndTime()))).unwrap_or(0.0))
    }

    /// Notes a committed command buffer; finished, successful ones are dropped
    /// from the list (failed ones stay until `synchronize` reports them).
    fn committed(
        &self,
        kernel: &str,
        command_buffer: &CommandBuffer,
        asynchronous: bool,
    ) -> Result<(), RuntimeError> {
        let mut state = self.lock_queue()?;
        if let Some(recording) = &mut state.recording {
            recording.push(command_buffer.clone());
        }
        state
            .in_flight
            .retain(|f| f.command_buffer.status() != MTLCommandBufferStatus::Completed);
        if asynchronous {
            state.in_flight.push(InFlight {
                kernel: kernel.to_string(),
                command_buffer: command_buffer.clone(),
            });
        }
        Ok(())
    }
}

pub(crate) struct MetalKernel {
    pub inner: Arc<Inner>,
    pub pipeline: Shared<ProtocolObject<dyn MTLComputePipelineState>>,
    pub binding: ArgBinding,
    pub threadgroup_lengths: Vec<usize>,
    pub threads_per_group: u32,
    pub kernel_name: String,
}

static WARNED_STAGING: AtomicBool = AtomicBool::new(false);

impl MetalKernel {
    /// A buffer for numpy memory that no `metile.Buffer` owns, and whether it is
    /// a copy (to go back after the launch if written).
    ///
    /// # Safety
    /// `ptr` must point to `len` bytes valid for reads and writes until the launch finishes.
    unsafe fn host_buffer(&self, ptr: *mut u8, len: usize) -> Result<(Buffer, bool), RuntimeError> {
        let device: &ProtocolObject<dyn MTLDevice> = &self.inner.device;
        let shared = MTLResourceOptions::StorageModeShared;
        let no_memory = || RuntimeError::Device(format!("Metal cannot make a buffer of {len} bytes"));
        let Some(pointer) = NonNull::new(ptr.cast::<c_void>()).filter(|_| len > 0) else {
            // Metal has no empty buffers; the kernel reads none of this one.
            let buffer = device
                .newBufferWithLength_options(16, shared)
                .ok_or_else(no_memory)?;
            return Ok((Shared(buffer), false));
        };
        if ptr as usize % page_size() == 0 {
            // The whole pages holding the array are mapped, so covering them is safe.
            // SAFETY: page-aligned memory the caller keeps alive until the launch ends.
            let wrapped = unsafe {
                device.newBufferWithBytesNoCopy_length_options_deallocator(
                    pointer,
                    page_rounded(len),
                    shared,
                    None,
                )
            };
            if let Some(buffer) = wrapped {
                return Ok((Shared(buffer), false));
            }
        }
        if !WARNED_STAGING.swap(true, Ordering::Relaxed) {
            crate::notices::warn(
                "numpy arrays that are not page-aligned are copied to the GPU and back at each launch; use \
                 metile.Buffer for zero-copy access"
                    .into(),
            );
        }
        // SAFETY: the caller's contract: `len` readable bytes at `pointer`.
        let buffer = unsafe { device.newBufferWithBytes_length_options(pointer, len, shared) }
            .ok_or_else(no_memory)?;
        Ok((Shared(buffer), true))
    }
}

impl CompiledKernel for MetalKernel {
    fn max_grid(&self) -> [u32; 3] {
        metile_compiler::Target::apple().grid_limits(self.threads_per_group)
    }

    /// Metal reports no register counts: threadgroup memory and threads only.
    fn resources(&self) -> KernelResources {
        KernelResources {
            shared_bytes: Some(self.threadgroup_lengths.iter().sum()),
            threads_per_group: Some(self.threads_per_group),
            ..KernelResources::default()
        }
    }

    unsafe fn launch(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
        // The command buffer and encoder come back autoreleased: drain them per
        // launch, as Python's thread has no pool of its own.
        // SAFETY: forwarded from the caller's contract.
        autoreleasepool(|_| unsafe { self.launch_in_pool(args, grid) })
    }
}

impl MetalKernel {
    /// # Safety
    /// As [`CompiledKernel::launch`].
    unsafe fn launch_in_pool(&self, args: &[KernelArg], grid: [u32; 3]) -> Result<(), RuntimeError> {
        let bound = self.binding.bind(args)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let plan = plan_buffers(&self.kernel_name, &bound, &self.inner.memory)?;
        // One Metal buffer per host region, and whether it is a copy.
        let mut host: Vec<(Buffer, bool)> = Vec::with_capacity(plan.host.len());
        for region in &plan.host {
            // SAFETY: the caller's contract: live buffers for the launch, which
            // waits below for the GPU when host memory is involved.
            host.push(unsafe { self.host_buffer(region.ptr, region.len)? });
        }
        let buffers: Vec<(usize, Buffer, usize)> = plan
            .args
            .into_iter()
            .map(|(index, source)| match source {
                BufferSource::Shared { handle, offset } => (index, handle, offset),
                BufferSource::Host { region } => (index, host[region].0.clone(), 0),
            })
            .collect();
        let touches_host_memory = !host.is_empty();
        let failed = |what: &str| {
            RuntimeError::Device(format!(
                "Metal could not create a {what} for kernel `{}`",
                self.kernel_name
            ))
        };
        let command_buffer = self
            .inner
            .queue
            .commandBuffer()
            .ok_or_else(|| failed("command buffer"))?;
        let encoder = command_buffer
            .computeCommandEncoder()
            .ok_or_else(|| failed("compute command encoder"))?;
        encoder.setComputePipelineState(&self.pipeline);
        for (index, buffer, offset) in &buffers {
            // SAFETY: a live buffer and an offset inside it.
            unsafe { encoder.setBuffer_offset_atIndex(Some(buffer), *offset, *index) };
        }
        for arg in &bound {
            if let BoundArg::Scalar { index, bytes } = arg {
                let pointer = NonNull::new(bytes.as_ptr().cast_mut().cast::<c_void>())
                    .ok_or_else(|| failed("scalar"))?;
                // SAFETY: `bytes` (at most 8 bytes) outlives the call, which copies them.
                unsafe { encoder.setBytes_length_atIndex(pointer, bytes.len(), *index) };
            }
        }
        for (index, &length) in self.threadgroup_lengths.iter().enumerate() {
            // SAFETY: lengths are multiples of 16 within the device limit (checked at compile).
            unsafe { encoder.setThreadgroupMemoryLength_atIndex(length, index) };
        }
        let size = |width: u32, height: u32, depth: u32| MTLSize {
            width: width as usize,
            height: height as usize,
            depth: depth as usize,
        };
        encoder.dispatchThreadgroups_threadsPerThreadgroup(
            size(grid[0], grid[1], grid[2]),
            size(self.threads_per_group, 1, 1),
        );
        encoder.endEncoding();
        command_buffer.commit();
        let command_buffer = Shared(command_buffer);
        self.inner
            .committed(&self.kernel_name, &command_buffer, !touches_host_memory)?;
        if !touches_host_memory {
            return Ok(());
        }
        command_buffer.waitUntilCompleted();
        let result = outcome(&self.kernel_name, &command_buffer);
        for (region, (buffer, staged)) in plan.host.iter().zip(&host) {
            if *staged && region.written {
                // SAFETY: the GPU has finished; both hold `len` bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        buffer.contents().as_ptr().cast::<u8>(),
                        region.ptr,
                        region.len,
                    )
                };
            }
        }
        result
    }
}
