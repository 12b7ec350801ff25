//! The metal backend (macOS): the emitted MSL (the same text msl-emu runs)
//! compiled for the system's default Metal device and dispatched on its
//! command queue, on objc2-metal.
//!
//! - `gpu`: the Apple figures read from the device (family, limits).
//! - `library`: MSL → metallib (Xcode's compiler, cached on disk) or
//!   `newLibraryWithSource`; pipeline states are cached here per specialisation.
//! - `launch`: binding arguments to buffers, dispatch, the queue of command
//!   buffers in flight, synchronisation and GPU timestamps.
//!
//! Argument binding, limits, MSL-line → kernel-line error mapping and the
//! timing arithmetic are shared with msl-emu (`msl_launch`, `shared_memory`)
//! and tested there. This module is compiled on macOS, and type-checked on
//! Linux by `scripts/check-metal.sh`; see docs/metal.md.

mod gpu;
mod launch;
mod library;

pub use gpu::AppleGpu;

use crate::device::{CompileOptions, CompiledKernel, Device, Prebuilt};
use crate::error::RuntimeError;
use crate::msl_launch::{emit, threadgroup_lengths, ArgBinding};
use crate::shared_memory::{Registry, SharedMemory};
use launch::{MetalKernel, MetalMemory, QueueState};
use library::LibraryBuilder;
use metile_compiler::{AppleArch, MslKernel, MslVersion};
use metile_ir::Function;
use objc2::rc::{autoreleasepool, Retained};
use objc2::runtime::ProtocolObject;
use objc2_foundation::NSString;
use objc2_metal::{
    MTLBuffer, MTLCommandQueue, MTLComputePipelineState, MTLCreateSystemDefaultDevice, MTLDevice, MTLLibrary,
    MTLResourceOptions,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A Metal object shared between threads.
pub(crate) struct Shared<T: ?Sized>(pub Retained<T>);

// SAFETY: only thread-safe Metal objects are wrapped: devices, command queues,
// buffers, libraries and pipeline states are documented as safe to use from
// any thread; command buffers are wrapped only once committed, after which
// meTile only waits on them and reads their status, error and timestamps.
unsafe impl<T: ?Sized> Send for Shared<T> {}
unsafe impl<T: ?Sized> Sync for Shared<T> {}

impl<T: objc2::Message> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: ?Sized> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Whether this machine has a Metal device (the default backend then).
pub fn device_present() -> bool {
    MTLCreateSystemDefaultDevice().is_some()
}

/// What the device and its kernels share.
pub(crate) struct Inner {
    device: Shared<ProtocolObject<dyn MTLDevice>>,
    queue: Shared<ProtocolObject<dyn MTLCommandQueue>>,
    gpu: AppleGpu,
    libraries: LibraryBuilder,
    pipelines: Mutex<HashMap<String, Shared<ProtocolObject<dyn MTLComputePipelineState>>>>,
    /// Every live `allocate_shared` buffer, by its contents' address.
    memory: Arc<Registry<Shared<ProtocolObject<dyn MTLBuffer>>>>,
    queue_state: Mutex<QueueState>,
}

pub struct MetalDevice {
    inner: Arc<Inner>,
}

impl MetalDevice {
    /// The system's default Metal device and one command queue on it.
    pub fn open() -> Result<MetalDevice, RuntimeError> {
        let device = MTLCreateSystemDefaultDevice()
            .ok_or_else(|| RuntimeError::Unavailable("this Mac has no Metal device".to_string()))?;
        let queue = device
            .newCommandQueue()
            .ok_or_else(|| RuntimeError::Unavailable("Metal could not create a command queue".to_string()))?;
        let gpu = AppleGpu::of(&device);
        let libraries = LibraryBuilder::new(gpu.family_name());
        Ok(MetalDevice {
            inner: Arc::new(Inner {
                device: Shared(device),
                queue: Shared(queue),
                gpu,
                libraries,
                pipelines: Mutex::new(HashMap::new()),
                memory: Arc::new(Registry::default()),
                queue_state: Mutex::new(QueueState::default()),
            }),
        })
    }

    /// The Apple figures of the device (the target description's source).
    pub fn gpu(&self) -> &AppleGpu {
        &self.inner.gpu
    }

    fn pipeline(
        &self,
        msl: &metile_compiler::MslKernel,
    ) -> Result<Shared<ProtocolObject<dyn MTLComputePipelineState>>, RuntimeError> {
        let inner = &self.inner;
        let key = inner.libraries.key(msl);
        if let Some(found) = inner.pipelines.lock().ok().and_then(|p| p.get(&key).cloned()) {
            return Ok(found);
        }
        let library: Shared<ProtocolObject<dyn MTLLibrary>> =
            inner.libraries.build(&inner.device, msl, &key)?;
        let function = library
            .newFunctionWithName(&NSString::from_str(&msl.kernel_name))
            .ok_or_else(|| RuntimeError::Compile {
                message: format!("the Metal library has no kernel `{}`", msl.kernel_name),
                loc: None,
            })?;
        let pipeline = inner
            .device
            .newComputePipelineStateWithFunction_error(&function)
            .map_err(|e| RuntimeError::Compile {
                message: format!(
                    "Metal cannot build a pipeline for kernel `{}`: {}",
                    msl.kernel_name,
                    e.localizedDescription()
                ),
                loc: None,
            })?;
        let allowed = pipeline.maxTotalThreadsPerThreadgroup();
        if (msl.threads_per_group as usize) > allowed {
            return Err(RuntimeError::Compile {
                message: format!(
                    "kernel `{}` needs {} threads per threadgroup, but its pipeline allows {allowed} on {} \
                     (too many registers per thread); launch it with fewer num_sgs",
                    msl.kernel_name, msl.threads_per_group, inner.gpu.name
                ),
                loc: None,
            });
        }
        let pipeline = Shared(pipeline);
        if let Ok(mut pipelines) = inner.pipelines.lock() {
            pipelines.insert(key, pipeline.clone());
        }
        Ok(pipeline)
    }
}

impl MetalDevice {
    /// A launchable kernel of emitted MSL, its pipeline built once.
    fn load_msl(&self, msl: MslKernel) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let pipeline = autoreleasepool(|_| self.pipeline(&msl))?;
        Ok(Arc::new(MetalKernel {
            inner: self.inner.clone(),
            pipeline,
            binding: ArgBinding::new(&msl),
            threadgroup_lengths: threadgroup_lengths(&msl),
            threads_per_group: msl.threads_per_group,
            kernel_name: msl.kernel_name,
        }))
    }
}

impl Device for MetalDevice {
    fn compile_target(&self, options: &CompileOptions) -> Option<metile_compiler::Target> {
        Some(options.apple_arch.unwrap_or_default().target())
    }

    fn name(&self) -> &'static str {
        "metal"
    }

    fn model(&self) -> String {
        format!("{} ({})", self.inner.gpu.name, self.inner.gpu.family_name())
    }

    fn compile(
        &self,
        func: Arc<Function>,
        options: &CompileOptions,
    ) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        if options.apple_arch == Some(AppleArch::Apple10) && !self.inner.gpu.has_matmul2d {
            return Err(RuntimeError::InvalidLaunch(format!(
                "the launch option arch='apple10' compiles for Apple10 GPUs (Metal 4 tensor ops); this device, \
                 {}, is {}",
                self.inner.gpu.name,
                self.inner.gpu.family_name()
            )));
        }
        let msl = emit(&func, options, &self.inner.gpu.threadgroup_limits())?;
        self.load_msl(msl)
    }

    fn load_prebuilt(&self, kernel: Prebuilt) -> Result<Arc<dyn CompiledKernel>, RuntimeError> {
        let Prebuilt::Msl(msl) = kernel else {
            return Err(RuntimeError::Unavailable(
                "the metal device runs MSL; this artifact holds CUDA C++ (for the cuda device)".into(),
            ));
        };
        if msl.language_version == MslVersion::V4_0 && !self.inner.gpu.has_matmul2d {
            return Err(RuntimeError::Unavailable(format!(
                "the artifact `{}` is MSL 4.0 for Apple10 GPUs (Metal 4 tensor ops); this device, {}, is {}",
                msl.kernel_name,
                self.inner.gpu.name,
                self.inner.gpu.family_name()
            )));
        }
        self.inner.gpu.threadgroup_limits().check(&msl)?;
        self.load_msl(msl)
    }

    fn synchronize(&self) -> Result<(), RuntimeError> {
        self.inner.synchronize()
    }

    fn time_ms(
        &self,
        run: &mut dyn FnMut() -> Result<(), RuntimeError>,
    ) -> Option<Result<f64, RuntimeError>> {
        Some(self.inner.time_ms(run))
    }

    fn allocate_shared(&self, bytes: usize) -> Option<Result<Arc<dyn SharedMemory>, RuntimeError>> {
        let allocated = self
            .inner
            .device
            .newBufferWithLength_options(bytes.max(1), MTLResourceOptions::StorageModeShared)
            .ok_or_else(|| RuntimeError::Device(format!("Metal cannot allocate a buffer of {bytes} bytes")))
            .map(|buffer| {
                Arc::new(MetalMemory::register(
                    Shared(buffer),
                    bytes,
                    self.inner.memory.clone(),
                )) as Arc<dyn SharedMemory>
            });
        Some(allocated)
    }
}
